"""What a run leaves behind: ``RunRecord`` (with its ``Evidence`` and ``RunFacts``), ``Manual``,
``SkipCause``; and the one verdict rule (``RunRecord.verdict``).  A bisection's: ``bisections``.

The store keeps these as JSON (``run.json``, the SQLite columns).  ``to_json`` gives back
exactly the JSON ``from_json`` read: the same keys in the same order, each value of the same
shape.  A key no field knows, or a known key holding a value of another shape (a hand-edited
record, a newer or older dsbisect), is kept as it was in ``extra``: nothing recorded is lost,
and stores of older and newer dsbisects read both ways.  Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from dsbisect.core.metric import Reading
from dsbisect.verdict.identity import Failure, HangSignature, Identity, Rule, judge, learn
from dsbisect.records import readings
from dsbisect.records.inputs import Inputs
from dsbisect.core.model import Outcome, Point, RegressOn, RunStatus, Verdict, read_enum

_NUM = (int, float)


def _fits(value: object, shape: tuple[type, ...]) -> bool:
    """``value`` is of ``shape`` (a bool is no number; null is never a value of a field)."""
    return value is not None and isinstance(value, shape) and (bool in shape or not isinstance(value, bool))


def _frozen(value: Any) -> Any:
    """JSON lists as tuples (all the way down): a field's value cannot change under a reader."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    if isinstance(value, _Keyed):
        return value.to_json()
    return value.value if isinstance(value, enum.Enum) else value


@dataclass(frozen=True)
class _Keyed:
    """A JSON object with known keys as fields (``SHAPES``: key -> the JSON types it holds);
    ``extra`` keeps what no field takes, ``order`` the keys in the order they were read."""

    SHAPES: ClassVar[dict[str, tuple[type, ...]]] = {}
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_json(cls, data: object):
        if isinstance(data, cls):  # a value already read (``of`` takes either)
            return data
        data = data if isinstance(data, Mapping) else {}
        known, extra = {}, {}
        for key, value in data.items():
            try:
                if key not in cls.SHAPES or not _fits(value, cls.SHAPES[key]):
                    raise ValueError(key)
                known[key] = cls._read(key, _frozen(value))
            except ValueError:
                extra[key] = value
        return cls(**known, extra=extra, order=tuple(data))

    @classmethod
    def of(cls, **values: Any):
        """Values made by this dsbisect, written in the order given (as a dict of them was); a
        value of a typed field may be given as its JSON."""
        return cls(**{k: cls._read(k, _frozen(v)) if v is not None else None for k, v in values.items()
                      if k not in ("extra", "order")},
                   extra=values.get("extra", {}), order=tuple(k for k in values if k != "order"))

    def keys(self) -> tuple[str, ...]:
        """The keys ``to_json`` writes, in its order."""
        return tuple(self.to_json())

    @classmethod
    def _read(cls, key: str, value: Any) -> Any:
        """The field's value of a JSON value of its shape (a ValueError: kept in ``extra``)."""
        return value

    def _written(self) -> dict:
        return {k: _thawed(getattr(self, k)) for k in self.SHAPES if getattr(self, k) is not None}

    def to_json(self) -> dict:
        written = self._written()  # a field set since it was read wins over what was there
        out = written | {k: v for k, v in self.extra.items() if k not in written}
        ordered = {k: out[k] for k in self.order if k in out}
        return ordered | {k: v for k, v in out.items() if k not in ordered}

    def without_odd(self, names: frozenset[str]):
        """These values without the keys of ``names`` that held a value of another shape (kept in ``extra``)."""
        return replace(self, extra={k: v for k, v in self.extra.items() if k not in names})

    def __or__(self, other: _Keyed):
        """These values with ``other``'s set ones over them, as ``dict | dict`` (keys in that order)."""
        given = {f.name: getattr(other, f.name) for f in fields(other) if f.name in self.SHAPES
                 and getattr(other, f.name) is not None}
        cleared = {k: None for k in other.extra if k in self.SHAPES}  # other's odd value of a field wins too
        extra = {k: v for k, v in self.extra.items() if k not in given} | dict(other.extra)
        return replace(self, **cleared, **given, extra=extra, order=tuple(dict.fromkeys((*self.keys(), *other.keys()))))


# ------------------------------------------------------------------ evidence


class SkipCause(str, enum.Enum):
    """Why a run is a SKIP (the reason says it in words; this says it for code)."""

    GPUS = "gpus"  # the case needs more CUDA GPUs than this machine has
    VENV = "venv"  # the point's venv could not be built
    IMPORT = "import"  # the venv does not import the point's packages
    NODES = "nodes"  # another node of the hostfile cannot run the point venv
    EXIT_125 = "exit_125"  # the script said so (exit 125: untestable)
    OOM = "oom"  # the out-of-memory killer ended it
    SLURM = "slurm"  # Slurm ended the job, or it left no result
    MANUAL = "manual"  # marked skip by hand
    START = "start"  # the launch line could not be started (no such program in the point's venv, not executable)
    CUDA = "cuda"  # a run meant for GPUs whose CUDA could not be initialised (the driver, the devices)

    @property
    def machine(self) -> bool:
        """The machine's doing: another case may well run here."""
        return self is SkipCause.GPUS


@dataclass(frozen=True)
class Manual:
    """A result the user gave (``dsbisect mark``, ``bisect --manual``), not a run of dsbisect."""

    mark: Verdict  # what the user said the point did: good, bad or skip
    note: str | None = None


@dataclass(frozen=True)
class Evidence(_Keyed):
    """What a run's end left to show (``evidence`` of run.json)."""

    SHAPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "manual": (str,), "note": (str,), "files": (list,), "notes": (list,), "taken": (list,),
        "survivors": (list,), "pids": (list,), "peak_rss": (int,), "hang_detected_after_s": _NUM,
        "oom": (dict,), "error_frames": (list,), "escaped": (list,), "shm_removed": (list,),
        "skip_cause": (str,), "hang": (dict,), "readings": (list,), "readings_dropped": (int,)}
    manual: str | None = None
    note: str | None = None
    files: tuple[str, ...] | None = None
    notes: tuple[str, ...] | None = None
    taken: tuple | None = None
    survivors: tuple | None = None
    pids: tuple[int, ...] | None = None
    peak_rss: int | None = None
    hang_detected_after_s: float | None = None
    oom: Mapping[str, Any] | None = None
    error_frames: tuple[str, ...] | None = None
    escaped: tuple[int, ...] | None = None
    shm_removed: tuple[str, ...] | None = None
    skip_cause: SkipCause | None = None  # a SKIP recorded by this dsbisect or a later one
    hang: Mapping[str, Any] | None = None  # a HANG's signature, typed (identity.HangSignature.to_json)
    readings: tuple | None = None  # the run's numbers (records.readings' JSON; ``numbers`` reads them)
    readings_dropped: int | None = None  # readings over what a record keeps (records.readings.MAX_KEPT)

    @classmethod
    def _read(cls, key: str, value: Any) -> Any:
        return SkipCause(value) if key == "skip_cause" else value  # a cause this dsbisect does not know: extra

    @property
    def marked(self) -> Manual | None:
        """The mark by hand, when the run is one (a mark that is no verdict marks nothing)."""
        mark = read_enum(Verdict, self.manual, None)
        return Manual(mark, self.note) if mark is not None else None

    @property
    def numbers(self) -> tuple[Reading, ...]:
        """The numbers the run reported and dsbisect measured, as recorded."""
        return readings.from_json(self.readings)

    @property
    def oom_others(self) -> int:
        """How many other points ran when the out-of-memory killer ended this one (0: none, or no kill)."""
        n = (self.oom or {}).get("others")
        return n if isinstance(n, int) and not isinstance(n, bool) else 0

    @classmethod
    def of_mark(cls, manual: Manual, extra: Mapping[str, Any] | None = None) -> Evidence:
        return cls(manual=manual.mark.value, note=manual.note, extra=dict(extra or {}))

    def noted(self, *more: str) -> Evidence:
        return replace(self, notes=(*(self.notes or ()), *more))

    def listed(self, name: str) -> tuple:
        """The list field ``name``, () when unset."""
        return getattr(self, name) or ()


# ------------------------------------------------------------------ facts


@dataclass(frozen=True)
class Host(_Keyed):
    """The machine a run ran on (``facts.host`` of run.json): what ``envs.facts.host`` found."""

    SHAPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "name": (str,), "dsbisect": (str,), "host_python": (str,), "platform": (str,), "cpus": (int,),
        "gpus": (list,), "cpu_model": (str,), "ram_bytes": _NUM, "shm_bytes": _NUM, "driver": (str,),
        "topology": (str,)}
    name: str | None = None
    dsbisect: str | None = None  # its version
    host_python: str | None = None
    platform: str | None = None
    cpus: int | None = None
    gpus: tuple[str, ...] | None = None  # as CUDA_VISIBLE_DEVICES showed them
    cpu_model: str | None = None
    ram_bytes: int | None = None
    shm_bytes: int | None = None
    driver: str | None = None  # the NVIDIA driver
    topology: str | None = None  # nvidia-smi topo -m

    @classmethod
    def _read(cls, key: str, value: Any) -> Any:
        if key == "gpus" and not all(isinstance(g, str) for g in value):
            raise ValueError(key)
        return value


@dataclass(frozen=True)
class InputFile(_Keyed):
    """A file the command line named (``facts.inputs`` of run.json): its digest, size and copy."""

    SHAPES: ClassVar[dict[str, tuple[type, ...]]] = {"path": (str,), "sha256": (str,), "bytes": (int,), "copy": (str,)}
    path: str | None = None
    sha256: str | None = None
    bytes: int | None = None  # None: not a file when the run started
    copy: str | None = None  # the copy kept in the run folder (relative to it); None: too big to keep


@dataclass(frozen=True)
class RunFacts(_Keyed):
    """What a run ran with (``facts`` of run.json): the point venv's versions, CUDA and NCCL, the
    host, the command and its files, the inputs' fingerprint, the index, a Slurm job."""

    SHAPES: ClassVar[dict[str, tuple[type, ...]]] = {
        "python": (str,), "versions": (dict,), "cuda": (str,), "nccl": (str,), "nvcc": (str,),
        "gpus": (list,), "host": (dict,), "command": (list,), "inputs": (list,), "index": (str,),
        "shadowed": (list,), "accelerator": (str,), "fingerprint": (dict,), "slurm": (dict,),
        "conditions": (dict,)}
    python: str | None = None
    versions: Mapping[str, str] | None = None
    cuda: str | None = None
    nccl: str | None = None
    nvcc: str | None = None
    gpus: tuple[str, ...] | None = None
    host: Host | None = None
    command: tuple[str, ...] | None = None
    inputs: tuple[InputFile, ...] | None = None
    index: str | None = None
    shadowed: tuple[tuple[str, ...], ...] | None = None
    accelerator: str | None = None
    fingerprint: Mapping[str, Any] | None = None
    slurm: Mapping[str, Any] | None = None
    conditions: Mapping[str, Any] | None = None  # what moves numbers as the run ran (records.conditions)

    @classmethod
    def _read(cls, key: str, value: Any) -> Any:
        if key == "host":
            return Host.from_json(value)
        if key == "inputs":  # a list of files, each an object (another value: the list is kept aside)
            if not all(isinstance(i, (Mapping, InputFile)) for i in value):
                raise ValueError(key)
            return tuple(InputFile.from_json(i) for i in value)
        return value

    @property
    def host_name(self) -> str | None:
        return self.host.name if self.host is not None else None

    @property
    def ran(self) -> Inputs | None:
        """What the run records it ran (None: it records nothing)."""
        return Inputs.from_json(dict(self.fingerprint)) if self.fingerprint is not None else None

    @property
    def interpreter(self) -> Mapping[str, Any]:
        found = (self.fingerprint or {}).get("interpreter")
        return found if isinstance(found, Mapping) else {}

    def version(self, name: str) -> str | None:
        v = (self.versions or {}).get(name)
        return v if isinstance(v, str) else None


@dataclass(frozen=True)
class ImportCheck:
    """Whether a point venv imports the point's packages, and what it holds (versions, CUDA...)."""

    ok: bool
    reason: str
    facts: RunFacts = field(default_factory=RunFacts)


# ------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunRecord:
    id: int
    case_name: str
    case_key: str
    point: Point
    point_key: str
    env_key: str | None
    attempt: int
    status: RunStatus
    outcome: Outcome | None
    exit_code: int | None
    seconds: float | None
    started: float
    reason: str
    run_dir: str | None
    signature: str
    evidence: Evidence
    facts: RunFacts
    host: str | None
    pid: int | None = None
    finished: float | None = None
    heartbeat: float | None = None
    abandoned: str = ""  # why a row left running reads as interrupted (its writer died, its lease expired)
    # What the record says, typed (``records.migrate.lifted``, through which the store reads every run):
    skip_cause: SkipCause | None = None  # why a SKIP is one (None: it is none, or no cause is known)
    hang: HangSignature | None = None  # a HANG's signature
    failure: Failure | None = None  # a FAIL's failure

    @property
    def manual(self) -> Manual | None:
        """The mark by hand when this run is one (dsbisect mark, bisect --manual)."""
        return self.evidence.marked

    def identity(self) -> Identity | None:
        """The failure of the run (a FAIL's and, where the run recorded them, the innermost frames
        of its traceback in the package under test; a HANG's signature)."""
        if self.outcome is None:
            return None
        frames = tuple(str(f) for f in self.evidence.listed("error_frames"))
        return learn(self.outcome, failure=self.failure, hang=self.hang, frames=frames,
                     shown=self.signature or self.reason)

    def verdict(self, regress_on: RegressOn | Rule, signature: str | None = None,
                learned: Identity | None = None) -> Verdict:
        """What a bisection takes this run for (the search and ``dsbisect log`` both): a run
        marked by hand is as the user said; else its outcome and failure under the rule of
        ``regress_on`` (a ``Rule``, or the RegressOn it is made of with ``signature``/``learned``)."""
        rule = regress_on if isinstance(regress_on, Rule) else Rule(regress_on, signature, learned)
        if self.manual is not None:
            return self.manual.mark
        if self.outcome is None:
            return Verdict.SKIP
        text = " ".join(x for x in (self.signature, self.reason) if x)
        return judge(self.outcome, text, rule, self.identity())
