"""How much memory dsbisect may use, how much a point needs, and what the out-of-memory killer did.

A Slurm allocation, a container or a login node limits memory through the cgroup dsbisect runs
in (v2: ``memory.max``; v1: ``memory.limit_in_bytes``; an ancestor's limit counts too), else the
machine's ``MemAvailable`` is the limit.  Room = the tightest of them, less what is in use (page
cache that can be dropped, ``inactive_file``, is not in use).

Points run at once only as far as that room holds a point's expected memory: the peak of earlier
runs of the case (``evidence.peak_rss``: the RSS of the run's processes, summed, which errs high
since shared pages count in every process) with a margin, else a conservative guess per rank.

An out-of-memory kill shows, without privileges (no dmesg), as a rise of an ``oom_kill`` counter
during the run: the cgroup's ``memory.events`` (v2, counts this cgroup and those below it),
``memory.oom_control`` (v1), or ``/proc/vmstat`` (the whole machine).

A run the killer ended while other points ran runs again alone: the ``PointGate`` counts the
points running here and lets an ``alone`` entry in only when none runs.

The readers do file I/O only; ``points_at_once``, ``expected``, ``rise`` and the texts are pure.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core import proc
from dsbisect.core.model import Outcome
from dsbisect.verdict.outcome import Classified, child_killed, is_reaction, sigkilled

GB = 1e9
RANK_GUESS = 1 << 30  # bytes a rank is assumed to need when no run of the case says (torch + a model)
LAUNCHER_GUESS = 512 << 20  # the launcher's processes (deepspeed's runner and launch.py import torch)
MARGIN = 1.25  # on a recorded peak: runs of one case differ
UNLIMITED = 1 << 60  # a cgroup v1 limit at least this large means none


@dataclass(frozen=True)
class Room:
    """Memory that dsbisect's points may use now."""

    free: int  # bytes
    limit: int  # bytes: the tightest limit (the machine's RAM where no cgroup limits it)
    source: str  # where the limit comes from: "cgroup v2 memory.max", "cgroup v1 ...", "MemAvailable"


@dataclass(frozen=True)
class OomCount:
    """One out-of-memory-kill counter, as read at one moment."""

    source: str  # "cgroup memory.events", "cgroup memory.oom_control", "/proc/vmstat"
    count: int


@dataclass(frozen=True)
class OomKill:
    """A counter that rose during a run."""

    source: str
    before: int
    after: int


# ---------------------------------------------------------------- pure


def expected(nproc: int, peaks: Sequence[int]) -> int:
    """Bytes a point of a case is expected to need: its recorded peaks' highest with a margin,
    else a guess of ``RANK_GUESS`` per rank plus the launcher's."""
    known = [p for p in peaks if p > 0]
    if known:
        return int(max(known) * MARGIN)
    return nproc * RANK_GUESS + (LAUNCHER_GUESS if nproc > 1 else 0)


def points_at_once(wanted: int, room: Room | None, per_point: int) -> int:
    """How many of ``wanted`` points fit in ``room`` at ``per_point`` bytes each (at least 1:
    one point always runs; if it cannot fit, its run says so)."""
    if room is None or per_point <= 0:
        return max(1, wanted)
    return max(1, min(wanted, room.free // per_point))


def describe(room: Room, per_point: int, measured: bool) -> str:
    """"memory: 1.4 GB free of 1.4 GB limit, ~0.9 GB per point" (the figures the slot count used)."""
    how = "" if measured else ", a guess"
    return (f"memory: {room.free / GB:.1f} GB free of {room.limit / GB:.1f} GB {_limit_word(room)}, "
            f"~{per_point / GB:.1f} GB per point{how}")


def _limit_word(room: Room) -> str:
    return "limit" if room.source.startswith("cgroup") else "RAM"


def rise(before: Sequence[OomCount], after: Sequence[OomCount]) -> OomKill | None:
    """The first counter (cgroup ones come first) that rose between the two readings."""
    was = {c.source: c.count for c in before}
    for c in after:
        if c.source in was and c.count > was[c.source]:
            return OomKill(c.source, was[c.source], c.count)
    return None


def oom_reason(kill: OomKill, others: int, retried: bool, room: Room | None) -> str:
    """The skip reason of a run the out-of-memory killer ended: while ``others`` other points
    ran (it runs again alone), or with none (``retried``: on its run alone after such a kill)."""
    base = f"killed by the out-of-memory killer ({kill.source} oom_kill {kill.before}→{kill.after})"
    if others:
        return f"{base} while {others} other point{'s' if others > 1 else ''} ran; it runs again alone"
    have = f" ({room.free / GB:.1f} GB free of {room.limit / GB:.1f} GB {_limit_word(room)})" if room else ""
    alone = "also when run alone" if retried else "with no other point running"
    return f"{base}, {alone}: the point needs more memory than dsbisect has here{have}"


def oom_verdict(c: Classified, exit_code: int | None, timed_out: bool, tail: str, kill: OomKill | None,
                others: int, retried: bool, room: Room | None) -> tuple[Classified, dict]:
    """The outcome of a run given the out-of-memory evidence: untestable (SKIP) when it failed by
    itself (dsbisect did not stop it), killed by SIGKILL (or its ranks only reacted to a peer that
    went away, or died of a child of theirs killed by SIGKILL: a DataLoader worker, a
    subprocess), while an oom_kill counter rose; the evidence to keep with it ({} otherwise)."""
    if kill is None or c.outcome is not Outcome.FAIL or timed_out or exit_code is None:
        return c, {}
    if not (sigkilled(exit_code, tail) or is_reaction(c.reason) or child_killed(c.reason)):
        return c, {}
    reason = oom_reason(kill, others, retried, room)
    return Classified(Outcome.SKIP, reason), {"source": kill.source, "before": kill.before, "after": kill.after,
                                              "others": others, "alone": retried, "failed_as": c.reason}


# ------------------------------------------------------------- readers


def room(proc_root: Path = Path("/proc")) -> Room | None:
    """The memory this process's points may use: its cgroups' limits (its own and its
    ancestors'), and the machine's MemAvailable; None when nothing can be read."""
    options = [r for r in (_cgroup_room(d, v2) for d, v2 in cgroup_dirs(proc_root)) if r is not None]
    meminfo = _meminfo(proc_root)
    if "MemAvailable" in meminfo:
        options.append(Room(meminfo["MemAvailable"], meminfo.get("MemTotal", meminfo["MemAvailable"]),
                            "MemAvailable"))
    return min(options, key=lambda r: r.free) if options else None


def oom_counts(proc_root: Path = Path("/proc")) -> tuple[OomCount, ...]:
    """Every out-of-memory-kill counter readable here: the cgroups' first, then the machine's."""
    out = []
    for d, v2 in cgroup_dirs(proc_root, ancestors=False):
        name, key = ("memory.events", "oom_kill") if v2 else ("memory.oom_control", "oom_kill")
        value = _keyed(d / name).get(key)
        if value is not None:
            out.append(OomCount(f"cgroup {name}", value))
    vmstat = _keyed(proc_root / "vmstat").get("oom_kill")
    if vmstat is not None:
        out.append(OomCount("/proc/vmstat", vmstat))
    return tuple(out)


def cgroup_dirs(proc_root: Path = Path("/proc"), ancestors: bool = True) -> list[tuple[Path, bool]]:
    """(folder, is v2) of this process's memory cgroup and, with ``ancestors``, of each one
    above it inside the mount, nearest first."""
    mounts = _cgroup_mounts(proc_root)
    out = []
    for line in _read(proc_root / "self" / "cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v2 = parts[0] == "0" and parts[1] == ""
        if not v2 and "memory" not in parts[1].split(","):
            continue
        mount = mounts.get("v2" if v2 else "v1")
        if mount is None:
            continue
        root, point = mount
        rel = parts[2][len(root):] if parts[2].startswith(root) else parts[2]
        here = point / rel.lstrip("/")
        while True:
            if here.is_dir():
                out.append((here, v2))
            if not ancestors or here == point or point not in here.parents:
                break
            here = here.parent
    return out


def _cgroup_mounts(proc_root: Path) -> dict[str, tuple[str, Path]]:
    """{"v2": (root, mount point), "v1": (root, mount point) of the memory controller}."""
    out: dict[str, tuple[str, Path]] = {}
    for line in _read(proc_root / "self" / "mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            out.setdefault("v2", (fields[3], Path(fields[4])))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            out.setdefault("v1", (fields[3], Path(fields[4])))
    return out


def _cgroup_room(d: Path, v2: bool) -> Room | None:
    names = ("memory.max", "memory.current") if v2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    limit, used = (_read(d / n).strip() for n in names)
    if not limit or limit == "max" or not used or not limit.isdigit() or not used.isdigit():
        return None
    if int(limit) >= UNLIMITED:
        return None
    stat = _keyed(d / "memory.stat")
    cache = stat.get("inactive_file" if v2 else "total_inactive_file", stat.get("inactive_file", 0))
    free = max(0, int(limit) - max(0, int(used) - cache))
    return Room(free, int(limit), f"cgroup {'v2 memory.max' if v2 else 'v1 memory.limit_in_bytes'}")


def _meminfo(proc_root: Path) -> dict[str, int]:
    out = {}
    for line in _read(proc_root / "meminfo").splitlines():
        name, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0].isdigit():
            out[name] = int(value[0]) * (1024 if value[1:] == ["kB"] else 1)
    return out


def _keyed(path: Path) -> dict[str, int]:
    """A "name value" per line file (memory.events, memory.stat, vmstat) as a dict."""
    out = {}
    for line in _read(path).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


# ------------------------------------------------------------------ the gate


@dataclass
class GateToken:
    """One run in the memory gate: whether it runs alone, and the most other points that ran
    beside it at any moment."""

    alone: bool = False
    others: int = 0


class PointGate:
    """Counts the points running here, so that a run the out-of-memory killer ended while others
    ran can run again with no other point: an ``alone`` entry waits until none runs, and no
    other starts until it ends."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.active: list[GateToken] = []
        self.exclusive = False
        self.waiting = 0  # alone entries waiting: no other starts meanwhile

    @contextlib.contextmanager
    def enter(self, alone: bool) -> Iterator[GateToken]:
        token = GateToken(alone=alone)
        with self.cond:
            self.waiting += alone
            while self.exclusive or (alone and self.active) or (not alone and self.waiting):
                stop = proc.stop_event()  # the runs are being stopped (Ctrl-C): no run starts after
                if stop is not None and stop.is_set():
                    self.waiting -= alone
                    raise proc.Cancelled("waiting to run: the runs were stopped")
                self.cond.wait(0.5)
            self.waiting -= alone
            self.exclusive = alone
            for t in self.active:
                t.others = max(t.others, len(self.active))
            token.others = len(self.active)
            self.active.append(token)
        try:
            yield token
        finally:
            with self.cond:
                self.active.remove(token)
                if alone:
                    self.exclusive = False
                self.cond.notify_all()
