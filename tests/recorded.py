"""A run as the store gives it back, made from the fields a record keeps: for tests of what is
read from a record (its identity, its verdict, why it is a skip) without launching anything."""

from __future__ import annotations

from dsbisect.core.model import Outcome, Point, RunStatus
from dsbisect.records import migrate
from dsbisect.records.run import Evidence, RunFacts, RunRecord
from dsbisect.verdict.identity import HangSignature, Identity


def record(outcome: Outcome | None, reason: str = "", signature: str = "", evidence: Evidence | None = None,
           facts: RunFacts | None = None) -> RunRecord:
    """A done run of these fields, read through ``records.migrate`` as the store reads every run."""
    p = Point(versions=(("dsb-toy", "1.0.0"),))
    return migrate.lifted(RunRecord(1, "c", "k", p, p.key, None, 1, RunStatus.DONE, outcome, None, 1.0, 0.0, reason,
                                    None, signature, evidence or Evidence(), facts or RunFacts(), "host"))


def learned(outcome: Outcome, reason: str = "", signature: str = "", frames: tuple[str, ...] = (),
            hang: HangSignature | None = None) -> Identity | None:
    """The identity of a run that recorded ``reason``, ``signature``, the package ``frames`` of
    its traceback and (typed) its ``hang``."""
    evidence = Evidence.of(error_frames=list(frames) or None, hang=hang.to_json() if hang is not None else None)
    return record(outcome, reason, signature, evidence).identity()
