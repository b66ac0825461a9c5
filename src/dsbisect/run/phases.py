"""What a running point is busy with, while it is slow: the progress line says it.

On CPU the first run of a venv compiles DeepSpeed's ops just in time (``shm_comm``: minutes on
two cores) before the job prints anything.  torch's ``cpp_extension`` builds an op in
``$TORCH_EXTENSIONS_DIR/<op>/`` and holds a ``lock`` file there while one rank compiles (the
others wait on it); the built library (``<op>.so``) stays for the next run.  ``PhaseWatch``
looks at that folder once a second during a run and says when a build starts
("compiling DeepSpeed's shm_comm op (first run of this venv)") and when it is over, and when a
rank waits for a shared build that another run (another dsbisect sharing the cache) holds: whose.
``next_phase`` is the rule, with no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core import waits
from dsbisect.core.clock import REAL, Clock

# DeepSpeed's just-in-time op names (op_builder's NAME values; "deepspeed_" prefixed ones too)
_DEEPSPEED_OPS = ("shm_comm", "cpu_adam", "cpu_adagrad", "cpu_lion", "fused_adam", "fused_lamb", "fused_lion",
                  "transformer_inference", "transformer", "stochastic_transformer", "quantizer", "async_io",
                  "sparse_attn", "spatial_inference", "random_ltd", "inference_core_ops", "ragged_device_ops",
                  "ragged_ops", "fp_quantizer", "evoformer_attn", "gds", "utils", "comm", "mlp_gemm")


@dataclass(frozen=True)
class Builds:
    """What the extensions folder shows at one look."""

    building: tuple[str, ...] = ()  # ops whose build lock is held now
    built: tuple[str, ...] = ()  # ops with a built library (from this run or an earlier one)


def op_name(folder: str) -> str:
    """``DeepSpeed's shm_comm op`` or ``the my_ext extension`` (a user's own)."""
    bare = folder.removeprefix("deepspeed_").removesuffix("_op")
    return f"DeepSpeed's {bare} op" if bare in _DEEPSPEED_OPS else f"the {folder} extension"


def next_phase(shown: str, seen: Builds, last: Builds, before: Builds) -> str:
    """The phase to say now, or "" when the line shown (``shown``, "" for none yet) still holds.
    A build is one whose lock this look and the last one (``last``, a second earlier) both saw:
    torch takes the lock for a moment to find an op already built, too.  ``before``: what the
    folder held when the run started (a library there then: a rebuild)."""
    building = tuple(n for n in seen.building if n in last.building)
    if building:
        names = ", ".join(op_name(n) for n in building)
        rebuilt = all(n in before.built for n in building)
        why = "its sources, torch or compiler changed" if rebuilt else "first run of this venv; later runs load it"
        text = f"{'recompiling' if rebuilt else 'compiling'} {names} ({why})"
        return "" if text == shown else text
    if shown and "compil" in shown.split(" (")[0]:  # a build we said is over
        return "running (the op is built)"
    return ""


def look(extensions: Path) -> Builds:
    """One look at ``$TORCH_EXTENSIONS_DIR`` (nothing there: no builds)."""
    building, built = [], []
    try:
        folders = sorted(p for p in extensions.iterdir() if p.is_dir())
    except OSError:
        return Builds()
    for d in folders:
        try:
            if (d / "lock").exists():
                building.append(d.name)
            if any(d.glob("*.so")):
                built.append(d.name)
        except OSError:
            continue
    return Builds(tuple(building), tuple(built))


CLAIMS = "ops-building"  # the hook's dsbisect_ops.CLAIMS


def look_claims(run_dir: Path) -> Builds:
    """One look at this run's shared op builds (the hook's dsbisect_ops): while a rank waits for
    or makes the shared build of an op in ``<cache>/ops``, ``<run dir>/ops-building/<name>.<pid>``
    exists.  The shared folder itself is not looked at: a ``.tmp`` build there may be another
    job's (a concurrent bisection of another package), which this run neither makes nor waits for."""
    try:
        names = sorted({p.name.rsplit(".", 1)[0] for p in (run_dir / CLAIMS).iterdir() if "." in p.name})
    except OSError:
        return Builds()
    return Builds(tuple(names), ())


def claim_pids(run_dir: Path) -> dict[str, tuple[int, ...]]:
    """The processes of this run that wait for or make each shared op build (``look_claims``'s files)."""
    out: dict[str, list[int]] = {}
    try:
        for p in (run_dir / CLAIMS).iterdir():
            name, _, pid = p.name.rpartition(".")
            if name and pid.isdigit():
                out.setdefault(name, []).append(int(pid))
    except OSError:
        return {}
    return {k: tuple(v) for k, v in out.items()}


def waiting_elsewhere(run_dir: Path) -> dict[str, list[int]]:
    """The shared op builds this run's ranks wait for that a process of another run holds (its
    pids, by op): another bisection sharing the cache compiles it."""
    claims = claim_pids(run_dir)
    ours = {pid for pids in claims.values() for pid in pids}
    out = {}
    for name, pids in claims.items():
        others = [h for pid in pids for h in waits.blocked_on(pid) if h not in ours]
        if others:
            out[name] = list(dict.fromkeys(others))
    return out


def _merged(a: Builds, b: Builds) -> Builds:
    return Builds(tuple(sorted({*a.building, *b.building})), tuple(sorted({*a.built, *b.built})))


class PhaseWatch:
    """A thread that, during one run, says each phase ``next_phase`` finds (through ``say``)."""

    EVERY_S = 1.0

    def __init__(self, extensions: Path, say: Callable[[str], None], run_dir: Path | None = None,
                 clock: Clock = REAL) -> None:
        self.extensions, self.say, self.run_dir, self.clock = extensions, say, run_dir, clock
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="dsbisect-phase", daemon=True)

    def __enter__(self) -> PhaseWatch:
        self.before = self._look()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _look(self) -> Builds:
        seen = look(self.extensions)
        return seen if self.run_dir is None else _merged(seen, look_claims(self.run_dir))

    def _loop(self) -> None:
        shown, last, told = "", self.before, set()
        while not self.clock.wait(self.stopped, self.EVERY_S):
            seen = self._look()
            text = next_phase(shown, seen, last, self.before)
            last = seen
            if text and not self.stopped.is_set():
                shown = text
                self.say(text)
            for name, pids in (waiting_elsewhere(self.run_dir) if self.run_dir is not None else {}).items():
                if name not in told and not self.stopped.is_set():  # once an op: the build's own line follows
                    told.add(name)
                    self.say(f"waiting for {op_name(name)}, which another run is compiling: {waits.described(pids)}")
