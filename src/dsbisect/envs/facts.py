"""What the machine and a point venv are: GPUs, torch, CUDA, NCCL, package versions.

``import_check`` runs inside the point venv: it imports the point's packages (an import
that fails makes the point untestable, a SKIP) and reports versions, and the nvcc of the
toolkit torch would build extensions with.  ``hook_check`` reads the same facts when the
start-up hook made the check inside the run itself (no interpreter of its own).  ``gpus`` asks ``nvidia-smi`` what the machine
has, before any venv is built; ``host`` adds what DeepSpeed's ``ds_report`` and bug template
ask about the machine (driver, RAM, /dev/shm, GPU topology, CPU model), gathered once per
process.  Every outside command goes through ``proc.run``, and a missing one (no GPU, no
toolkit) leaves its fact out instead of failing.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import platform
import re
import shutil
import sys
import threading
from importlib import resources
from pathlib import Path

from dsbisect import __version__
from dsbisect.core import proc
from dsbisect.core.files import read_small
from dsbisect.records.run import Host, ImportCheck, RunFacts


# One ast.parse at a time: CPython 3.11.7's parser raised "SystemError: AST constructor recursion
# depth mismatch" when two threads parsed at once (two venvs' import checks built together).
_PARSE = threading.Lock()


def _hook_functions(*names: str) -> str:
    """The source of functions of the start-up hook, for code run in a point venv: the separate
    import check and the hook's check inside the run are the same code (the hook must stay one
    self-contained file, and importing it starts it, so its text is taken, not imported)."""
    src = resources.files("dsbisect").joinpath("_hook/dsbisect_hook.py").read_text()
    with _PARSE:
        tree = ast.parse(src)
    found = {n.name: ast.get_source_segment(src, n) for n in tree.body
             if isinstance(n, ast.FunctionDef) and n.name in names}
    missing = set(names) - set(found)
    if missing:  # a renamed hook function: fails the first import check of any test run
        raise RuntimeError(f"dsbisect_hook.py has no {', '.join(sorted(missing))}")
    return "\n\n".join(found[n] for n in names) + "\n\n"


@functools.cache
def check_code() -> str:
    """The separate import check's script (built once, when first needed: `report` and `show`
    import this module and never run it)."""
    return _hook_functions(*_CHECK_FUNCTIONS) + _CHECK_MAIN


@functools.cache
def node_check_code() -> str:
    """The script every node of a multi-node case runs with the point venv's python: the same
    check (nothing imported but torch), answered on one ``DSBISECT-NODE`` line."""
    return _hook_functions(*_CHECK_FUNCTIONS) + _NODE_MAIN


# The import check is the start-up hook's (``_venv_facts``): the hook runs inside the venv's
# python, where dsbisect cannot be imported, so the one copy is the hook's source and the
# separate check and the node check run its functions' text.
_CHECK_FUNCTIONS = ("_top_modules", "_import_error", "_venv_facts")

_CHECK_MAIN = r"""
import json, os, sys
answer = os.dup(1)  # the answer's own line; what the packages print goes to stderr (kept capped)
os.dup2(2, 1)
out = _venv_facts(json.loads(sys.argv[1]), True)
sys.stdout.flush()
os.write(answer, ("DSBISECT-CHECK " + json.dumps(out) + "\n").encode())
"""

_NODE_MAIN = r"""
import json, sys
found = _venv_facts([], True)
torch = sys.modules.get("torch")  # the torch that imports there, whatever its metadata says
out = {"python": sys.executable, "torch": getattr(torch, "__version__", None), "cuda": found.get("cuda"),
       "gpus": len(found.get("gpus", [])), "nccl": found.get("nccl"), "error": found["error"]}
print("DSBISECT-NODE " + json.dumps(out))
"""


MORTAL = {"DSBISECT_DIE_WITH_PARENT": "1"}  # the venv's start-up hook: dies with dsbisect, even of kill -9


def import_check(python: Path, packages: list[str], env: dict[str, str], timeout: float = 600) -> ImportCheck:
    """Import ``packages`` (distribution names) in the venv of ``python`` and read its versions."""
    done = proc.run([python, "-c", check_code(), json.dumps(packages)], env=env | MORTAL, timeout=timeout)
    if done.returncode is None and done.error.startswith("no answer"):
        return ImportCheck(False, f"importing {', '.join(packages)} took over {timeout:g} s")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("DSBISECT-CHECK ")), None)
    if line is None:
        return ImportCheck(False, f"the venv's python failed at start: {done.last_line()[:300]}")
    return _check(json.loads(line.removeprefix("DSBISECT-CHECK ")))


def hook_check(path: Path) -> ImportCheck | None:
    """The import check the start-up hook made inside a run (``DSBISECT_CHECK_IMPORTS``), as
    ``import_check`` gives it; None when the run left none (it never reached an interpreter
    of the point venv, or the file is damaged)."""
    try:
        found = json.loads(read_small(path))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("versions"), dict):
        return None
    found.pop("pid", None)
    return _check(found)


def _check(found: dict) -> ImportCheck:
    """The check's answer (``_CHECK_MAIN``'s JSON) as an ImportCheck: its error is the reason, and a
    CUDA torch's home says which nvcc would build its extensions ("none" if no toolkit)."""
    error = str(found.pop("error", "") or "")
    cuda = "cuda_home" in found  # a CUDA torch
    cuda_home = str(found.pop("cuda_home", "") or "")
    facts = RunFacts.from_json(found)
    if cuda:
        facts |= RunFacts.of(nvcc=nvcc_version(cuda_home))
    return ImportCheck(not error, error, facts)


@functools.cache
def nvcc_version(cuda_home: str) -> str:
    """``nvcc --version`` of the toolkit at ``cuda_home`` as "13.0.88", or "none" (asked once per toolkit)."""
    nvcc = Path(cuda_home) / "bin" / "nvcc" if cuda_home else None
    if nvcc is None or not nvcc.is_file():
        return "none"
    out = proc.run([nvcc, "--version"], timeout=60)
    if not out.ok:
        return "none"
    m = re.search(r"release [\d.]+, V([\w.]+)", out.stdout) or re.search(r"release ([\d.]+)", out.stdout)
    return m[1] if m else (proc.last_line(out.stdout)[:80] or "none")


@functools.cache
def _smi_gpus() -> tuple[tuple[str, str], ...]:
    """The machine's GPUs by physical index as (name, driver version), asked of nvidia-smi once
    per process (it can take a second or more per call where persistence mode is off)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    out = proc.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=30)
    if not out.ok:
        return ()
    rows = []
    for ln in out.stdout.splitlines():
        if ln.strip():
            name, _, driver = ln.rpartition(",") if "," in ln else (ln, "", "")
            rows.append((name.strip(), driver.strip()))
    return tuple(rows)


def _smi_names() -> tuple[str, ...]:
    return tuple(name for name, _ in _smi_gpus())


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


def host() -> Host:
    """The machine dsbisect runs on: stored with every run.  The ``ds_report``-style facts
    (``machine``) are gathered once per process; the GPUs follow CUDA_VISIBLE_DEVICES."""
    return Host.from_json({
        "name": platform.node(),
        "dsbisect": __version__,
        "host_python": sys.version.split()[0],
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "gpus": gpus(),
    } | machine())


@functools.cache
def machine() -> dict:
    """What DeepSpeed's bug template asks of the machine: CPU model, RAM, /dev/shm, NVIDIA driver,
    GPU topology.  A fact that cannot be read is left out."""
    out: dict = {}
    cpu = cpu_model()
    if cpu:
        out["cpu_model"] = cpu
    ram = ram_bytes()
    if ram:
        out["ram_bytes"] = ram
    try:
        out["shm_bytes"] = shutil.disk_usage("/dev/shm").total
    except OSError:
        pass
    smi = _smi_gpus()
    drivers = list(dict.fromkeys(d for _, d in smi if d))
    if drivers:
        out["driver"] = ", ".join(drivers)
    if len(smi) >= 2:
        topo = topology()
        if topo:
            out["topology"] = topo
    return out


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` knows; "" if nothing."""
    try:
        for ln in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = ln.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or ""


def ram_bytes() -> int | None:
    """Total memory: psutil, else /proc/meminfo."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except (ImportError, OSError, RuntimeError):
        pass  # /proc/meminfo says it too
    try:
        m = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        return int(m[1]) * 1024 if m else None
    except OSError:
        return None


def topology() -> str:
    """``nvidia-smi topo -m``'s matrix (without its legend); "" when it cannot be read."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ""
    out = proc.run([smi, "topo", "-m"], timeout=30)
    if not out.ok:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout)
    lines = []
    for ln in text.splitlines():
        if ln.strip().startswith("Legend"):
            break
        lines.append(ln.rstrip())
    return "\n".join(lines).strip("\n")[:8000]


def size(n: float | None) -> str:
    """Bytes as "2.0 TiB", "503 GiB", "64 MiB"."""
    if not n:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if n >= 10 or unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "?"


def describe_host(h: Host) -> str:
    """One line: name, OS, CPUs, GPUs, and (when recorded) the driver, RAM and /dev/shm."""
    g = h.gpus or ()
    name = f"{h.name}: " if h.name else ""
    cpus = f"{'?' if h.cpus is None else h.cpus} CPUs" + (f" ({h.cpu_model})" if h.cpu_model else "")
    line = (f"host {name}{h.platform or '?'}, {cpus}, "
            f"{len(g)} GPU{'s' if len(g) != 1 else ''}{' (' + g[0] + ')' if g else ''}")
    if h.driver:
        line += f", NVIDIA driver {h.driver}"
    if h.ram_bytes:
        line += f", RAM {size(h.ram_bytes)}"
    if h.shm_bytes:
        line += f", /dev/shm {size(h.shm_bytes)}"
    return line


def describe_env(facts: RunFacts) -> str:
    """One line: python (and which one, where the run records it), torch, CUDA, NCCL, GPUs."""
    interp = facts.interpreter
    exe = f" ({interp['executable']})" if interp.get("executable") else ""
    torch = facts.version("torch") or interp.get("torch") or ("?" if facts.versions or not interp else "none")
    parts = [f"python {facts.python or interp.get('python') or '?'}{exe}", f"torch {torch}"]
    parts += [f"{name} {value}" for name, value in (("CUDA", facts.cuda), ("NCCL", facts.nccl), ("nvcc", facts.nvcc))
              if value]
    g = facts.gpus or ()
    parts.append(f"{len(g)}× {g[0]}" if g else "no GPU")
    return ", ".join(parts)
