"""dsbisect: find the release and commit of DeepSpeed, Transformers or Accelerate that broke a distributed job."""

__version__ = "0.1.1"
