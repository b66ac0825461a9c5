"""proctree: a launch's process tree, its ranks and its teardown, on real processes (a shell
that starts two 'ranks' and a worker of one of them; a process that ignores SIGINT and SIGTERM)."""

from __future__ import annotations

import sys
import time

import psutil
from conftest import wait_until

from dsbisect.core.proc import is_live
from dsbisect.launch.proctree import rank_processes, stop_tree, teardown, track
from dsbisect.launch.guard import Guarded

# rank 0 and rank 1 (RANK in their environment), and a worker that rank 0 forks (it inherits RANK)
TREE = """
import os, subprocess, sys, time
code = "import os, sys, time\\nif os.environ['RANK'] == '0': os.fork()\\ntime.sleep(600)"
for r in (0, 1):
    subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, RANK=str(r)))
time.sleep(600)
"""
STUBBORN = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nsignal.signal(signal.SIGTERM, " \
           "signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)"


def _start(tmp_path, code: str) -> Guarded:
    with open(tmp_path / "log", "ab") as log:
        return Guarded.start((sys.executable, "-c", code), {"PATH": "/usr/bin:/bin"}, tmp_path, log)


def _tracked(proc: Guarded, want: int, seen: dict) -> None:
    deadline = time.monotonic() + 120  # a guard: the loop ends once the processes are seen
    while len(seen) < want and time.monotonic() < deadline:
        track(proc.pid, seen)
        time.sleep(0.1)


def test_the_ranks_are_the_top_processes_with_rank_and_the_teardown_stops_every_one(tmp_path):
    proc = _start(tmp_path, TREE)
    seen: dict[int, psutil.Process] = {}
    _tracked(proc, 4, seen)  # the launcher, two ranks, rank 0's worker
    assert len(seen) == 4, seen
    ranks = rank_processes(seen)
    assert [p.environ()["RANK"] for p in ranks] == ["0", "1"]  # not the worker, which has RANK=0 too
    survivors, escaped = teardown(proc, seen)
    assert survivors == () and escaped == ()
    assert not any(is_live(p) for p in seen.values())
    assert rank_processes(seen) == []


# a launcher that inherited RANK=2 from the shell dsbisect ran in (seen on a GPU host: the seed-2
# hang's signature read "rank 2 not in a collective ... (rank 2: runner.py:main)" for a 2-rank
# job), below it a second launcher process that inherited it too (DeepSpeed's runner -> launch.py)
NESTED = """
import os, subprocess, sys, time
code = "import os, sys, time\\nif os.environ['RANK'] == '0': os.fork()\\nopen('ready', 'a').write('r\\\\n')\\ntime.sleep(600)"
inner = "import os, subprocess, sys, time\\nfor r in (0, 1): subprocess.Popen([sys.executable, '-c', %r], env=dict(os.environ, RANK=str(r)))\\ntime.sleep(600)" % code
subprocess.Popen([sys.executable, "-c", inner])
time.sleep(600)
"""


def test_a_launcher_that_carries_rank_is_never_counted_as_a_rank(tmp_path):
    with open(tmp_path / "log", "ab") as log:
        proc = Guarded.start((sys.executable, "-c", NESTED), {"PATH": "/usr/bin:/bin", "RANK": "2"}, tmp_path, log)
    seen: dict[int, psutil.Process] = {}
    wait_until(lambda: (tmp_path / "ready").exists() and len((tmp_path / "ready").read_text().split()) >= 3, 120,
               "each rank and the worker to write a line once started")
    _tracked(proc, 5, seen)  # two launcher processes, two ranks, rank 0's worker
    try:
        assert len(seen) == 5, seen
        ranks = rank_processes(seen)
        assert [p.environ()["RANK"] for p in ranks] == ["0", "1"], [(p.pid, p.cmdline()) for p in ranks]
        assert proc.pid not in {p.pid for p in ranks}
    finally:
        assert teardown(proc, seen)[0] == ()


def test_stop_tree_ends_with_sigkill_what_ignores_int_and_term(tmp_path):
    proc = _start(tmp_path, STUBBORN)
    wait_until(lambda: b"ready" in (tmp_path / "log").read_bytes(), 120, "the stubborn process to be ready")
    seen: dict[int, psutil.Process] = {}
    assert stop_tree(proc.pid, seen, grace=(0.2, 0.2)) == ()
    assert not is_live(seen[proc.pid])
    assert proc.poll() == -9
    proc.close()
