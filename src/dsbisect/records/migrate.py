"""Old records through one door: every shape an older dsbisect wrote, lifted to the current one
when it is read, so that no reader branches on a past shape.

The store reads every run through ``lifted`` and every bisection's JSON through ``result`` and
``asked``; a result file (``bisect --format json``) is read through ``result`` too.  What
changed, and what each function makes of it:

- ``lifted`` (a run): a SKIP of dsbisect 0.1.1 and older recorded no ``skip_cause``: the
  runner's words of then say it; a HANG recorded before ``evidence.hang`` (its typed waits)
  holds only its signature's text: read from it; a FAIL's failure is, in every dsbisect, the
  reason text the classifier wrote (run.json and the ``--format json`` keys are pinned: no typed
  field was added): its exception type and message are read from it here, the one place.
- ``identity`` (a learned failure: a result's ``regression.failure``, a bisection's
  ``params.regression``): a HANG learned before its waits were typed has none (or only a text):
  they are read from its message, the form.
- ``result`` (a release or an environment bisection's result): an environment result from before
  ``"kind"`` is known by its ``env_diff``; each learned failure in it as ``identity`` says.
- ``asked`` (``params``): each learned failure as ``identity`` says.

Lifting fills in what the record says in other words; it never changes what it says.  The JSON
a record writes back is the current shape.  Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from dsbisect.core.model import Outcome
from dsbisect.records.run import RunRecord, SkipCause
from dsbisect.verdict.identity import Failure, HangSignature

__all__ = ["asked", "failure", "hang", "identity", "lifted", "result", "skip_cause"]

# ---------------------------------------------------------------------- runs

_LEGACY_CAUSES = ((re.compile(r"needs \d+ CUDA GPUs; this machine has "), SkipCause.GPUS),
                  (re.compile(r"venv could not be built: "), SkipCause.VENV))
_ERROR = re.compile(r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit|Warning)\w*):\s*(.*)$", re.S)


def lifted(r: RunRecord) -> RunRecord:
    """The run with what its record says typed: why a SKIP is one, a HANG's signature, a FAIL's failure."""
    return replace(r, skip_cause=skip_cause(r), hang=hang(r), failure=failure(r.reason) if r.outcome is Outcome.FAIL
                   else None)


def skip_cause(r: RunRecord) -> SkipCause | None:
    """Why the run is a SKIP (None: it is none, or no cause is known): the user's mark, the cause
    recorded, or (dsbisect 0.1.1 and older recorded none) the runner's words of then."""
    if r.outcome is not Outcome.SKIP:
        return None
    if r.manual is not None:
        return SkipCause.MANUAL
    if r.evidence.skip_cause is not None:
        return r.evidence.skip_cause
    return next((cause for pattern, cause in _LEGACY_CAUSES if pattern.match(r.reason or "")), None)


def hang(r: RunRecord) -> HangSignature | None:
    """A HANG's signature: as recorded typed, else (recorded before it was) read from its text."""
    if r.outcome is not Outcome.HANG:
        return None
    typed = HangSignature.from_json(r.evidence.hang) if r.evidence.hang is not None else None
    return typed if typed is not None else HangSignature.from_text(r.signature or r.reason)


def failure(reason: str) -> Failure:
    """A FAIL's failure from the reason the classifier wrote: 'RuntimeError: boom (from ...)' is
    RuntimeError and 'boom (from ...)'; a reason that names no exception is all message."""
    text = (reason or "").strip()
    m = _ERROR.match(text)
    error, message = (m[1].rsplit(".", 1)[-1], m[2]) if m else ("", text)
    return Failure(error, message, text)


# ------------------------------------------------------------------ the JSON


def identity(d: Mapping) -> Mapping:
    """A learned failure's JSON (``Identity.as_json``) in the current shape: a HANG's typed waits
    where it was learned before they were typed (from its message, the form; or its text)."""
    if d.get("kind") != Outcome.HANG.value or isinstance(d.get("hang"), Mapping):
        return d
    text = d["hang"] if isinstance(d.get("hang"), str) else str(d.get("message", ""))
    return {**d, "hang": HangSignature.from_text(text).to_json()}


def result(d: Mapping) -> Mapping:
    """A bisection's result JSON in the current shape (the release bisections of an environment
    one's ``releases`` too)."""
    out = dict(d)
    if "kind" not in out and isinstance(out.get("env_diff"), Mapping):
        out["kind"] = "environment"
    regression = out.get("regression")
    if isinstance(regression, Mapping) and isinstance(regression.get("failure"), Mapping):
        out["regression"] = {**regression, "failure": identity(regression["failure"])}
    if isinstance(out.get("releases"), list):
        out["releases"] = [result(x) if isinstance(x, Mapping) else x for x in out["releases"]]
    return out


def asked(d: Mapping) -> Mapping:
    """A bisection's ``params`` in the current shape."""
    if isinstance(d.get("regression"), Mapping):
        return {**d, "regression": identity(d["regression"])}
    return d
