"""How much of a store dsbisect reads and writes at once, whatever a file holds.

A run's record is a few KB; a hostile or damaged one may hold a field of hundreds of MB.
Three limits keep every command's memory bounded:

- what is written: a string of a record longer than ``TEXT_CAP`` is cut (the cut said in
  it), and a record whose JSON is still over ``RECORD_LIMIT`` is cut harder, so no record
  dsbisect writes is over the limit it reads;
- what is read: a record or bisection file over ``RECORD_LIMIT`` is refused unread
  (``core.files.read_small``: an OSError whose strerror says "too large to read");
- what SQLite hands over: a value (or row) over ``SQL_LIMIT`` is refused by SQLite itself
  (``SQLITE_LIMIT_LENGTH``) before it is loaded, so a row an older dsbisect indexed whole is
  left out and named, not read.

Pure but for ``read_json`` and ``limit``; no SQL beyond setting the limit.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dsbisect.core.files import read_small, size_text

RECORD_LIMIT = 4 << 20  # a run.json or bisection file (a few KB in practice)
TEXT_CAP = 256 << 10  # one string of a record (an error's text, a note)
SQL_LIMIT = 2 * RECORD_LIMIT  # one value or row of the index: a record's JSON columns fit
_HARD = (4096, 1000)  # the second cut: strings, and items of a list or an object


def read_json(path: Path, limit: int = RECORD_LIMIT) -> object:
    """The JSON of a store file: an OSError when it is over ``limit`` (or unreadable), a
    ValueError when it is not JSON."""
    return json.loads(read_small(path, limit))


def _cut_text(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f" [dsbisect: {size_text(len(text) - cap)} cut here, over the record limit]"


def _cut(value: object, text_cap: int, items: int | None) -> object:
    if isinstance(value, str):
        return _cut_text(value, text_cap)
    if isinstance(value, dict):
        kept = list(value.items())[:items] if items is not None else value.items()
        return {k: _cut(v, text_cap, items) for k, v in kept}
    if isinstance(value, (list, tuple)):
        kept = list(value)[:items] if items is not None else value
        return [_cut(v, text_cap, items) for v in kept]
    return value


def capped(values: dict) -> dict:
    """``values`` (a record, a bisection's params or result) cut to what the store keeps: no
    string over ``TEXT_CAP``, and the whole under ``RECORD_LIMIT`` (else cut to short strings
    and short lists: a huge record loses detail, never the run)."""
    out = _cut(values, TEXT_CAP, None)
    return _cut(values, *_HARD) if _over(out, RECORD_LIMIT // 2) else out


def _over(value: object, budget: int) -> bool:
    """Is ``value``'s JSON (roughly: its strings and a few bytes per item) over ``budget``?
    Stops as soon as it is: never builds the JSON of a huge value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            budget -= len(v) + 4
        elif isinstance(v, dict):
            budget -= 4 * len(v)
            stack += [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple)):
            budget -= 2 * len(v)
            stack += v
        else:
            budget -= 24
        if budget < 0:
            return True
    return False


def limit(db: sqlite3.Connection) -> None:
    """No value or row over ``SQL_LIMIT`` is read or written through ``db`` (python >= 3.11;
    before that, SQLite's own limit holds)."""
    setlimit = getattr(db, "setlimit", None)
    if setlimit is not None:
        setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQL_LIMIT)


def too_big(e: BaseException) -> bool:
    """Is ``e`` SQLite refusing a value over the limit?"""
    return isinstance(e, sqlite3.DataError) or "too big" in str(e)
