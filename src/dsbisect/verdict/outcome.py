"""Outcomes of one run and the verdicts a bisection draws from them. Pure: no I/O.

Three layers: ``launch`` gives the raw exit code, timeout flag and logs; ``classify``
gives the Outcome; ``verdict`` maps outcomes to GOOD/BAD/SKIP for ``--regress-on``.

A collective-timeout line (``HANG_PATTERNS``) is evidence, not a verdict: the words turn up in
config dumps, ``print(os.environ)``, warnings and in the message of a timeout a script caught
and retried.  A run is a HANG when it did not finish on its own (``timed_out``: the wall
deadline, the idle limit, a deadlock proof, or a timeout line followed by no progress), or
when a rank died *of* the timeout: the exception that ended the rank (the last traceback in
its log, with the exceptions it was raised from) is a collective timeout, or the rank was
aborted (SIGABRT: NCCL's watchdog takes the process down) after its log reported one.  A run
that exited 0 passed, whatever it printed; a rank that failed of anything else is a FAIL with
its own reason, whatever words another rank (or it, earlier) printed.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from dsbisect.core.model import Outcome, RegressOn, Verdict
from dsbisect.core.outside import clip

SKIP_EXIT = 125  # git bisect's "cannot test this commit"

# What torch prints when a collective timed out: NCCL's watchdog, gloo's recv/send timeout.
HANG_PATTERNS = (
    re.compile(r"Watchdog caught collective operation timeout"),
    re.compile(r"collective operation timeout", re.IGNORECASE),
    re.compile(r"Timed out waiting \d+ms for (recv|send) operation"),
    re.compile(r"NCCL watchdog thread terminated"),
    re.compile(r"ProcessGroupGloo.*[Tt]imed out"),
)


def is_hang_text(line: str) -> bool:
    """Whether ``line`` has the words of a collective timeout (evidence to weigh, not a verdict)."""
    return any(p.search(line) for p in HANG_PATTERNS)


@dataclass(frozen=True)
class Classified:
    outcome: Outcome
    reason: str


_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit)\b.*?:.*)$"
)
# A line a launcher or torch tagged with its rank: torch's "[rank1]: ", torchrun --tee's
# "[default1]:" (its role and the local rank), or both ("[default1]:[rank1]: RuntimeError: …").
_TAGS = re.compile(r"^(?:\[[A-Za-z_][\w.-]*?\d+\]:\s?)+")
_TAG = re.compile(r"\[([A-Za-z_][\w.-]*?)(\d+)\]:")
_RANK_PREFIX = re.compile(_TAGS.pattern + r"\s*")


def rank_tagged(line: str) -> tuple[int | None, str]:
    """The rank a tagged line names and the line without its tags ((None, line) untagged):
    torch's own "[rankN]:" wins over a launcher's role tag ("[default1]:", a local rank)."""
    m = _TAGS.match(line)
    if not m:
        return None, line
    tags = _TAG.findall(m.group(0))
    rank = next((int(n) for name, n in tags if name == "rank"), int(tags[-1][1]))
    return rank, line[m.end():]


def classify(exit_code: int | None, timed_out: bool, hang_line: str, why: str, tail: str,
             ranks: Mapping[int, str] | None = None) -> Classified:
    """The outcome of one run from what the launcher gave back; ``ranks`` holds each rank's
    own log (its tail), where a rank's fatal signal is named by faulthandler."""
    if timed_out:  # it did not finish on its own: the line, if any, says what it waited on
        return Classified(Outcome.HANG, _clip(why or hang_line or "timed out"))
    if exit_code == 0:  # whatever it printed
        return Classified(Outcome.PASS, "")
    if exit_code == SKIP_EXIT:
        return Classified(Outcome.SKIP, first_error(tail) or "the script exited 125 (untestable)")
    first = first_rank_exit(tail)
    if first is not None and first[1] == SKIP_EXIT:  # a launcher that reports 125 as its own 1
        return Classified(Outcome.SKIP, first_error(tail) or _rank_text(first[0], "exited 125 (untestable)"))
    # A rank that died of a signal comes first: its peers' errors ("Connection closed by peer")
    # follow from it, whichever of them the launcher happened to see end first.
    hung = died_of_timeout(tail, ranks or {}, first)
    if hung:
        return Classified(Outcome.HANG, hung)
    deaths = signal_deaths(ranks or {})
    if deaths:
        (sig, fatal), who = next(iter(deaths.items()))
        return Classified(Outcome.FAIL, f"{_ranks_text(who)} killed by {sig} ({fatal})")
    if first is not None and first[1] < 0:
        return Classified(Outcome.FAIL, _rank_text(first[0], f"killed by {_signal_name(-first[1])}")
                          + (f" ({fatal})" if (fatal := fatal_error(tail)) else ""))
    return Classified(Outcome.FAIL, pytest_failures(tail) or cause_error(tail, ranks or {}) or fatal_error(tail)
                      or _exit_text(exit_code))


def died_of_timeout(tail: str, ranks: Mapping[int, str], first: tuple[int | None, int] | None = None) -> str:
    """The collective timeout that ended a failed run, or "" when no rank died of one.

    A rank died of it when the exception that ended it (the last traceback of its log, at the
    log's end, with what that was raised from) is a collective timeout, or when it was aborted
    (SIGABRT: NCCL's watchdog) after its log reported one.  Where the launcher names the first
    rank to fail (torchrun), that rank decides; a first failure by another signal (SIGKILL,
    SIGSEGV) is no timeout; otherwise any rank that died of something else decides (a crash is
    more telling than a peer's timeout).  A timeout line alone is no cause of death."""
    logs = dict(ranks) or _prefixed_ranks(tail) or {0: tail}
    if first is not None and first[1] < 0 and first[1] != -6:
        return ""
    if first is not None and first[0] in logs and not _reacted(logs[first[0]]):
        logs = {first[0]: logs[first[0]]}  # (a first failure that is a reaction to a peer decides nothing)
    timeouts, other = [], False
    for rank in sorted(logs):
        died = _died_of(logs[rank])
        if died:
            timeouts.append(died)
        elif signal_deaths({rank: logs[rank]}) or (chain := fatal_chain(logs[rank])) and \
                not _CONSEQUENCE.search(chain[0]) and _at_end(logs[rank], chain[-1]):
            other = True
    if not timeouts and first is not None and first[1] == -6 and (line := _hang_line(tail)):
        return _clip(line)  # aborted without faulthandler's line: the launcher's code and the report
    return "" if other or not timeouts else _clip(timeouts[0])


def _reacted(text: str) -> bool:
    """Whether this rank's log ends in a reaction to a peer that went away ("Connection closed by
    peer"): torchrun may name such a rank first when the peer that timed out is slower to exit."""
    chain = fatal_chain(text)
    return bool(chain) and is_reaction(chain[0]) and _at_end(text, chain[-1])


def _died_of(text: str) -> str:
    """The timeout this rank's log says it died of ("" if none)."""
    chain = fatal_chain(text)
    hit = next((e for e in chain if is_hang_text(e)), "")
    if hit and _at_end(text, chain[-1]):
        return hit
    if _aborted(text):
        return _hang_line(text)
    return ""


AFTER_DEATH = 10  # lines a log may have after the exception that ended its process (teardown warnings)


def _at_end(text: str, error: str) -> bool:
    """Whether ``error`` (an exception line) is at the end of ``text``: what an uncaught exception
    leaves (the process prints it as it ends), unlike a traceback a script printed and went on."""
    lines = [_RANK_PREFIX.sub("", ln) for ln in text.splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        line = _clip(lines[i])
        if line.startswith(error[:80]) or _opens(line, error):
            return sum(1 for ln in lines[i + 1:] if ln.strip()) <= AFTER_DEATH
    return False


def _opens(line: str, error: str) -> bool:
    """Whether ``line`` is 'RuntimeError:' (or a bare 'RuntimeError') whose message follows on the
    next lines, for an error read as 'RuntimeError: message' (``_exception_after``)."""
    name = line.rstrip().rstrip(":")
    return bool(_EXC_LINE.fullmatch(name)) and error.startswith(name)


def _aborted(text: str) -> bool:
    m = _FATAL.search(text)
    return bool(m) and m[1].strip() == "Aborted"


def _hang_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if is_hang_text(ln)), "")


def _prefixed_ranks(text: str) -> dict[int, str]:
    """One combined log's lines by their rank tags (torchrun's ``--tee``: rank_tagged); {} without any."""
    out: dict[int, list[str]] = {}
    for ln in text.splitlines():
        rank, _ = rank_tagged(ln)
        if rank is not None:
            out.setdefault(rank, []).append(ln)
    return {rank: "\n".join(lines) for rank, lines in out.items()}


def _rank_text(rank: int | None, what: str) -> str:
    return f"rank {rank} {what}" if rank is not None else f"a rank {what}"


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


_DS_EXIT = re.compile(r"exits with return code = (-?\d+)")
# launcher: direct's line (_hook/dsbisect_ranks.py) for the first rank to fail
_DIRECT_EXIT = re.compile(r"^dsbisect: rank (\d+) (?:exited with code (\d+)|killed by (SIG[A-Z0-9]+))$", re.MULTILINE)
_SIGNALS = {s.name: s.value for s in signal.Signals}
_TR_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_TR_RANK = re.compile(r"^\s*(?:\[rank\d+\]:)?\s*rank\s*:\s*(\d+)")
_TR_EXIT = re.compile(r"^\s*(?:\[rank\d+\]:)?\s*exitcode\s*:\s*(-?\d+)")
# srun's line for a task that failed: "srun: error: HOST: task R: Exited with exit code N" (or the signal)
_SRUN_EXIT = re.compile(r"^srun: error: \S+: tasks? (\d+)(?:[-,]\S*)?: (.+?)\s*$", re.MULTILINE)
_SRUN_CODE = re.compile(r"Exited with exit code (\d+)")
_SRUN_SIGNALS = {"Killed": 9, "Terminated": 15, "Aborted": 6, "Segmentation fault": 11, "Bus error": 7,
                 "Floating point exception": 8, "Illegal instruction": 4, "Interrupt": 2}
_FATAL = re.compile(r"Fatal Python error: ([A-Z][\w ]+)")
# faulthandler's names for the signals it catches
_FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                  "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def first_rank_exit(text: str) -> tuple[int | None, int] | None:
    """(rank, exit code) of the first rank to fail, as the launcher reported it: torchrun's
    "Root Cause" entry, the deepspeed launcher's "exits with return code" line, ``launcher:
    direct``'s "dsbisect: rank R exited with code N" / "killed by SIGNAME", or srun's first
    "task R: Exited with exit code N" (a signal is -N).  The deepspeed launcher's line
    gives the code of the first process it found ended but the command line of its last rank,
    whichever rank that was: its rank is None."""
    m = _DS_EXIT.search(text)
    if m:
        return None, int(m[1])
    m = _DIRECT_EXIT.search(text)
    if m:
        return int(m[1]), int(m[2]) if m[2] is not None else -_SIGNALS.get(m[3], 0)
    srun = _srun_exit(text)
    if srun is not None:
        return srun
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _TR_ROOT.search(ln)), 0)
    rank = None
    for ln in lines[start:]:
        if (r := _TR_RANK.match(ln)) is not None:
            rank = int(r[1])
        elif (e := _TR_EXIT.match(ln)) is not None and rank is not None:
            return rank, int(e[1])
    return None


def _srun_exit(text: str) -> tuple[int, int] | None:
    for m in _SRUN_EXIT.finditer(text):
        code = _SRUN_CODE.search(m[2])
        sig = next((n for name, n in _SRUN_SIGNALS.items() if m[2].startswith(name)), None)
        if code or sig:
            return int(m[1]), int(code[1]) if code else -sig
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


_PYTEST_SUMMARY = re.compile(r"^=+ short test summary info =+$", re.MULTILINE)
_PYTEST_FAILED = re.compile(r"^(FAILED|ERROR) (\S.*)$")


def pytest_failures(text: str) -> str:
    """What a pytest run that failed says failed, from its short test summary (``FAILED
    tests/test_x.py::test_y - assert 5 == 4``): the first one, and how many more; "" when the
    text holds no summary.  The exit code made the run a failure; this names which."""
    at = [m.end() for m in _PYTEST_SUMMARY.finditer(text)]
    if not at:
        return ""
    found = [m[0] for ln in text[at[-1]:].splitlines() if (m := _PYTEST_FAILED.match(_RANK_PREFIX.sub("", ln)))]
    if not found:
        return ""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return _clip(found[0] + more)


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
    return [shown_chain(chain) for chain in _chains(text)]


def shown_chain(chain: list[str]) -> str:
    """One chain of exceptions as one reason: the last, "(from ...)" the one before it, and so on."""
    shown = chain[0]
    for error in chain[1:]:
        shown = f"{error} (from {shown})"
    return _clip(shown)


def _chains(text: str) -> list[list[str]]:
    """The tracebacks of ``text`` grouped into chains (linked by "direct cause" / "during handling")."""
    out: list[list[str]] = []
    for error, link in _tracebacks(text):
        if link and out:
            out[-1].append(error)
        else:
            out.append([error])
    return out


_DIRECT_CAUSE = "The above exception was the direct cause of the following exception"
_DURING = "During handling of the above exception, another exception occurred"


def _tracebacks(text: str) -> list[tuple[str, str]]:
    """(exception, how it is linked to the traceback before it: "cause", "context" or "")
    of each traceback in ``text``, in order."""
    lines = [_RANK_PREFIX.sub("", ln) for ln in text.splitlines()]
    out, link = [], ""
    for i, ln in enumerate(lines):
        if ln.startswith(_DIRECT_CAUSE):
            link = "cause"
        elif ln.startswith(_DURING):
            link = "context"
        elif ln.startswith("Traceback (most recent call last)"):
            found = _exception_after(lines, i + 1)
            if found is not None:
                out.append((_clip(found), link))
            link = ""
        elif ln.strip() and not ln.startswith((" ", "\t")) and not _EXC_LINE.match(ln.rstrip()) \
                and not _ERROR_LINE.match(ln):
            link = ""  # other output between two tracebacks: they are not one chain
    return out


def fatal_chain(text: str) -> list[str]:
    """What the process of this log died of: the exception of its last traceback, preceded by
    those it was raised from (``raise ... from``), in print order; [] without a traceback.  An
    exception raised while handling another (an implicit context) ended the process by itself:
    the one handled is not in the chain (a script that caught a timeout and then failed
    otherwise died of the other failure)."""
    found = _tracebacks(text)
    if not found:
        return []
    chain = [found[-1][0]]
    i = len(found) - 1
    while i > 0 and found[i][1] == "cause":
        i -= 1
        chain.insert(0, found[i][0])
    return chain


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
        after = [x.strip() for x in lines[j + 1 : j + 12] if x.strip() and not x.startswith(("Traceback", *_CHAINED))]
        if m[2] is not None and not message:  # the message begins with a newline
            message = after[0] if after else ""
        elif message.endswith(":") and after:  # "Error(s) in loading state_dict for X:": the next lines say what
            message = " ".join([message, *after[:2]])
        return f"{name}: {message}" if message else name
    return None


# What a rank raises because a peer went away: the peer's own error is the cause.
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe"
    r"|NCCL communicator was aborted|ProcessGroupNCCL is aborted|Socket closed|peer has closed",
    re.IGNORECASE)


# A rank's own exception that says a process it started died of SIGKILL: torch's DataLoader
# ("DataLoader worker (pid 7) is killed by signal: Killed."), subprocess ("died with
# <Signals.SIGKILL: 9>", "exit status -9"), multiprocessing ("exitcode -9"), a broken pool.
_CHILD_KILLED = re.compile(
    r"killed by signal: Killed|<Signals\.SIGKILL: 9>|exit status -9\b|exitcode[ =:]*-9\b"
    r"|process in the process pool was terminated abruptly", re.IGNORECASE)


def child_killed(reason: str) -> bool:
    """Whether the exception a rank died of says a child of it was killed by SIGKILL (what the
    out-of-memory killer sends): evidence to weigh beside an OOM counter, no verdict alone."""
    return bool(_CHILD_KILLED.search(reason))


def is_reaction(text: str) -> bool:
    """Whether an error is a rank's reaction to a peer that went away ("Connection closed by peer")."""
    return bool(_CONSEQUENCE.search(text))


def cause_error(tail: str, ranks: Mapping[int, str]) -> str:
    """The error that explains a failed run: the first one, by rank, that is not a rank's
    reaction to a peer that went away ("Connection closed by peer"); else the first error.
    Without the ranks' own logs, the same over every traceback in ``tail``.  A collective
    timeout that its rank survived (caught, and the log went on) explains nothing: left out; one
    that a rank died of comes after another rank's own error (the timeout waited on that rank)."""
    found: list[tuple[str, str]] = []  # (the error that decides, the reason as shown: its chain)
    for text in (ranks[rank] for rank in sorted(ranks)):
        chain = fatal_chain(text)
        if chain and not _survived(text, chain[0]):
            found.append((chain[0], shown_chain(chain)))
    if not found:
        for chain in _chains(tail):
            kept = [e for e in chain if not _survived(tail, e)]
            if kept:
                found.append((kept[0], shown_chain(chain)))
    cause = next((shown for key, shown in found if not _CONSEQUENCE.search(key) and not is_hang_text(key)), "") or \
        next((shown for key, shown in found if not _CONSEQUENCE.search(key)), "")
    return cause or next((e for e in [first_error(tail)] if not _survived(tail, e)), "")


def _survived(text: str, error: str) -> bool:
    return is_hang_text(error) and not _at_end(text, error)


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
    return clip(" ".join(s.split()), n)


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


def sigkilled(exit_code: int | None, tail: str) -> bool:
    """Whether the run, or the first of its ranks to end, was killed by SIGKILL (the exit code,
    the deepspeed launcher's "return code = -9", torchrun's root cause; 137 from a shell)."""
    first = first_rank_exit(tail)
    return bool({exit_code, first[1] if first else None} & {-signal.SIGKILL, 128 + signal.SIGKILL})
