"""Who holds a store, and whether the dsbisect behind a ``running`` row is still at work.

Every dsbisect that writes a store holds a shared lock on ``<store>/dsbisect.lock`` while the
store is open; ``store repair`` takes it exclusively, so it never rebuilds the index beside a
live writer (and writers wait while a repair runs).  A dsbisect that starts runs also holds
a writer file of its own, ``<store>/writers/<token>`` (exclusively locked, its pid and host
inside); each ``running`` row names that token.  A lock is a property of the file, not of its
name: a copy of the store (``cp -a``) holds the same files with no one locking them, so its
``running`` rows read as abandoned there and nothing done in the copy reaches the original.

The lease: a row also carries a heartbeat, refreshed every ``HEARTBEAT_S`` while its run is
live.  A machine cannot see another machine's processes, so a row of another host is judged
by its heartbeat alone: older than ``LEASE_S``, the claim is abandoned.

A bisection is judged the same way: while it is ``running`` its params name its writer
(``WRITER``: pid, host, token), and the writer file's modification time is the heartbeat
(touched with the rows').  A bisection whose writer is gone reads back as ``interrupted``,
saying since when, whatever the signal that stopped it (Ctrl-C, SIGTERM, kill -9, a reboot).

Standard library only; no SQL here (``store`` keeps all of it).
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import fcntl
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import StoreError
from dsbisect.core.files import read_small
from dsbisect.records.bisections import BisectionRecord, BisectionStatus

LOCK = "dsbisect.lock"
WRITERS = "writers"
HEARTBEAT_S = 30.0  # how often a live run's row is refreshed
LEASE_S = 300.0  # a row of another host whose heartbeat is older than this is abandoned
WRITER = "writer"  # the key of a running bisection's params that names its writer


class Liveness(enum.Enum):
    ALIVE = "alive"
    DEAD = "dead"  # this host's writer is gone (or holds another store: a copy's row)
    EXPIRED = "expired"  # another host's row whose heartbeat is older than the lease


@dataclass(frozen=True)
class Holder:
    """A live dsbisect that holds a store."""

    pid: int | None
    host: str

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


def judge(host: str | None, here: str, heartbeat: float | None, now: float, pid_alive: bool,
          writer_held: bool | None) -> Liveness:
    """The state of a ``running`` row's claim (pure).  ``writer_held``: whether the row's writer
    file is locked in this store (None: the row names none, or locks do not work here)."""
    if host != here:
        return Liveness.ALIVE if heartbeat is not None and now - heartbeat <= LEASE_S else Liveness.EXPIRED
    if not pid_alive or writer_held is False:
        return Liveness.DEAD
    return Liveness.ALIVE


def _flock(fd: int, how: int) -> bool | None:
    """Take a lock without waiting: True, False when another holds it, None when the
    filesystem has no locks."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None


def writer_held(store: Path, token: str | None) -> bool | None:
    """Is the writer file ``token`` of ``store`` locked by a live process?"""
    if not token or "/" in token:
        return None
    try:
        fd = os.open(store / WRITERS / token, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return None  # not ours to read: trust the pid
    try:
        got = _flock(fd, fcntl.LOCK_SH)
        return None if got is None else not got
    finally:
        os.close(fd)


def holders(store: Path) -> list[Holder]:
    """The live writers of ``store`` (their writer files are locked)."""
    out = []
    folder = store / WRITERS
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if writer_held(store, path.name):
            try:
                data = json.loads(read_small(path, 4096))
                out.append(Holder(data.get("pid"), str(data.get("host"))))
            except (OSError, ValueError, AttributeError):
                out.append(Holder(None, path.name))
    return out


class StoreLock:
    """This process's hold on a store: the shared (or, for repair, exclusive) lock, and the
    writer file made when it first starts a run."""

    def __init__(self, store: Path, exclusive: bool = False, wait_s: float = 30.0):
        self.store = store
        self.token: str | None = None
        self._writer_fd: int | None = None
        try:
            self._fd = os.open(store / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:  # a read-only mount, a folder of another user's
            self._fd = None
            why = "a read-only filesystem" if e.errno == errno.EROFS else e.strerror
            raise StoreError(f"{store} cannot be locked for writing ({why}): this command writes the store; "
                             "copy it (cp -a) to a writable place and use the copy") from None
        how = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + (0 if exclusive else wait_s)
        while _flock(self._fd, how) is False:
            if time.monotonic() >= deadline:
                who = ", ".join(map(str, holders(store))) or "another process"
                self.release()
                doing = "is in use by" if exclusive else "is being repaired by"
                raise StoreError(f"{store} {doing} {who}; try again when it has finished")
            time.sleep(0.1)

    def writer(self) -> str:
        """This process's writer token (its file made and locked on first use)."""
        if self.token is None:
            token = f"{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}"
            folder = self.store / WRITERS
            folder.mkdir(exist_ok=True)
            _sweep(folder)
            fd = os.open(folder / token, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                _flock(fd, fcntl.LOCK_EX)
                os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                         "started": time.time()}).encode())
            except OSError:  # a full disk: no half-made writer file left behind
                os.unlink(folder / token)
                os.close(fd)
                raise
            self._writer_fd, self.token = fd, token
        return self.token

    def release(self) -> None:
        if self._writer_fd is not None:
            try:
                os.unlink(self.store / WRITERS / str(self.token))
            except OSError:
                pass
            os.close(self._writer_fd)
            self._writer_fd = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _sweep(folder: Path, keep_s: float = 7 * 86400) -> None:
    """Remove writer files of this host no one holds, older than a week (their rows have long
    been judged; a newer one may still be named by a row another store copy reads)."""
    now = time.time()
    for path in folder.iterdir():
        try:
            if now - path.stat().st_mtime > keep_s and writer_held(folder.parent, path.name) is False:
                path.unlink()
        except OSError:
            continue


# ----------------------------------------------------------------- bisections


def stamp(lock: StoreLock, now: float) -> dict:
    """What a running bisection's params say of its writer (this process)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "token": lock.writer(), "at": now}


def touch(store: Path, token: str | None) -> None:
    """The writer's heartbeat for other hosts: its file's modification time, now."""
    if token and "/" not in token:
        try:
            os.utime(store / WRITERS / token)
        except OSError:
            pass  # the next beat tries again


def _last_beat(store: Path, token: object) -> float | None:
    if not isinstance(token, str) or not token or "/" in token:
        return None
    try:
        return (store / WRITERS / token).stat().st_mtime
    except OSError:
        return None


def judged(b: BisectionRecord, store: Path, here: str, now: float, pid_alive) -> BisectionRecord:
    """``b`` as it stands: a ``running`` one whose writer is gone becomes ``interrupted``, with
    since when (``interrupted``).  ``pid_alive(pid, started)``: is that process of this host
    the one that started then.  One recorded without a writer (an older dsbisect) is alive
    while any dsbisect holds the store."""
    if b.status is not BisectionStatus.RUNNING:
        return b
    w = b.params.extra.get(WRITER)
    if not isinstance(w, dict):
        live = bool(holders(store))
        return b if live else _stopped(b, "no dsbisect holds the store", b.updated)
    pid = w.get("pid") if isinstance(w.get("pid"), int) else None
    at = w.get("at") if isinstance(w.get("at"), (int, float)) else b.updated
    beat = max(_last_beat(store, w.get("token")) or 0.0, b.updated)
    state = judge(str(w.get("host")), here, beat, now, pid_alive(pid, at), writer_held(store, w.get("token")))
    if state is Liveness.ALIVE:
        return b
    who = f"its dsbisect (pid {pid} on {w.get('host')})"
    return _stopped(b, f"{who} sent no sign of life for {now - beat:.0f} s" if state is Liveness.EXPIRED
                    else f"{who} is gone", beat)


def _stopped(b: BisectionRecord, why: str, since: float) -> BisectionRecord:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return dataclasses.replace(b, status=BisectionStatus.INTERRUPTED, interrupted=f"{why}; last seen {when}")
