"""dsbisect's guard: the parent of one run's launcher and the keeper of its whole process tree.

Standard library only; dsbisect starts it as ``python -I -S dsbisect_guard.py REPORT_FD`` in a
session of its own (``dsbisect.guard`` is the other end).  It is a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+, no privilege needed): a process of the run
whose parent dies — a rank's ``os.fork`` or ``multiprocessing`` child, a ``sleep`` it started, a
daemon that double-forked into a session of its own — is re-parented to the guard instead of
to init, so the whole tree stays below it, whatever it does.

- stdin: one JSON line ``{"argv": [...], "env": {...}, "cwd": "..."}``, the launcher to start
  (in a new session, stdin /dev/null, output to the guard's own stdout and stderr).  After it
  dsbisect writes nothing and keeps the pipe open; end of file means that dsbisect closed it
  (the run's teardown is over) or that dsbisect died, even of SIGKILL (the kernel closes a
  dead process's pipes).  Either way every process below the guard is killed (SIGKILL, again
  and again until none is left), reaped, and the guard exits.
- REPORT_FD: lines for dsbisect: ``started PID``, or ``error ERRNO TEXT`` when the launcher
  could not start; ``exit CODE`` when it ended (negative: killed by that signal, as Popen's
  returncode); at the end ``stopped PID,PID...`` (what it killed) and ``left PID,...`` (what
  it could not kill within 10 s, e.g. in uninterruptible sleep).
- SIGINT, SIGTERM and SIGHUP do nothing to it (dsbisect runs the graceful part of the
  teardown itself); being a Python handler, not SIG_IGN, that is not inherited by the launcher.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_FOR_S = 10.0


def _subreaper():
    """Become the child subreaper of everything below (False where the kernel has none)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no prctl: orphans go to init, the tag still finds them
        return False


def _descendants(root):
    """The pids below ``root``, read from /proc (zombies included: killing one is harmless)."""
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _reap(launcher, say):
    """Reap every child that ended; say when the launcher did."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False  # no child at all
        if pid == 0:
            return True
        if pid == launcher:
            say(f"exit {os.waitstatus_to_exitcode(status)}")


def _kill_all(launcher, say):
    stopped, deadline = set(), time.monotonic() + KILL_FOR_S
    while time.monotonic() < deadline:
        below = _descendants(os.getpid())
        for pid in below:
            alive = _alive(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            if alive:
                stopped.add(pid)
        if not _reap(launcher, say) and not below:
            break
        time.sleep(0.02)
    left = [p for p in _descendants(os.getpid()) if _alive(p)]
    say("stopped " + ",".join(str(p) for p in sorted(stopped)))
    say("left " + ",".join(str(p) for p in sorted(left)))


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _start(request, say):
    try:
        child = subprocess.Popen(request["argv"], env=request["env"], cwd=request["cwd"],
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        say(f"error {e.errno or 0} {e.strerror or e}")
        return None
    say(f"started {child.pid}")
    return child.pid


def main():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: None)
    report = os.fdopen(int(sys.argv[1]), "w", buffering=1)

    def say(line):
        try:
            report.write(line + "\n")
        except OSError:
            pass  # dsbisect is gone: nobody reads, the tree is killed all the same

    if not _subreaper():
        say("note no subreaper")
    line = sys.stdin.buffer.readline()
    launcher = _start(json.loads(line), say) if line.strip() else None
    while launcher is not None:
        ready, _, _ = select.select([0], [], [], 0.1)
        if ready and not os.read(0, 4096):
            break  # dsbisect closed the pipe or died
        _reap(launcher, say)
    _kill_all(launcher, say)
    os._exit(0)  # nothing left to flush: every line was written as it was said


if __name__ == "__main__":
    main()
