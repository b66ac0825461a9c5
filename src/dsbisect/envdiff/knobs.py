"""The documented knobs ``dsbisect workaround`` tries, one at a time, at the bad point: each a
setting that users ship to avoid a distributed regression, with where it is documented and what
it may cost.  Kept here, in the repository, so that adding one is a reviewed change.

``applies``: ``nccl`` (a CUDA run), ``gloo`` (a CPU run), ``deepspeed`` (a config the command
names: a DeepSpeed JSON), ``accelerate`` (an accelerate config YAML), ``checkpointing`` (a command
line that turns transformers' ``--gradient_checkpointing`` on: ``flagknobs.line_kinds``), ``any``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsbisect.envdiff.settings import Where

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
TORCH_ENV = "https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html"
DS_CONFIG = "https://www.deepspeed.ai/docs/config-json/"
ACCELERATE_CONFIG = "https://huggingface.co/docs/accelerate/package_reference/cli#accelerate-config"
TRAINING_ARGS = "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"


@dataclass(frozen=True)
class Knob:
    where: Where
    path: tuple[str, ...]
    value: str  # a variable's value; a config key's as JSON; an option's as typed ("": a switch)
    applies: str
    cost: str
    source: str

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def describe(self) -> str:
        if self.where is Where.FLAG and not self.value:
            return f"flag {self.name}"
        return f"{self.where.value} {self.name}={self.value}"


def _env(name: str, value: str, applies: str, cost: str, source: str) -> Knob:
    return Knob(Where.ENV, (name,), value, applies, cost, source)


def _flag(name: str, value: str, applies: str, cost: str, source: str) -> Knob:
    return Knob(Where.FLAG, (name,), value, applies, cost, source)


def _key(path: str, value: str, applies: str, cost: str, source: str = DS_CONFIG) -> Knob:
    return Knob(Where.CONFIG, tuple(path.split(".")), value, applies, cost, source)


KNOBS: tuple[Knob, ...] = (
    # NCCL and torch's process group (CUDA runs)
    _env("TORCH_NCCL_USE_COMM_NONBLOCKING", "0", "nccl", "slower communicator init; no abort of a hung init",
         f"{TORCH_ENV}; pytorch#153960, pytorch PR #154055 (the default turned off in 2.7.1)"),
    _env("NCCL_P2P_DISABLE", "1", "nccl", "intra-node traffic through host memory: slower collectives",
         f"{NCCL_ENV}; xgboost#11242"),
    _env("NCCL_SHM_DISABLE", "1", "nccl", "no shared-memory transport: slower intra-node collectives", NCCL_ENV),
    _env("NCCL_IB_DISABLE", "1", "nccl", "no InfiniBand: inter-node traffic over sockets, much slower", NCCL_ENV),
    _env("NCCL_CUMEM_ENABLE", "0", "nccl", "NCCL's older buffer registration; more memory on some setups",
         NCCL_ENV),
    _env("NCCL_NVLS_ENABLE", "0", "nccl", "no NVLink SHARP: slower all-reduce on NVSwitch systems", NCCL_ENV),
    _env("NCCL_ALGO", "Ring", "nccl", "ring only: slower at scale than tree", NCCL_ENV),
    _env("NCCL_PROTO", "Simple", "nccl", "no LL/LL128 protocols: higher latency for small messages", NCCL_ENV),
    _env("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", "nccl", "none: a failed collective aborts the process group",
         TORCH_ENV),
    _env("CUDA_DEVICE_MAX_CONNECTIONS", "1", "nccl", "less overlap of kernels and communication",
         "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#cuda-environment-variables"),
    # gloo (CPU runs)
    _env("GLOO_SOCKET_IFNAME", "lo", "gloo", "single node only: ranks talk over loopback",
         "https://docs.pytorch.org/docs/stable/distributed.html#common-environment-variables"),
    _env("OMP_NUM_THREADS", "1", "gloo", "one thread per rank: slower CPU compute",
         "https://docs.pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html"),
    # DeepSpeed ZeRO (a config the command names)
    _key("zero_optimization.overlap_comm", "false", "deepspeed", "no overlap of reduction and backward: slower steps;"
         " DeepSpeed#7965 (ZeRO-2 nan fixed in 0.19.0)"),
    _key("zero_optimization.contiguous_gradients", "false", "deepspeed",
         "more fragmentation during the backward, so a higher peak of memory"),
    _key("zero_optimization.reduce_bucket_size", "50000000", "deepspeed",
         "smaller reduction buckets: more, smaller collectives"),
    _key("zero_optimization.allgather_bucket_size", "50000000", "deepspeed",
         "smaller all-gather buckets: more, smaller collectives"),
    _key("zero_optimization.round_robin_gradients", "false", "deepspeed", "none beyond the default"),
    _key("zero_optimization.stage3_prefetch_bucket_size", "0", "deepspeed",
         "no parameter prefetch in ZeRO-3: slower forward and backward"),
    _key("zero_optimization.offload_optimizer.device", '"none"', "deepspeed",
         "optimizer states on the GPU: more GPU memory"),
    _key("zero_optimization.offload_param.device", '"none"', "deepspeed", "parameters on the GPU: more GPU memory"),
    _key("zero_force_ds_cpu_optimizer", "false", "deepspeed",
         "a client optimizer (torch's) steps the offloaded states: slower than DeepSpeedCPUAdam",
         "https://github.com/deepspeedai/DeepSpeed/pull/2971 (0.8.3: ZeRO-Offload refuses other optimizers"
         " unless this is false; the message of its ZeRORuntimeException names the key)"),
    # accelerate (its config YAML)
    _key("dataloader_config.dispatch_batches", "false", "accelerate",
         "each process loads its own batches: more data-loading work per rank", ACCELERATE_CONFIG),
    _key("dataloader_config.even_batches", "false", "accelerate", "the last batch may differ in size across ranks",
         ACCELERATE_CONFIG),
    _key("dataloader_config.non_blocking", "false", "accelerate", "host-to-device copies block: slower input",
         ACCELERATE_CONFIG),
    # transformers' Trainer, its TrainingArguments given as options of the script (HfArgumentParser)
    _flag("--gradient_checkpointing_kwargs", '{"use_reentrant": false}', "checkpointing",
          "the variant PyTorch recommends; one user saw more memory than reentrant (accelerate#389)",
          f"{TRAINING_ARGS}; accelerate#389, trl#4782 (trl PR #4811 made it trl's default)"),
    _flag("--ddp_find_unused_parameters", "false", "checkpointing",
          "DDP raises if a step really leaves a parameter without a gradient",
          f"{TRAINING_ARGS}; transformers PR #9820 (off by default with checkpointing)"),
    _flag("--gradient_checkpointing", "false", "checkpointing",
          "no activation checkpointing: the activations' memory comes back", TRAINING_ARGS),
)


def parse_knob(text: str) -> Knob:
    """A user's own candidate: ``env:NAME=VALUE``, ``config:a.b=JSON`` or ``flag:--name=VALUE``
    (``flag:--name``: a switch) (``--knob``)."""
    from dsbisect.core.errors import InputError

    where, colon, rest = text.partition(":")
    name, eq, value = rest.partition("=")
    if where == "flag" and colon and name.startswith("-") and name.strip("-"):
        return _flag(name, value, "any", "(your candidate)", "given with --knob")
    if not colon or not eq or not name or where not in ("env", "config"):
        raise InputError(f"--knob {text}: give env:NAME=VALUE, config:KEY.PATH=VALUE or flag:--NAME=VALUE")
    if where == "config":
        import json

        try:
            json.loads(value)
        except ValueError:
            value = json.dumps(value)  # a bare word is a string
        return _key(name, value, "any", "(your candidate)", "given with --knob")
    return _env(name, value, "any", "(your candidate)", "given with --knob")
