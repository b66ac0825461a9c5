"""dsbisect's own launcher for ``launcher: direct``: the N ranks of one script on this machine,
started as torchrun starts them (its static rendezvous: env://), without a launcher process
that imports torch.

Standard library only; the runner starts it with the point venv's python as
``PYTHON -I -S dsbisect_ranks.py NPROC RANKS_DIR -- PYTHON -u SCRIPT ARGS...`` (``-S``: no
site, so neither the venv's packages nor dsbisect's start-up hook are loaded here; the ranks
load both).

- Rank R gets this process's environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE and the rest
  from dsbisect) with ``RANK``, ``LOCAL_RANK`` and ``ROLE_RANK`` set to R, and
  ``OMP_NUM_THREADS=1`` unless it is set, as torchrun gives more than one rank.  Its stdout and
  stderr are appended to ``RANKS_DIR/rank<R>.log``.
- The point's import check (``DSBISECT_CHECK_IMPORTS``, ``DSBISECT_CHECK_BYTECODE``) is made by
  rank 0 alone: the others get neither variable, and start once rank 0 has written
  ``import_check.json`` into ``DSBISECT_RUN_DIR`` (or has ended, or after CHECK_WAIT_S), as
  under torchrun, whose own interpreter checks before any rank starts: a package that cannot
  be imported is the check's skip, never a rank's ImportError first.
- The first rank to end with a non-zero exit code or a signal is written to stdout, the
  launcher's log: ``dsbisect: rank R exited with code C`` or ``dsbisect: rank R killed by SIGNAME``
  (``outcome.first_rank_exit`` reads it); the other ranks then get SIGTERM and, 5 s later,
  SIGKILL, as torch elastic stops a failed group; this process exits with that rank's code
  (a signal N: 128 + N).  When every rank exits 0, it exits 0.
- SIGINT, SIGTERM and SIGHUP are passed on to every rank; once they have ended (SIGKILL after
  5 s) it exits 128 + N.
- A rank still running when its 5 s are over is named before it is killed:
  ``dsbisect: rank R still running 5 s after SIGTERM: SIGKILL``; a rank that had ended by
  then is reaped first, never named (this process may look late on a loaded machine).
"""

import os
import signal
import sys
import time

GRACE_S = 5.0
CHECK_WAIT_S = 300.0
_CHECK = ("DSBISECT_CHECK_IMPORTS", "DSBISECT_CHECK_BYTECODE")


def _start(ranks, ranks_dir, argv, children):
    for rank in ranks:
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), ROLE_RANK=str(rank))
        env.setdefault("OMP_NUM_THREADS", "1")
        if rank:
            for name in _CHECK:
                env.pop(name, None)
        fd = os.open(os.path.join(ranks_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            pid = os.fork()
            if pid == 0:  # the rank: its log as stdout and stderr, then the script
                try:
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.close(fd)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                        signal.signal(sig, signal.SIG_DFL)
                    os.execvpe(argv[0], argv, env)
                except BaseException as e:  # noqa: BLE001 - a child must never return into the loop
                    os.write(2, f"dsbisect: cannot start rank {rank}: {e}\n".encode())
                finally:
                    os._exit(127)
        finally:
            os.close(fd)
        children[pid] = rank


def _checked(children, asked):
    """Wait for rank 0's import check (the only rank, in ``children``); None when it passed (or
    took too long), else rank 0's wait status: it ended first, or the check failed (rank 0 then
    exits 125 by itself, and is waited for)."""
    path = os.path.join(os.environ.get("DSBISECT_RUN_DIR", ""), "import_check.json")
    (pid,) = children
    deadline = time.monotonic() + CHECK_WAIT_S
    while time.monotonic() < deadline and not asked:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            return status
        if os.path.exists(path) and not _failed(path):
            return None
        time.sleep(0.02)
    return None


def _failed(path):
    """Whether the import check written at ``path`` (whole: it is renamed into place) failed."""
    import json

    try:
        with open(path) as f:
            return bool(json.load(f).get("error"))
    except (OSError, ValueError, AttributeError):
        return False


def _code(status):
    """(exit code for this process, what the line says) of a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return 128 + sig, f"killed by {name}"
    code = os.WEXITSTATUS(status)
    return code, f"exited with code {code}"


def _say(rank, said):
    """The first failure's line, in the launcher's log (what ``outcome.first_rank_exit`` reads)."""
    sys.stdout.write(f"dsbisect: rank {rank} {said}\n")
    sys.stdout.flush()


def _kill_all(children, sent):
    """SIGKILL to the ranks still running ``GRACE_S`` after ``sent``, each named first."""
    for rank in sorted(children.values()):
        _say(rank, f"still running {GRACE_S:g} s after {signal.Signals(sent).name}: SIGKILL")
    _signal_all(children, signal.SIGKILL)


def _signal_all(children, sig):
    for pid in children:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def main(args):
    if len(args) < 4 or args[2] != "--" or not args[0].isdigit() or int(args[0]) < 1:
        sys.stderr.write("usage: dsbisect_ranks.py NPROC RANKS_DIR -- PROGRAM [ARGS...]\n")
        return 2
    nproc, ranks_dir, argv = int(args[0]), args[1], args[3:]
    asked = []  # the signal this process got, if any
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda num, _frame: asked.append(num))
    children = {}
    checks = os.environ.get("DSBISECT_CHECK_IMPORTS") not in (None, "", "0") and os.environ.get("DSBISECT_RUN_DIR")
    if checks and nproc > 1:
        _start([0], ranks_dir, argv, children)
        status = _checked(children, asked)
        if status is not None:  # rank 0 ended before its check was in: the run is over
            ended, said = _code(status)
            if ended:
                _say(0, said)
            return 128 + asked[0] if asked else ended
        if not asked:  # (a signal while rank 0 checked: it is passed on below, and no rank more starts)
            _start(range(1, nproc), ranks_dir, argv, children)
    else:
        _start(range(nproc), ranks_dir, argv, children)
    code, stop_at, passed_on, sent = 0, None, False, signal.SIGTERM
    while children:
        if asked and not passed_on:
            _signal_all(children, asked[0])
            passed_on, stop_at, sent = True, time.monotonic() + GRACE_S, asked[0]
        late = stop_at is not None and time.monotonic() > stop_at  # looked at before the reaping
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:  # every rank that ended is reaped: those left were still running when late
            if late:
                _kill_all(children, sent)
                stop_at = float("inf")
            time.sleep(0.05)
            continue
        rank = children.pop(pid, None)
        if rank is None:
            continue
        ended, said = _code(status)
        if ended and not code and not asked:  # the first failure: the others are stopped
            code = ended
            _say(rank, said)
            _signal_all(children, signal.SIGTERM)
            stop_at = time.monotonic() + GRACE_S
    if asked:
        return 128 + asked[0]
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
