"""What the machine and a point venv are: GPUs, torch, CUDA, NCCL, package versions.

``import_check`` runs inside the point venv: it imports the point's packages (an import
that fails makes the point untestable, a SKIP) and reports versions.  ``gpus`` asks
``nvidia-smi`` what the machine has, before any venv is built.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from . import __version__, proc
from .model import ImportCheck

CHECK_CODE = r"""
import importlib, importlib.metadata as md, json, os, sys, traceback
want = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "versions": {}, "error": ""}

def tops(dist):
    names = (dist.read_text("top_level.txt") or "").split()
    if not names:
        names = sorted({f.parts[0].removesuffix(".py") for f in (dist.files or [])
                        if f.parts and not f.parts[0].endswith((".dist-info", ".data", ".pth"))
                        and f.parts[0] not in ("..", "bin")})
    return [n for n in names if n.isidentifier() and not n.startswith("_") and n not in ("tests", "test")]

for name in want:
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        out["error"] = f"{name} is not installed"
        break
    for mod in tops(dist):
        try:
            importlib.import_module(mod)
        except BaseException as e:
            last = f"{type(e).__name__}: {e}".splitlines()[0][:400]
            out["error"] = f"import {mod} ({name}) failed: {last}"
            break
    if out["error"]:
        break
for name in ["torch", "deepspeed", "transformers", "accelerate", "numpy", "pydantic", *want]:
    try:
        out["versions"][name] = md.version(name)
    except md.PackageNotFoundError:
        pass
try:
    import torch
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        try:
            out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            pass
except BaseException as e:
    out["error"] = out["error"] or f"import torch failed: {type(e).__name__}: {e}"
print("DSBISECT-CHECK " + json.dumps(out))
"""


def import_check(python: Path, packages: list[str], env: dict[str, str], timeout: float = 600) -> ImportCheck:
    """Import ``packages`` (distribution names) in the venv of ``python`` and read its versions."""
    done = proc.run([python, "-c", CHECK_CODE, json.dumps(packages)], env=env, timeout=timeout)
    if done.returncode is None and done.error.startswith("no answer"):
        return ImportCheck(False, f"importing {', '.join(packages)} took over {timeout:g} s", {})
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("DSBISECT-CHECK ")), None)
    if line is None:
        return ImportCheck(False, f"the venv's python failed at start: {done.last_line()[:300]}", {})
    facts = json.loads(line.removeprefix("DSBISECT-CHECK "))
    error = facts.pop("error", "")
    return ImportCheck(not error, error, facts)


@functools.lru_cache(maxsize=None)
def _smi_names() -> tuple[str, ...]:
    """The machine's GPUs by physical index, asked of nvidia-smi once per process (it can take
    a second or more per call where persistence mode is off)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    out = proc.run([smi, "--query-gpu=name", "--format=csv,noheader"], timeout=30)
    if not out.ok:
        return ()
    return tuple(ln.strip() for ln in out.stdout.splitlines() if ln.strip())


def gpus() -> list[str]:
    """Names of the CUDA GPUs this process may use (CUDA_VISIBLE_DEVICES honoured)."""
    names = list(_smi_names())
    if not names:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return names
    picked = []
    for tok in visible.split(","):
        tok = tok.strip()
        if tok.isdigit() and int(tok) < len(names):
            picked.append(names[int(tok)])
    return picked


def gpu_indices() -> list[int]:
    """Physical indices of the GPUs this process may use (for the launcher's ``--include``)."""
    names = gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(len(names)))
    ids = [int(t) for t in visible.split(",") if t.strip().isdigit()]
    return ids[: len(names)]


def host() -> dict:
    """The machine dsbisect runs on: stored with every run."""
    return {
        "name": platform.node(),
        "dsbisect": __version__,
        "host_python": sys.version.split()[0],
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "gpus": gpus(),
    }


def describe_host(h: dict) -> str:
    g = h.get("gpus") or []
    name = f"{h['name']}: " if h.get("name") else ""
    return (f"host {name}{h.get('platform', '?')}, {h.get('cpus', '?')} CPUs, "
            f"{len(g)} GPU{'s' if len(g) != 1 else ''}{' (' + g[0] + ')' if g else ''}")


def describe_env(facts: dict) -> str:
    """One line: python, torch, CUDA, NCCL, GPUs."""
    v = facts.get("versions", {})
    parts = [f"python {facts.get('python', '?')}", f"torch {v.get('torch', '?')}"]
    if facts.get("cuda"):
        parts.append(f"CUDA {facts['cuda']}")
    if facts.get("nccl"):
        parts.append(f"NCCL {facts['nccl']}")
    g = facts.get("gpus") or []
    parts.append(f"{len(g)}× {g[0]}" if g else "no GPU")
    return ", ".join(parts)
