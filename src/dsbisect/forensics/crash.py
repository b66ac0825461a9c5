"""A failed run's crash as a maintainer reads it: the Python traceback of the rank that raised
first, whole, and one line for each other rank that raised.

The logs of a run (``launcher.log``, ``ranks/**``) are read as text, each line belonging to
the rank its ``[rankN]:`` prefix or its log's name says.  A traceback is its header
(``Traceback (most recent call last):``) through its exception line and that message's
continuation, a chain (``raise … from``, an exception while handling another) kept as one.
The rank that raised first is the one the launcher names as the root cause (torch elastic's
"Root Cause (first observed failure)"), else the lowest rank whose exception is not a
consequence of another rank's end (a peer that closed the connection, a SIGTERM from the
launcher); a launcher's own traceback (``ChildFailedError``) is never a rank's.

Pure but for ``read_crash`` (the run folder's logs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.verdict.outcome import rank_tagged
from dsbisect.core.rundir import RunDir, rank_of_log, read_tail

HEADER = "Traceback (most recent call last):"
CHAIN = ("The above exception was the direct cause of the following exception:",
         "During handling of the above exception, another exception occurred:")
MAX_LINES = 400  # of one traceback (a deep recursion's repeats are cut in the middle)
MAX_MESSAGE = 30  # continuation lines of one exception's message
_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_CONSEQUENCE = re.compile(
    r"closed by peer|reset by peer|Broken pipe|Connection refused|SIGTERM|Signal 15|SignalException|"
    r"KeyboardInterrupt|ChildFailedError|ProcessGroup.*(?:aborted|terminated)|Connection closed", re.I)
_LOG_LIMIT = 4 << 20


@dataclass(frozen=True)
class Traceback:
    rank: int | None  # None: a line of no rank (the launcher's own)
    log: str  # the log it was read from, relative to the run folder
    lines: tuple[str, ...]  # whole, without the [rankN]: prefix
    error: str  # the exception line that ended it ("ValueError: …")

    @property
    def consequence(self) -> bool:
        """An exception that says another rank ended first (or the launcher stopped this one)."""
        return self.rank is None or bool(_CONSEQUENCE.search(self.error))


@dataclass(frozen=True)
class Crash:
    first: Traceback | None  # the rank that raised first; None: no rank's traceback in the logs
    others: tuple[Traceback, ...]  # every other rank's last traceback, by rank
    root_rank: int | None = None  # the rank the launcher named as the root cause

    @property
    def heading(self) -> str:
        """``rank 0 raised first (ranks/0/stderr.log, the launcher's root cause)``."""
        t = self.first
        if t is None:
            return ""
        who = f"rank {t.rank} raised first" if t.rank is not None else "the launcher raised"
        root = ", the launcher's root cause" if t.rank is not None and self.root_rank == t.rank else ""
        return f"{who} ({t.log}{root})"

    def other_lines(self) -> list[str]:
        return [f"rank {t.rank} also raised: {t.error}" for t in self.others if t.rank is not None]


def tracebacks(log: str, text: str, file_rank: int | None) -> list[Traceback]:
    """The tracebacks of one log, each with the rank of its lines, in the order they end."""
    by_rank: dict[int | None, list[str]] = {}
    for raw in text.splitlines():
        rank, line = rank_tagged(raw)
        rank = file_rank if rank is None else rank
        by_rank.setdefault(rank, []).append(line.rstrip("\r"))
    out = []
    for rank, lines in by_rank.items():
        out += [Traceback(rank, log, tuple(_cut(block)), _error_of(block)) for block in _blocks(lines)]
    return out


def _blocks(lines: list[str]) -> list[list[str]]:
    """Each traceback (a chain as one) of one rank's lines: frames, then the exception line and
    the lines of its message up to a blank line (at most ``MAX_MESSAGE``)."""
    out: list[list[str]] = []
    block: list[str] | None = None
    state, said = "", 0  # frames | message | gap | chain; lines of the message so far
    for line in lines:
        bare = line.strip()
        if bare == HEADER:
            if block is not None and state != "chain":
                out.append(block)
                block = None
            block, state = (block or []) + [line], "frames"
        elif block is None:
            continue
        elif state == "frames":
            block.append(line)
            if bare and not line[:1].isspace():
                state, said = "message", 0
        elif bare in CHAIN:
            block.append(line)
            state = "chain"
        elif state == "chain" or (state == "message" and bare and said < MAX_MESSAGE):
            block.append(line)
            said += 1
        elif not bare and state in ("message", "gap"):  # a blank line: a chain's marker may follow
            block.append(line)
            state = "gap"
        else:
            out.append(block)
            block, state = None, ""
    if block is not None:
        out.append(block)
    return [_trimmed(b) for b in out]


def _trimmed(block: list[str]) -> list[str]:
    while block and not block[-1].strip():
        block = block[:-1]
    return block


def _error_of(block: list[str]) -> str:
    """The exception line that ended the block (the last line at the left margin)."""
    for line in reversed(block):
        if line.strip() and not line[:1].isspace() and line.strip() != HEADER and line.strip() not in CHAIN:
            return line.strip()
    return ""


def _cut(block: list[str]) -> list[str]:
    if len(block) <= MAX_LINES:
        return block
    half = MAX_LINES // 2
    return [*block[:half], f"  … {len(block) - MAX_LINES} lines left out …", *block[-half:]]


def root_rank(text: str) -> int | None:
    """The rank torch elastic's summary names under "Root Cause (first observed failure)"."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _ROOT.search(line):
            for follow in lines[i + 1:i + 8]:
                m = _ROOT_RANK.match(rank_tagged(follow)[1])
                if m:
                    return int(m[1])
    return None


def crash(found: Sequence[Traceback], root: int | None = None) -> Crash:
    """The first rank's traceback and the others' (each rank's last, a repeat in two logs once)."""
    last: dict[int | None, Traceback] = {}
    for t in found:
        if t.error:
            last[t.rank] = t
    ranked = [t for t in last.values() if t.rank is not None]
    if not ranked:
        return Crash(last.get(None), (), root)
    first = min(ranked, key=lambda t: (t.rank != root, t.consequence, t.rank))
    others = tuple(sorted((t for t in ranked if t is not first), key=lambda t: t.rank))
    return Crash(first, others, root)


def read_crash(run_dir: Path) -> Crash:
    """The crash the run folder's logs show (an unreadable log is left out)."""
    run = RunDir(run_dir)
    found: list[Traceback] = []
    root = None
    for path in run.logs():
        try:
            text = read_tail(path, _LOG_LIMIT)
        except OSError:
            continue
        found += tracebacks(str(path.relative_to(run_dir)), text, rank_of_log(path))
        root = root if root is not None else root_rank(text)
    return crash(found, root)
