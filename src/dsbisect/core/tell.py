"""A line for the user from deep inside a job: a wait that has begun, a retry after a network
error.  Layers below the frontend call ``tell``; the command that runs them routes it to its
progress frontend with ``listening`` (a line on stderr, above a live status line); with no one
listening, the line goes to stderr as it is.  Text is outside text to whoever shows it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_listeners: list[Callable[[str], None]] = []


def tell(text: str) -> None:
    """Say ``text`` to the user now (one line), through whoever listens."""
    with _lock:
        listener = _listeners[-1] if _listeners else None
    if listener is not None:
        listener(text)
        return
    try:
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr: nothing to tell it on
        pass


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """``tell``'s lines go to ``listener`` within this block (the innermost block wins)."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)
