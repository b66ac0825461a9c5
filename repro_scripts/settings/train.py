"""A stand-in for a training job whose behaviour depends on its settings (docs/how-to/settings.md):
it reads a DeepSpeed-like YAML config and fails when overlap_comm and contiguous_gradients are
both on (the kind of interaction DeepSpeed #7965 fixed), or when TOY_P2P_DISABLE=1 is set."""

import os
import sys

import yaml

path = sys.argv[sys.argv.index("--config") + 1]
with open(path) as f:
    cfg = yaml.safe_load(f)
zero = cfg.get("zero_optimization", {})
offload = zero.get("offload_optimizer", {})
if offload.get("device") == "nvme" and "nvme_path" not in offload:
    print("offload_optimizer.device nvme needs nvme_path: this config cannot run")
    sys.exit(125)  # untestable, as git bisect run reads it
if zero.get("overlap_comm") and zero.get("contiguous_gradients"):
    sys.exit("step 1: loss is nan (overlap_comm with contiguous_gradients)")
if os.environ.get("TOY_P2P_DISABLE") == "1":
    sys.exit("TOY_P2P_DISABLE=1: the ranks cannot reach each other")
print("step 1: loss 2.31; step 2: loss 2.07")
