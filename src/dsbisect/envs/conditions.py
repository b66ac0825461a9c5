"""The conditions a run's numbers were measured under, read from this machine as the run starts
and as it ends (``records.conditions.Conditions``, issue 38): the load average, the cores, the
CPU's model and governor, the GPUs the run is given (model, current clocks, the clock settings
and power limit, the processes already on them), and the thread settings in the run's environment.

Cheap on a CPU machine (a few small files under ``/proc`` and ``/sys``); on a GPU one, one
``nvidia-smi`` call for the GPUs and one for their processes, through ``proc.run``.  A fact that
cannot be read is left out; nothing here fails a run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from dsbisect.core import proc
from dsbisect.envs.facts import cpu_model
from dsbisect.records.conditions import THREAD_VARIABLES, Conditions, Gpu

__all__ = ["at_end", "at_start"]

_GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
_GPU_QUERY = ("index,uuid,name,clocks.sm,clocks.mem,clocks.max.sm,clocks.applications.graphics,"
              "clocks.applications.memory,power.limit")


def load() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def governor() -> str:
    try:
        return _GOVERNOR.read_text().strip()[:40]
    except OSError:
        return ""


def at_start(accelerator: str, env: Mapping[str, str], devices: Sequence[int] | None = None) -> Conditions:
    """The conditions as a run starts with the variables ``env``, on the GPUs ``devices`` (by
    physical index; None: every GPU of the machine) when ``accelerator`` is cuda."""
    threads = tuple(sorted((k, env[k]) for k in THREAD_VARIABLES if k in env))
    gpus = gpu_states(devices) if accelerator == "cuda" else ()
    return Conditions(load(), None, cores(), cpu_model(), governor(), accelerator, gpus, threads)


def at_end(start: Conditions) -> Conditions:
    """``start`` with the load average as the run ended."""
    return replace(start, load_end=load())


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def gpu_states(devices: Sequence[int] | None) -> tuple[Gpu, ...]:
    """Each GPU's model and clocks, and how many compute processes are on it (all of them
    others': the run has not started), asked of ``nvidia-smi``; () without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    out = proc.run([smi, f"--query-gpu={_GPU_QUERY}", "--format=csv,noheader,nounits"], timeout=30)
    if not out.ok:
        return ()
    apps = proc.run([smi, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"], timeout=30)
    busy = [ln.split(",")[0].strip() for ln in apps.stdout.splitlines() if ln.strip()] if apps.ok else None
    found = []
    for ln in out.stdout.splitlines():
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != 9 or not cells[0].isdigit():
            continue
        if devices is not None and int(cells[0]) not in devices:
            continue
        others = None if busy is None else busy.count(cells[1])
        found.append(Gpu(cells[2], _float(cells[3]), _float(cells[4]), _float(cells[5]), others,
                         _float(cells[6]), _float(cells[7]), _float(cells[8])))
    return tuple(found)
