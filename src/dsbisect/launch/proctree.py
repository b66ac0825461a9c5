"""A launch's process tree: the processes seen below the launcher, which of them are ranks,
and the teardown that stops them all.

``track`` adds every descendant of the launcher to ``seen`` (a process that leaves the tree
later is still stopped).  ``rank_processes`` picks the ranks among them: the live processes
with RANK in their environment, the top-most of each (not its dataloader workers).
``teardown`` stops the whole tree: the launcher's group, every descendant ever seen and every
process that lost its parent (re-parented to the guard), SIGINT, SIGTERM then SIGKILL
(``GRACE``: 1 s, 1 s), then the guard kills what is left; the pids still alive are returned.
"""

from __future__ import annotations

import os
import signal

import psutil

from dsbisect.launch.guard import Guarded
from dsbisect.core.proc import is_live

GRACE = (1.0, 1.0)  # seconds after SIGINT, then after SIGTERM, before SIGKILL: all gone well within 5 s


def track(pid: int, seen: dict[int, psutil.Process]) -> None:
    """Add ``pid`` and its descendants to ``seen`` (what is already there stays)."""
    try:
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            seen.setdefault(p.pid, p)
    except psutil.NoSuchProcess:
        pass


def rank_processes(seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The live processes among ``seen`` that are ranks: they carry RANK in their environment,
    the top-most of each rank (not its dataloader workers), never a launcher (a process with a
    descendant of another RANK: a launcher that inherited RANK from the shell dsbisect ran in)."""
    ranks: dict[int, tuple[psutil.Process, str]] = {}
    for p in seen.values():
        try:
            if is_live(p) and "RANK" in (env := p.environ()):
                ranks[p.pid] = (p, env["RANK"])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    launchers = {pid for pid, (_, rank) in ranks.items()
                 if any(r != rank and pid in _ancestors(q, ranks) for q, r in ranks.values())}
    kept = {pid: pr for pid, pr in ranks.items() if pid not in launchers}
    top = [p for p, _ in kept.values() if safe_ppid(p) not in kept]
    return sorted(top, key=lambda p: int(safe_env(p, "RANK") or 0))


def _ancestors(p: psutil.Process, among: dict[int, tuple[psutil.Process, str]]) -> set[int]:
    """The pids of ``p``'s ancestors that are in ``among`` (walked through ``among`` only)."""
    out, pid = set(), safe_ppid(p)
    while pid in among and pid not in out:
        out.add(pid)
        pid = safe_ppid(among[pid][0])
    return out


def safe_ppid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def safe_env(p: psutil.Process, key: str) -> str | None:
    try:
        return p.environ().get(key)
    except psutil.Error:
        return None


def teardown(proc: Guarded, seen: dict[int, psutil.Process]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Stop the run's whole tree: the launcher's group, every descendant ever seen and every
    process that lost its parent (below the guard), INT then TERM then KILL; then the guard
    kills whatever is left.  (survivors, the pids that had left the launcher's tree)"""
    orphans = proc.orphans()
    for p in orphans:
        seen.setdefault(p.pid, p)
    survivors = stop_tree(proc.pid, seen)
    closed = proc.close()
    left = sorted(set(closed.left) | {pid for pid in survivors if pid not in closed.stopped})
    return tuple(left), tuple(sorted({p.pid for p in orphans} | (set(closed.stopped) - set(seen))))


def stop_tree(pid: int, seen: dict[int, psutil.Process], grace: tuple[float, float] = GRACE) -> tuple[int, ...]:
    """Stop the group led by ``pid`` and every descendant ever seen: INT, TERM, KILL.

    Returns the pids still alive afterwards (empty unless something is unkillable).
    """
    track(pid, seen)
    for sig, wait in ((signal.SIGINT, grace[0]), (signal.SIGTERM, grace[1]), (signal.SIGKILL, 5.0)):
        alive = _still_running(pid, seen)
        if not alive:
            break
        _signal_group(pid, sig)
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=wait)
    _reap(pid)
    return tuple(sorted(p.pid for p in _still_running(pid, seen)))


def _still_running(pid: int, seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    alive = [p for p in seen.values() if is_live(p)]
    try:
        group = {q.pid for q in psutil.process_iter() if _pgid(q.pid) == pid}
    except psutil.Error:
        group = set()
    for gpid in group - {p.pid for p in alive}:
        try:
            q = psutil.Process(gpid)
            if q.status() != psutil.STATUS_ZOMBIE:
                alive.append(q)
        except psutil.Error:
            continue
    return alive


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
