"""The early deadlock verdict's rounds: asking every rank's start-up hook for its flight
recorder and main-thread stack, twice a few seconds apart, while the output is quiet, and
handing both snapshots to ``deadlock.prove``.

A round runs on a thread of its own beside the watch loop (``launch``), which asks
``Rounds.proven`` each time it looks and ``Rounds.poll`` to start the next round.  The proof
and the answers it stands on are written to the run folder (``fr/``) for ``dsbisect show``;
what each round found, to ``fr/rounds.log``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

from dsbisect.core.clock import REAL, Clock
from dsbisect.forensics import deadlock
from dsbisect.forensics.proofrecord import ProofRecord
from dsbisect.core.files import DATA_LIMIT, read_small
from dsbisect.core.proc import is_live
from dsbisect.launch.proctree import safe_env, safe_ppid
from dsbisect.core.rundir import RunDir


@dataclass(frozen=True)
class RoundTimes:
    """When rounds start and how long their parts take, in seconds."""

    after: float = 4.0  # of quiet output before the first request
    gap: float = 3.0  # between the two snapshots of one round
    answer: float = 5.0  # how long one request waits for every rank's answer
    every: float = 4.0  # between rounds while the output stays quiet
    min_gone: float = 5.0  # a rank's process gone this long counts as exited, not crashing


@dataclass(frozen=True)
class Found:
    proof: deadlock.Proof
    started: float  # monotonic time the round's first snapshot was complete
    requests: tuple[int, int]
    snapshots: tuple[deadlock.Snapshot, deadlock.Snapshot]


class Rounds:
    """The early deadlock verdict's rounds, on a thread beside the watch loop.

    A round writes ``fr/request.<n>``, waits for every rank's answer (or for its process to be
    gone), sleeps ``gap`` seconds, asks again, and hands both snapshots to
    ``deadlock.prove``.  The watch loop takes a proof only when no log grew after the first
    snapshot was complete (what a rank did before it answered is in its answer; what it did
    after shows in the second snapshot, or in its output).  A request that no rank answered
    (no process group yet) is followed by the next round within a second; a round that proved
    nothing, after ``every`` seconds.  The answers of a round that proved nothing stay
    until the next round begins."""

    def __init__(self, run: RunDir, times: RoundTimes, t0: float, clock: Clock = REAL) -> None:
        self.run, self.times, self.t0, self.clock = run, times, t0, clock
        self.ranks = RankTable()
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()
        self.n = 0
        self.next_at = 0.0
        self.found: Found | None = None
        self.hurried = False  # a timeout line was seen: look now, without waiting for quiet
        self.error = ""  # why the last round failed, for a debugger

    def proven(self, last_growth: float, seen: dict[int, psutil.Process], now: float) -> Found | None:
        """A proof from a round during which no log grew (else it is dropped); tracks the ranks."""
        self.ranks.update(seen, now)
        found = self.found
        if found is not None and last_growth > found.started:
            self._log(f"the proof of requests {found.requests[0]}+{found.requests[1]} is dropped: the output "
                      f"grew at {last_growth - self.t0:.1f} s, after the first snapshot at "
                      f"{found.started - self.t0:.1f} s")
            self.found = found = None  # a rank printed something: it moved
        return found

    def poll(self, quiet: float, now: float) -> None:
        """Start a round when the output has been quiet long enough and none is under way."""
        if (quiet < self.times.after and not self.hurried) or now < self.next_at or self.found is not None:
            return
        if self.thread is not None and self.thread.is_alive():
            return
        self.thread = threading.Thread(target=self._round, name="dsbisect-early-hang", daemon=True)
        self.thread.start()

    def hurry(self) -> None:
        """Start the rounds at the next poll, quiet or not (a timeout line was seen: a look, never
        a verdict; a proof still needs no log to grow during its round)."""
        self.hurried = True

    def stop(self) -> None:
        self.stopped.set()

    def keep(self, found: Found) -> None:
        """Write the proof beside the answers it stands on, for ``dsbisect show``."""
        record = ProofRecord.of(found.proof, found.requests, found.snapshots, self.clock.time())
        try:
            _write_json(self.run.deadlock_proof, record.to_json())
        except OSError:
            pass

    def _round(self) -> None:
        pause = self.times.every
        try:
            self._forget()
            first = self._snapshot()
            if first is None:
                pause = 1.0
                return
            if self.clock.wait(self.stopped, self.times.gap):
                return
            second = self._snapshot()
            if second is None:
                return
            proof = deadlock.prove(first[1], second[1], min_gone=self.times.min_gone)
            head = f"at {second[1].at:.1f} s, requests {first[0]}+{second[0]}: "
            if proof is not None:
                self._log(head + "proof: " + proof.text)
                self.found = Found(proof, first[2], (first[0], second[0]), (first[1], second[1]))
            else:
                self._log(head + "no proof; " + " | ".join(f"rank {s.rank}: {s.describe()}"
                                                           for s in second[1].ranks))
        except Exception as e:  # noqa: BLE001 - the early verdict is optional; the timeout still stands
            self.error = f"{type(e).__name__}: {e}"
            self._log(f"at {self.clock.monotonic() - self.t0:.1f} s: round failed: {self.error}")
        finally:
            self.next_at = self.clock.monotonic() + pause

    def _snapshot(self) -> tuple[int, deadlock.Snapshot, float] | None:
        """Ask every rank once: (request, snapshot, monotonic time it was complete); None when no
        rank answered (or the run is over)."""
        if self.stopped.is_set():
            return None
        run = self.run
        self.n += 1
        n = self.n
        run.fr_dir.mkdir(parents=True, exist_ok=True)
        _write_json(run.fr_request(n), {"n": n, "time": self.clock.time()})
        deadline = self.clock.monotonic() + self.times.answer
        while True:
            look = self.clock.monotonic()
            answers = _read_answers(run, n)
            world = max((s.world_size or 0 for s in answers.values()), default=0)
            now = self.clock.monotonic()
            gone = {r: self.ranks.gone_for(r, now) for r in range(world)}
            if world and all(r in answers or gone[r] is not None for r in range(world)):
                break
            if now > deadline or self.clock.wait(self.stopped, 0.1):
                break
        if not answers:
            self._log(f"at {self.clock.monotonic() - self.t0:.1f} s, request {n}: no rank answered")
            return None
        ranks = tuple(answers[r] if r in answers else
                      deadlock.gone_snapshot(r, gone[r]) if gone.get(r) is not None else
                      deadlock.missing_snapshot(r) for r in range(world))
        return n, deadlock.Snapshot(at=self.clock.monotonic() - self.t0, ranks=ranks), look

    def _log(self, line: str) -> None:
        try:
            with open(self.run.fr_rounds, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass

    def _forget(self) -> None:
        """Drop the answers of rounds that proved nothing (requests stay: the hook counts them)."""
        for path in self.run.fr_dir.glob("rank*.json"):
            try:
                path.unlink()
            except OSError:
                pass


def _read_answers(run: RunDir, n: int) -> dict[int, deadlock.RankSnapshot]:
    out = {}
    for rank, path in run.fr_answers(n).items():
        try:
            out[rank] = deadlock.rank_snapshot(json.loads(read_small(path, DATA_LIMIT)), rank)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return out


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class RankTable:
    """Which global rank each process is (RANK in its environment, read while it lives), and
    since when a rank has no live process: what tells an exited rank from one that is slow."""

    NEW_S = 5.0  # a process without RANK is looked at again for this long (fork before exec)

    def __init__(self) -> None:
        self.procs: dict[int, tuple[int, psutil.Process]] = {}  # pid -> (rank, process)
        self.first_look: dict[int, float] = {}  # pids that had no RANK (yet)
        self.gone_since: dict[int, float] = {}
        self.lock = threading.Lock()

    def update(self, seen: dict[int, psutil.Process], now: float) -> None:
        found: dict[int, tuple[int, psutil.Process]] = {}
        for pid, p in list(seen.items()):
            if pid in self.procs or now - self.first_look.setdefault(pid, now) > self.NEW_S:
                continue
            rank = safe_env(p, "RANK")
            if rank is not None and rank.strip().isdigit():
                found[pid] = (int(rank), p)
        for pid, (rank, p) in found.items():
            if safe_ppid(p) not in found and safe_ppid(p) not in self.procs:  # not a rank's child
                self.procs[pid] = (rank, p)
            self.first_look[pid] = float("-inf")
        live = {rank for rank, p in self.procs.values() if is_live(p)}
        with self.lock:
            for rank in {rank for rank, _ in self.procs.values()}:
                if rank in live:
                    self.gone_since.pop(rank, None)
                else:
                    self.gone_since.setdefault(rank, now)

    def gone_for(self, rank: int, now: float) -> float | None:
        """Seconds since the rank was last seen with a live process (None: alive, or never seen)."""
        with self.lock:
            since = self.gone_since.get(rank)
        return None if since is None else now - since
