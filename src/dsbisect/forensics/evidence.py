"""Capture evidence from live ranks before a hung run is torn down.

Two ways to read a rank's Python stack:

- ``py-spy dump --pid`` (needs ptrace rights over the rank);
- the faulthandler hook that every point venv carries: ranks that registered it left a
  ``stacks/rank<R>.pid<P>.txt`` file, and a signal makes them append their stacks to it.

Both are tried; what failed is written down so the report can say so.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dsbisect.core import proc
from dsbisect.core.proc import is_live
from dsbisect.records.run import Evidence
from dsbisect.core.rundir import RunDir
from dsbisect.forensics.deadlock import stack_in_collective
from dsbisect.forensics.stacks import Frame, pyspy_main

STACK_SIGNAL = "SIGUSR1"


@dataclass
class Capture:
    """Files written and problems met while capturing one run's evidence."""

    run: RunDir
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)
    stacks: dict[str, tuple[Frame, ...]] = field(default_factory=dict)  # rank -> main-thread frames, latest

    def __call__(self, procs: list[psutil.Process], reason: str) -> None:
        """Launch hook: dump the stacks of ``procs`` (the live ranks)."""
        if not procs:
            self.notes.append(f"{reason}: no live rank to read a stack from")
            return
        self.taken.append(reason)
        self.run.stacks.mkdir(parents=True, exist_ok=True)
        if reason == "quiet":  # a job that may be fine, often still starting: py-spy only
            self.note("quiet: no faulthandler signal (a dump of all threads while a rank starts them "
                      "can crash it: seen as a SIGSEGV during 'import torch')")
        else:
            self._faulthandler(procs)
        with ThreadPoolExecutor(max_workers=min(8, len(procs))) as pool:
            list(pool.map(lambda p: self._pyspy(p, reason), procs))

    def _pyspy(self, rank_proc: psutil.Process, reason: str) -> None:
        exe = pyspy_bin()
        rank = _rank(rank_proc)
        if exe is None:
            self.note("py-spy is not installed; using faulthandler stacks")
            return
        # The quiet snapshot is taken of a job that may be fine: do not pause it.
        pause = [] if reason != "quiet" else ["--nonblocking"]
        out = proc.run([exe, "dump", "--pid", str(rank_proc.pid), *pause], timeout=20)
        if out.returncode is None and out.error.startswith("no answer"):
            self.note(f"py-spy timed out on rank {rank}")
            return
        if not out.ok:
            self.note(f"py-spy could not read rank {rank} ({out.last_line('failed')[:200]}); "
                      "ptrace may be refused here: faulthandler stacks are used instead")
            return
        path = self.run.pyspy(rank, reason)
        path.write_text(out.stdout)
        self.files.append(str(path))
        self.stacks[rank] = pyspy_main(out.stdout)

    def stuck(self, procs: list[psutil.Process]) -> bool:
        """Idle-limit check: True unless some rank's main-thread stack moved since the last look.

        Without an earlier stack to compare (py-spy refused, or no quiet snapshot), the idle
        limit alone decides.
        """
        before = dict(self.stacks)
        self(procs, "idle")
        moved = [r for r, frames in self.stacks.items() if r in before and before[r] != frames]
        if moved:
            self.note(f"no output for a while, but the stacks of rank(s) {', '.join(sorted(moved))} moved: "
                       "not a hang yet")
        return not moved

    def parked(self, procs: list[psutil.Process]) -> bool:
        """Whether every rank of ``procs`` has a stack (the latest taken) whose innermost frame
        waits inside torch.distributed (``deadlock.stack_in_collective``); False without stacks."""
        stacks = [self.stacks.get(_rank(p), ()) for p in procs]
        return bool(stacks) and all(in_collective(frames) for frames in stacks)

    def _faulthandler(self, procs: list[psutil.Process]) -> None:
        """Signal the ranks whose hook registered faulthandler (their file exists)."""
        signum = getattr(signal, os.environ.get("DSBISECT_STACK_SIGNAL", STACK_SIGNAL))
        asked, signalled = [], []
        for p in procs:
            marker = self.run.faulthandler(_rank(p), p.pid)
            if marker.exists():
                try:
                    p.send_signal(signum)
                    asked.append(marker)
                    signalled.append(p)
                except psutil.Error:
                    continue
        if not asked:
            self.note("no rank had the faulthandler hook registered")
            return
        deadline = time.monotonic() + 3
        while (time.monotonic() < deadline and not all(m.stat().st_size > 0 for m in asked)
               and any(is_live(p) for p in signalled)):  # a rank that ended writes nothing more
            time.sleep(0.1)
        self.files += [str(m) for m in asked if str(m) not in self.files]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def evidence(self) -> Evidence:
        dumps = sorted(str(p) for _, p in self.run.fr_dumps())
        return Evidence.of(files=sorted(set(self.files)) + dumps, notes=self.notes, taken=self.taken)


def pyspy_bin() -> str | None:
    """py-spy as DSBISECT_PYSPY names it, next to this interpreter, on PATH, or in a ``--target`` folder."""
    import sys

    if os.environ.get("DSBISECT_PYSPY"):
        return os.environ["DSBISECT_PYSPY"]
    for candidate in [Path(sys.executable).parent / "py-spy", *(Path(p) / "bin" / "py-spy" for p in sys.path if p)]:
        if candidate.is_file():
            return str(candidate)
    return shutil.which("py-spy")


def in_collective(frames: tuple[Frame, ...]) -> bool:
    """Whether a stack (innermost first) waits inside a torch.distributed collective."""
    return stack_in_collective([[f.file, f.function] for f in frames])


def _rank(proc: psutil.Process) -> str:
    try:
        return proc.environ().get("RANK", "?")
    except psutil.Error:
        return "?"
