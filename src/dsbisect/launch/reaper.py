"""Processes of a run found by their tag, wherever they went.

Every process of a run carries ``DSBISECT_RUN_DIR=<run dir>`` in its environment (dsbisect
sets it; children inherit it).  The process-tree teardown (``proctree``) stops what it saw
descend from the launcher; what escaped it — a rank that double-forked into a daemon of its
own session, or the processes of a run whose dsbisect was killed — is found here by that tag
and stopped: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from dsbisect.core.proc import is_live

TAG = "DSBISECT_RUN_DIR"


@dataclass(frozen=True)
class Reaped:
    stopped: tuple[int, ...]  # found by the tag and stopped
    survivors: tuple[int, ...]  # found and still alive after SIGKILL (unkillable)


def tagged(run_dir: Path | str) -> list[psutil.Process]:
    """The live processes of this machine that carry the run's tag (not this process)."""
    want = str(run_dir)
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if p.environ().get(TAG) == want and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue  # gone, a zombie, or another user's
    return found


def stop_tagged(run_dir: Path | str, grace: float = 1.0) -> Reaped:
    """Stop every process carrying the run's tag: SIGTERM, ``grace`` seconds, SIGKILL."""
    procs = tagged(run_dir)
    for send, wait in ((psutil.Process.terminate, grace), (psutil.Process.kill, 5.0)):
        alive = [p for p in procs if is_live(p)]
        for p in alive:
            try:
                send(p)
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=wait)
    return Reaped(tuple(sorted(p.pid for p in procs)), tuple(sorted(p.pid for p in procs if is_live(p))))


SHM = Path("/dev/shm")
# DeepSpeed's CPU communication op (csrc/cpu/comm/shm.cpp) names its shared-memory workspace
# deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank> and never unlinks it:
# 66 MB per rank and run, kept in RAM (/dev/shm is tmpfs) after every process is gone.
SHM_PREFIX = "deepspeed_allreduce_buffer_"


def remove_run_shm(port: int, folder: Path = SHM) -> list[str]:
    """Unlink the shared-memory segments DeepSpeed's CPU ops made for the run on ``port`` (this
    user's, on this machine); the run's processes are gone by now.  Returns their names."""
    mine = f"{SHM_PREFIX}{os.getuid()}_"
    gone = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return gone
    for e in entries:
        head, _, rank = e.name.rpartition("_")
        if e.name.startswith(mine) and rank.isdigit() and head.endswith(f"_{port}"):
            try:
                os.unlink(e.path)
                gone.append(e.name)
            except OSError:
                continue
    return gone
