"""A bisection as the store keeps it: ``BisectionRecord`` (``bisections/<key>.json`` and its row),
what it was asked (``AskedFor``, the ``params`` column), how far it got (``BisectionStatus``).

``AskedFor`` is the one writer and reader of ``params``: a release bisection's request and
rule (``of_release``) or an environment bisection's (``EnvRequest.asked`` in ``envdiff``),
written with the keys every dsbisect wrote (``to_json``), read back typed (``from_json``).  A key
it does not know, or a value its field cannot hold as recorded, is kept in ``extra`` and written
back: nothing recorded is lost.  Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar

from dsbisect.core.mode import Mode
from dsbisect.core.model import RegressOn, read_enum, read_int
from dsbisect.core.redact import redact_tree
from dsbisect.records import migrate
from dsbisect.records.results import Recorded, Request
from dsbisect.verdict.identity import Identity, Rule

__all__ = ["AskedFor", "BisectionRecord", "BisectionStatus"]


class BisectionStatus(enum.Enum):
    """How far a bisection got: still searching (or stopped before its answer), or answered."""

    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"  # read back only: a running one whose dsbisect is gone (never stored)


@dataclass(frozen=True)
class AskedFor:
    """What a bisection was asked, as the store keeps it (``params``): the case, the rule that
    counts as bad (the learned kind, once the defining end ran), the mode, the command line."""

    case: str
    regress_on: RegressOn
    mode: Mode = Mode.REGRESSION
    repeat: int = 1
    signature: str | None = None
    pins: tuple[str, ...] = ()  # a release bisection's --pin
    hold: tuple[str, ...] | None = None  # an environment bisection's --hold (None: a release bisection)
    confidence: float | None = None
    regression: Identity | None = None  # the failure learned from the defining end (for `dsbisect log`)
    argv: tuple[str, ...] = ()  # the bisect command line, as `invocation` made it; () when not recorded
    cwd: str | None = None  # where it ran (its relative paths are from there)
    # what no field holds as it was recorded (a key this dsbisect does not know, an odd value): written back
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def environment(self) -> bool:
        """An environment bisection's (``bisect --good-env``)."""
        return self.hold is not None

    @classmethod
    def of_release(cls, req: Request, rule: Rule, cwd: str) -> AskedFor:
        """A release bisection's request under ``rule`` (what counts as bad, once learned)."""
        return cls(req.case.name, rule.regress_on, req.mode, req.repeat, req.signature, req.pins,
                   confidence=req.confidence, regression=rule.learned, argv=req.argv,
                   cwd=cwd if req.argv else None)

    def masked(self) -> AskedFor:
        """With every secret of its text masked (the command line may hold a --hub_token): as stored."""
        return AskedFor.from_json(redact_tree(self.to_json()))

    def to_json(self) -> dict:
        """``params``, with the keys in the order every dsbisect wrote them."""
        out: dict = {"case": self.case}
        out |= {"hold": list(self.hold)} if self.hold is not None else {"pins": list(self.pins)}
        out |= {"regress_on": self.regress_on.value, "find_fix": self.mode.find_fix, "repeat": self.repeat,
                "signature": self.signature}
        if self.environment:
            out["envbisect"] = True
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.regression is not None:
            out["regression"] = self.regression.as_json()
        if self.argv:
            out |= {"argv": list(self.argv), "cwd": self.cwd}
        return out | dict(self.extra)  # a value kept as it was recorded wins

    @classmethod
    def from_json(cls, data: Mapping) -> AskedFor:
        """``params`` as any dsbisect wrote them (``migrate.asked`` lifts an older shape; a key an
        older one did not write takes its default)."""
        d = migrate.asked(data)
        confidence = d.get("confidence")
        regression = d.get("regression")
        asked = cls(
            case=_text(d.get("case")), regress_on=read_enum(RegressOn, d.get("regress_on"), RegressOn.HANG),
            mode=Mode.of(d.get("find_fix") is True), repeat=read_int(d.get("repeat"), 1),
            signature=d["signature"] if isinstance(d.get("signature"), str) else None,
            pins=_texts(d.get("pins")), hold=_texts(d.get("hold")) if d.get("envbisect") is True else None,
            confidence=float(confidence) if isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
            else None,
            regression=Identity.from_json(regression) if isinstance(regression, Mapping) else None,
            argv=_texts(d.get("argv")), cwd=d["cwd"] if isinstance(d.get("cwd"), str) else None)
        written = asked.to_json()  # what the fields cannot hold as recorded is kept as it was
        return replace(asked, extra={k: v for k, v in d.items() if k not in written or written[k] != v})


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _texts(value: object) -> tuple[str, ...]:
    return tuple(str(x) for x in value) if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True)
class BisectionRecord:
    """One bisection of the store (``bisections/<key>.json`` and its row).  ``result`` is the
    result JSON as recorded (kept whole: a repair writes it back); ``recorded`` reads it typed."""

    id: int
    key: str
    package: str
    good: str
    bad: str
    params: AskedFor
    status: BisectionStatus
    result: Mapping[str, Any]
    created: float
    updated: float
    interrupted: str = ""  # read back only (not stored): why a "running" one is not, and since when

    KEYS: ClassVar[tuple[str, ...]] = ("id", "key", "package", "good", "bad", "params", "status", "result",
                                       "created", "updated")

    @cached_property
    def recorded(self) -> Recorded:
        """The result, typed: finished or not, of a release or an environment bisection."""
        return Recorded.from_json(self.result)

    def to_json(self) -> dict:
        return {"id": self.id, "key": self.key, "package": self.package, "good": self.good, "bad": self.bad,
                "params": self.params.to_json(), "status": self.status.value, "result": dict(self.result),
                "created": self.created, "updated": self.updated}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BisectionRecord:
        """A KeyError, TypeError or ValueError when ``data`` is not one (unknown keys are ignored)."""
        if not isinstance(data.get("params"), dict) or not isinstance(data.get("result"), dict):
            raise TypeError("params and result are objects")
        return cls(int(data.get("id") or 0), str(data["key"]), str(data["package"]), str(data["good"]),
                   str(data["bad"]), AskedFor.from_json(data["params"]),
                   read_enum(BisectionStatus, data["status"], BisectionStatus.RUNNING), data["result"],
                   float(data.get("created") or data["updated"]), float(data["updated"]))
