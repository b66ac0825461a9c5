"""Outcomes of one run and the verdicts a bisection draws from them. Pure: no I/O.

Three layers: ``launch`` gives the raw exit code, timeout flag and logs; ``classify``
gives the Outcome; ``verdict`` maps outcomes to GOOD/BAD/SKIP for ``--regress-on``.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from .model import Outcome, RegressOn, Verdict

SKIP_EXIT = 125  # git bisect's "cannot test this commit"


@dataclass(frozen=True)
class Classified:
    outcome: Outcome
    reason: str


_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit)\b.*?:.*)$"
)
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")


def classify(exit_code: int | None, timed_out: bool, hang_line: str, why: str, tail: str,
             ranks: Mapping[int, str] | None = None) -> Classified:
    """The outcome of one run from what the launcher gave back; ``ranks`` holds each rank's
    own log (its tail), where a rank's fatal signal is named by faulthandler."""
    if hang_line:
        return Classified(Outcome.HANG, _clip(hang_line))
    if timed_out:
        return Classified(Outcome.HANG, why or "timed out")
    if exit_code == 0:
        return Classified(Outcome.PASS, "")
    if exit_code == SKIP_EXIT:
        return Classified(Outcome.SKIP, first_error(tail) or "the script exited 125 (untestable)")
    first = first_rank_exit(tail)
    if first is not None and first[1] == SKIP_EXIT:  # a launcher that reports 125 as its own 1
        return Classified(Outcome.SKIP, first_error(tail) or _rank_text(first[0], "exited 125 (untestable)"))
    # A rank that died of a signal comes first: its peers' errors ("Connection closed by peer")
    # follow from it, whichever of them the launcher happened to see end first.
    deaths = signal_deaths(ranks or {})
    if deaths:
        (sig, fatal), who = next(iter(deaths.items()))
        return Classified(Outcome.FAIL, f"{_ranks_text(who)} killed by {sig} ({fatal})")
    if first is not None and first[1] < 0:
        return Classified(Outcome.FAIL, _rank_text(first[0], f"killed by {_signal_name(-first[1])}")
                          + (f" ({fatal})" if (fatal := fatal_error(tail)) else ""))
    return Classified(Outcome.FAIL, cause_error(tail, ranks or {}) or fatal_error(tail) or _exit_text(exit_code))


def _rank_text(rank: int | None, what: str) -> str:
    return f"rank {rank} {what}" if rank is not None else f"a rank {what}"


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


_DS_EXIT = re.compile(r"exits with return code = (-?\d+)")
_TR_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_TR_RANK = re.compile(r"^\s*(?:\[rank\d+\]:)?\s*rank\s*:\s*(\d+)")
_TR_EXIT = re.compile(r"^\s*(?:\[rank\d+\]:)?\s*exitcode\s*:\s*(-?\d+)")
_FATAL = re.compile(r"Fatal Python error: ([A-Z][\w ]+)")
# faulthandler's names for the signals it catches
_FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                  "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def first_rank_exit(text: str) -> tuple[int | None, int] | None:
    """(rank, exit code) of the first rank to fail, as the launcher reported it: torchrun's
    "Root Cause" entry, or the deepspeed launcher's "exits with return code" line.  The
    deepspeed launcher's line gives the code of the first process it found ended but the
    command line of its last rank, whichever rank that was: its rank is None."""
    m = _DS_EXIT.search(text)
    if m:
        return None, int(m[1])
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _TR_ROOT.search(ln)), 0)
    rank = None
    for ln in lines[start:]:
        if (r := _TR_RANK.match(ln)) is not None:
            rank = int(r[1])
        elif (e := _TR_EXIT.match(ln)) is not None and rank is not None:
            return rank, int(e[1])
    return None


def signal_deaths(ranks: Mapping[int, str]) -> dict[tuple[str, str], list[int]]:
    """The ranks whose own log says faulthandler caught a fatal signal, by (signal, faulthandler's
    line), in rank order: {("SIGSEGV", "Fatal Python error: Segmentation fault"): [1]}."""
    out: dict[tuple[str, str], list[int]] = {}
    for rank in sorted(ranks):
        m = _FATAL.search(ranks[rank])
        if m and (sig := _FATAL_SIGNALS.get(m[1].strip())):
            out.setdefault((sig, f"Fatal Python error: {m[1].strip()}"), []).append(rank)
    return out


def fatal_error(text: str) -> str:
    """A "Fatal Python error" (faulthandler: a segfault, an abort) in the logs, if any."""
    m = _FATAL.search(text)
    return f"Fatal Python error: {m[1].strip()}" if m else ""


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def first_error(text: str) -> str:
    """The first exception line of a traceback in ``text`` (e.g. 'RuntimeError: ...')."""
    errors = traceback_errors(text)
    if errors:
        return errors[0]
    lines = [_RANK_PREFIX.sub("", ln) for ln in text.splitlines()]
    for i, ln in enumerate(lines):
        m = _ERROR_LINE.match(ln)
        if m and "Warning" not in m.group(1):
            if m.group(1).rstrip().endswith(":"):  # the message begins with a newline
                found = _exception_after(lines, i)
                return _clip(found) if found else _clip(m.group(1))
            return _clip(m.group(1))
    return ""


_EXC_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit)\w*)(?::(.*))?$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def traceback_errors(text: str) -> list[str]:
    """The exception of each traceback in ``text``, in order: 'RuntimeError: message', with
    the first non-empty line of a message that begins with a newline.  A chain (``raise X from
    Y``, or an exception raised while handling another) is one entry: the exception that ended
    it, "(from Y: ...)" added where it is chained."""
    lines = [_RANK_PREFIX.sub("", ln) for ln in text.splitlines()]
    out: list[str] = []
    chained = False
    for i, ln in enumerate(lines):
        if ln.startswith(_CHAINED):
            chained = bool(out)
        elif ln.startswith("Traceback (most recent call last)"):
            found = _exception_after(lines, i + 1)
            if found is None:
                continue
            if chained:
                out[-1] = _clip(f"{found} (from {out[-1]})")
            else:
                out.append(_clip(found))
            chained = False
    return out


def _exception_after(lines: list[str], start: int) -> str | None:
    """The exception line that ends the traceback starting at ``start``, its message filled in
    from the next non-empty line when the exception's own line has none after the colon."""
    for j in range(start, len(lines)):
        ln = lines[j]
        if not ln or ln.startswith((" ", "\t")):
            continue
        if ln.startswith("Traceback"):
            return None
        m = _EXC_LINE.match(ln.rstrip())
        if not m:
            continue
        name, message = m[1], (m[2] or "").strip()
        if m[2] is not None and not message:  # the message begins with a newline
            message = next((x.strip() for x in lines[j + 1 : j + 12] if x.strip()
                            and not x.startswith(("Traceback", *_CHAINED))), "")
        return f"{name}: {message}" if message else name
    return None


# What a rank raises because a peer went away: the peer's own error is the cause.
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe"
    r"|NCCL communicator was aborted|ProcessGroupNCCL is aborted|Socket closed|peer has closed",
    re.IGNORECASE)


def cause_error(tail: str, ranks: Mapping[int, str]) -> str:
    """The error that explains a failed run: the first one, by rank, that is not a rank's
    reaction to a peer that went away ("Connection closed by peer"); else the first error.
    Without the ranks' own logs, the same over every traceback in ``tail``."""
    errors = [e for rank in sorted(ranks) for e in traceback_errors(ranks[rank])[:1]] or traceback_errors(tail)
    cause = next((e for e in errors if not _CONSEQUENCE.search(e)), "")
    return cause or first_error(tail)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0 or code >= 128:
        num = -code if code < 0 else code - 128
        try:
            return f"exit {code} (signal {signal.Signals(num).name})"
        except ValueError:
            pass
    return f"exit {code}"


def _clip(s: str, n: int = 300) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def verdict(outcome: Outcome, regress_on: RegressOn, signature: str = "", wanted: str | None = None) -> Verdict:
    """GOOD/BAD/SKIP of one outcome.

    ``wanted`` narrows BAD to runs whose signature (or failure reason) contains it, so an
    unrelated crash or OOM does not steer a bisection: those become SKIP.
    """
    if outcome is Outcome.SKIP:
        return Verdict.SKIP
    if outcome is Outcome.PASS:
        return Verdict.GOOD
    counts = {
        RegressOn.HANG: outcome is Outcome.HANG,
        RegressOn.FAIL: outcome is Outcome.FAIL,
        RegressOn.ANY: True,
        RegressOn.AUTO: True,  # not known yet: the bad end's own runs (identity.resolve)
    }[regress_on]
    if not counts:
        return Verdict.SKIP
    if wanted and wanted.lower() not in (signature or "").lower():
        return Verdict.SKIP
    return Verdict.BAD


def combine(verdicts: list[Verdict]) -> Verdict:
    """One point's verdict from its repeated runs: bad if any is bad, good only if all are good."""
    if any(v is Verdict.BAD for v in verdicts):
        return Verdict.BAD
    if verdicts and all(v is Verdict.GOOD for v in verdicts):
        return Verdict.GOOD
    return Verdict.SKIP
