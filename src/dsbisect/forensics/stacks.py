"""Python stacks as the dumps write them: ``py-spy dump`` output and faulthandler's.

One reader of each format, for every module that looks at a rank's stack: ``forensics``
(where a hung rank was), ``evidence`` and ``multinode`` (did a silent rank's stack move?).
Pure: text in, frozen ``Thread``/``Frame`` tuples out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # path as found
    line: int | None


@dataclass(frozen=True)
class Thread:
    name: str  # py-spy's thread name ("MainThread"), faulthandler's thread id
    current: bool  # faulthandler's "Current thread": the one the signal ran in
    frames: tuple[Frame, ...]  # innermost first


_PYSPY_THREAD = re.compile(r'^Thread \S+ \([^)]*\):?\s*(?:"(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^ {4}(\S.*?) \((.+?)(?::(\d+))?\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.+)", line (\d+|\?+) in (.+)$')


def pyspy_threads(text: str) -> list[Thread]:
    """The threads of a ``py-spy dump`` that hold a Python stack."""
    threads: list[Thread] = []
    for raw in text.splitlines():
        head = _PYSPY_THREAD.match(raw)
        if head:
            threads.append(Thread(head[1] or "", False, ()))
            continue
        f = _PYSPY_FRAME.match(raw)
        if f and threads:
            threads[-1] = _add(threads[-1], Frame(f[1], f[2], _line(f[3])))
    return [t for t in threads if t.frames]


def pyspy_main(text: str) -> tuple[Frame, ...]:
    """The main thread's frames in ``py-spy dump`` output (() when it has none)."""
    thread = main_thread(pyspy_threads(text))
    return thread.frames if thread is not None else ()


def faulthandler_threads(text: str) -> list[Thread]:
    """Every thread of every faulthandler dump in ``text``, in file order (see ``last_dump``)."""
    threads: list[Thread] = []
    for raw in text.splitlines():
        head = _FH_THREAD.match(raw)
        if head:
            threads.append(Thread(head[2], head[1] == "Current thread", ()))
            continue
        f = _FH_FRAME.match(raw)
        if f and threads:
            threads[-1] = _add(threads[-1], Frame(f[3].strip(), f[1], _line(f[2])))
    return threads


def last_dump(threads: list[Thread]) -> list[Thread]:
    """Dumps appended to one file: a new one starts at a thread id or "Current thread" seen again."""
    start, seen, current = 0, set(), False
    for n, t in enumerate(threads):
        if t.name in seen or (t.current and current):
            start, seen, current = n, set(), False
        seen.add(t.name)
        current = current or t.current
    return [t for t in threads[start:] if t.frames]


def main_thread(threads: list[Thread]) -> Thread | None:
    """py-spy's "MainThread"; else a thread not started by threading, the signalled one first."""
    named = [t for t in threads if t.name == "MainThread"]
    own = [t for t in threads if t.frames[-1].function.rsplit(".", 1)[-1] != "_bootstrap"]
    ranked = named + sorted(own, key=lambda t: not t.current) + threads
    return ranked[0] if ranked else None


def _add(thread: Thread, frame: Frame) -> Thread:
    return Thread(thread.name, thread.current, thread.frames + (frame,))


def _line(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None
