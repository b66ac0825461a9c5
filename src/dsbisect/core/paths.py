"""Paths as a published report shows them: never the reporter's folder layout.

A Markdown issue body or an HTML page is pasted where anyone reads it; the absolute paths of
the machine that made it (a home folder, a scratch folder, a checkout's location) are no part
of the bug.  ``shown_path`` is the one rule: relative to the working folder when inside it,
else ``~/...`` under the user's home, else a package's file from its ``site-packages`` on, else
the last two components after ``…/`` (a temporary folder's or another user's home's root left
out); a short system path (``/dev/shm``) as it is.
``unlocal`` applies it to every absolute path in a text (a traceback, an environment line, a
command line).  The terminal, the store and JSON keep paths whole: they stay on the machine.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import PurePosixPath

KEEP = 2  # components after the placeholder
PLACEHOLDER = "…"
# roots whose next component is someone's own (a home) or a scratch name (a temp folder)
_PRIVATE_ROOTS = ("/home", "/Users", "/root", "/tmp", "/var/tmp", "/dev/shm", "/var/folders", "/private/var/folders",
                  "/private/tmp", "/scratch", "/run/user")
_CHAR = r"[\w.@+%=~-]"
_PATH = re.compile(rf"(?:(?<=file://)|(?<![\w./:~$\\-]))/(?:{_CHAR}+/)*{_CHAR}+/?")


def shown_path(path: str | os.PathLike, cwd: str | None = None, home: str | None = None) -> str:
    """``path`` as a published report shows it (see the module's rule); a relative path as it is."""
    text = os.fspath(path)
    if not text.startswith("/"):
        return text
    p = PurePosixPath(os.path.normpath(text))
    cwd = PurePosixPath(os.path.normpath(cwd if cwd is not None else os.getcwd()))
    home = PurePosixPath(os.path.normpath(home if home is not None else os.path.expanduser("~")))
    if len(cwd.parts) > 1 and _within(p, cwd):
        return p.relative_to(cwd).as_posix() if p != cwd else "."
    if len(home.parts) > 1 and _within(p, home):
        return "~" if p == home else "~/" + p.relative_to(home).as_posix()
    for mark in ("site-packages", "dist-packages"):  # a package's file: named from there, whatever holds it
        if mark in p.parts[:-1]:
            return PLACEHOLDER + "/" + "/".join(p.parts[p.parts.index(mark):])
    rest = _after_private_root(p)
    if (rest is None and len(p.parts) - 1 <= KEEP) or p.as_posix() in _PRIVATE_ROOTS:  # /opt/wheels, /dev/shm
        return p.as_posix()
    tail = (rest if rest is not None else p.parts[1:])[-KEEP:]
    return PLACEHOLDER + "/" + "/".join(tail) if tail else PLACEHOLDER


def unlocal(text: str, cwd: str | None = None, home: str | None = None) -> str:
    """``text`` with each absolute path in it shown by ``shown_path`` (URLs' paths left alone,
    but a ``file://`` URL's path too)."""
    if not text or "/" not in text:
        return text
    cwd = cwd if cwd is not None else os.getcwd()
    home = home if home is not None else os.path.expanduser("~")
    return _PATH.sub(lambda m: _one(m[0], cwd, home), text)


def _one(found: str, cwd: str, home: str) -> str:
    if not found.startswith("/"):  # a word ending in a path character before the slash: not a path
        return found
    slash = found.endswith("/") and len(found) > 1
    shown = shown_path(found.rstrip("/") if slash else found, cwd, home)
    return shown + "/" if slash and not shown.endswith("/") else shown


def _within(p: PurePosixPath, folder: PurePosixPath) -> bool:
    return p == folder or folder in p.parents


def _after_private_root(p: PurePosixPath) -> tuple[str, ...] | None:
    """The components after a temp folder or a home's owner (None: under no such root)."""
    roots = {*_PRIVATE_ROOTS, os.path.normpath(tempfile.gettempdir()), os.environ.get("TMPDIR", "/tmp").rstrip("/")}
    for root in sorted((r for r in roots if r), key=len, reverse=True):
        r = PurePosixPath(root)
        if _within(p, r):
            rest = p.parts[len(r.parts):]
            owned = root in ("/home", "/Users")  # the next component is the user's name
            return rest[1:] if owned else rest
    return None
