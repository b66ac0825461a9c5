"""``launcher: direct``: dsbisect starts a case's ranks itself, with no launcher process.

Real venvs, real 2-rank gloo jobs of the toy package: the ranks get torchrun's variables
(``init_process_group()`` with env:// works), each its ``ranks/rank<R>.log``; the first rank to
fail is named and the other stopped at once, as torch elastic stops a failed group; a hang is
proven early with every rank's stack; 125 is a skip, a segfault is named, the import check is
made once (rank 0), and nothing is left behind.  The supervisor's own rules (its exit codes,
its line for the first failure, signals passed on) are tested on plain processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import toypkg
from conftest import cli_json, live_pids, offline, wait_until, write_matrix

from dsbisect.run import matrix
from dsbisect.launch.supervise import free_port
from dsbisect.launch.launchers import RANKS_SCRIPT, Target, instructions
from dsbisect.core.model import Accelerator
from dsbisect.core.rundir import RunDir
from dsbisect.verdict.outcome import classify, first_rank_exit

RELEASES = {"1.0.0": "ok", "1.1.0": "raise", "1.2.0": "skip", "1.3.0": "exit125", "1.4.0": "segv",
            "1.5.0": "import"}

ENV_SCRIPT = """\
import datetime, json, os, sys
import torch.distributed as dist
# env://, with a limit that only bounds a failure: rank 1 starts after rank 0's import check,
# and on a loaded machine it can be a minute late, importing torch
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "GROUP_RANK", "ROLE_RANK",
         "OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID")
print("ENV " + json.dumps({n: os.environ.get(n) for n in names} | {"rank": dist.get_rank(),
      "world": dist.get_world_size(), "argv": sys.argv[1:]}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("direct-ranks-wheels"), RELEASES, dist="dsb-ranks")


@pytest.mark.slow
def test_two_ranks_without_a_launcher_pass_fail_hang_skip_and_segfault(tmp_path, cli, house, cache_dir):
    # the wall timeout only bounds a failure: the proof, not the timeout, must end the hang
    write_matrix(tmp_path, list(RELEASES), package="dsb-ranks", collective_timeout=300, timeout=900,
                 launcher="direct")
    report, _ = cli_json(cli, "run", "matrix.yaml", *offline(house, cache_dir), cwd=tmp_path)
    runs = {r["point"].split()[-1]: r for r in report["runs"]}
    ok, bad, hang, skip, segv, imp = (runs[v] for v in RELEASES)

    assert ok["outcome"] == "pass", ok["reason"]
    folder = Path(ok["run_dir"])
    for rank in (0, 1):  # each rank's own log, its own line
        log = (folder / "ranks" / f"rank{rank}.log").read_text()
        assert f"rank {rank} of 2: dsb_toy 1.0.0" in log and "done" in log, log
    assert "2 ranks, started by dsbisect without a launcher" in (folder / "launcher.log").read_text()
    # The import check was made in the run, once: by rank 0 (the supervisor imports nothing).
    made = json.loads((folder / "import_check.json").read_text())
    assert made["versions"]["dsb-ranks"] == "1.0.0" and made["where"] == "run"
    rank0 = next(int(p.name[len("rank0.pid"):-len(".txt")]) for p in (folder / "stacks").glob("rank0.pid*.txt"))
    assert made["pid"] == rank0

    # Rank 0 raised: named first, and rank 1 (waiting in the barrier) was stopped, not left to time out
    # (a rank in gloo's 300 s timeout would have made the run a hang at the wall timeout, or gloo's).
    assert bad["outcome"] == "fail" and "ValueError: dsb_toy: the loss went NaN" in bad["reason"], bad["reason"]
    bad_log = (Path(bad["run_dir"]) / "launcher.log").read_text()
    assert "dsbisect: rank 0 exited with code 1" in bad_log and "Timed out" not in bad_log

    # Rank 1 skips the all_reduce rank 0 waits in: proven early, with both ranks' stacks.
    assert hang["outcome"] == "hang" and "rank 0 waits in ALLREDUCE" in hang["reason"], hang["reason"]
    assert hang["reason"].startswith("deadlock proven at "), hang["reason"]  # the proof, no timeout
    stacks = Path(hang["run_dir"]) / "stacks"  # py-spy's, of the ranks (not of what started them)
    rank0 = " ".join(p.read_text() for p in stacks.glob("pyspy.rank0.*.txt"))
    rank1 = " ".join(p.read_text() for p in stacks.glob("pyspy.rank1.*.txt"))
    assert "all_reduce" in rank0 and "toy_repro.py" in rank0, rank0
    assert "barrier" in rank1 and "toy_repro.py" in rank1, rank1
    assert "dsbisect_ranks" not in rank0 + rank1

    assert skip["outcome"] == "skip", skip["reason"]
    assert segv["outcome"] == "fail" and segv["reason"].startswith("rank 1 killed by SIGSEGV"), segv["reason"]
    assert imp["outcome"] == "skip" and imp["reason"].startswith("import check: import dsb_toy (dsb-ranks) failed")
    # rank 0 checked and exited 125 before rank 1 was started: no rank's own ImportError raced it
    assert not (Path(imp["run_dir"]) / "ranks" / "rank1.log").exists()
    assert "dsbisect: rank 0 exited with code 125" in (Path(imp["run_dir"]) / "launcher.log").read_text()

    for run in (ok, bad, hang, skip, segv):  # nothing of any run is left
        assert run["evidence"]["pids"] and not live_pids(run["evidence"]["pids"])


@pytest.mark.slow
def test_the_ranks_get_torchruns_variables_and_the_line_can_be_run_by_hand(tmp_path, cli, house, cache_dir):
    (tmp_path / "env.py").write_text(ENV_SCRIPT)
    (tmp_path / "matrix.yaml").write_text("""\
defaults: {accelerator: cpu, nproc: 2, launcher: direct, timeout: 600, collective_timeout: 30}
cases:
  env:
    script: env.py
    args: ["--steps", "3"]
    axes: {dsb-ranks: ["1.0.0"]}
""")
    report, _ = cli_json(cli, "run", "matrix.yaml", *offline(house, cache_dir), cwd=tmp_path)
    (run,) = report["runs"]
    assert run["outcome"] == "pass", run["reason"]
    for rank in (0, 1):
        line = next(ln for ln in (Path(run["run_dir"]) / "ranks" / f"rank{rank}.log").read_text().splitlines()
                    if ln.startswith("ENV "))
        got = json.loads(line[4:])
        assert got == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "GROUP_RANK": "0", "ROLE_RANK": str(rank), "OMP_NUM_THREADS": "1",
                       "TORCHELASTIC_RUN_ID": "none", "rank": rank, "world": 2, "argv": ["--steps", "3"]}, got
    # The instructions for a run by hand (bisect --manual's) are the line the runner ran: it passes again.
    case = matrix.load(tmp_path / "matrix.yaml").cases[0]
    env_key = json.loads((Path(run["run_dir"]) / "run.json").read_text())["env_key"]
    python = cache_dir / "envs" / env_key / "bin" / "python"
    target = Target(python, RunDir(tmp_path / "by-hand"), free_port(set()))
    line = next(ln.split("run", 1)[1].strip() for ln in
                instructions(case, case.points[0], python.parent.parent, Accelerator.CPU, target)
                if ln.strip().startswith("run "))
    assert "dsbisect_ranks.py 2" in line, line
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ENV " in (tmp_path / "by-hand" / "ranks" / "rank1.log").read_text()


def test_launcher_args_with_launcher_direct_are_one_line_and_exit_2(tmp_path, cli):
    write_matrix(tmp_path, ["1.0.0"], launcher="direct", extra="    launcher_args: [\"--max-restarts\", \"3\"]\n")
    res = cli("run", "matrix.yaml", cwd=tmp_path)
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert "launcher_args: launcher: direct starts the ranks itself and takes no launcher options" in line, line
    assert not (tmp_path / ".dsbisect").exists()


def test_the_first_failure_line_is_read_as_the_launchers():
    assert first_rank_exit("x\ndsbisect: rank 1 exited with code 3\n") == (1, 3)
    assert first_rank_exit("dsbisect: rank 0 killed by SIGSEGV\n") == (0, -11)
    assert first_rank_exit("print('dsbisect: rank 0 exited with code 3')\n") is None  # a line, not a quote
    c = classify(128 + 9, False, "", "", "dsbisect: rank 1 killed by SIGKILL\n")
    assert c.reason == "rank 1 killed by SIGKILL", c.reason
    c = classify(1, False, "", "", "dsbisect: rank 1 exited with code 125\n")
    assert c.outcome.value == "skip", c


def _ranks(tmp_path: Path, program: str, nproc: int = 2, **kw) -> subprocess.Popen:
    """The supervisor over ``python -c program`` (with ``-S``: as fast as it can start)."""
    (tmp_path / "ranks").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-I", "-S", str(RANKS_SCRIPT), str(nproc), str(tmp_path / "ranks"),
                             "--", sys.executable, "-S", "-c", program], stdout=subprocess.PIPE, text=True, **kw)


def test_the_supervisor_stops_the_others_when_one_fails_and_exits_with_its_code(tmp_path):
    # rank 1 fails once the others have said their line (each rank's log is in LOGS)
    prog = ("import os, sys, time\nr = int(os.environ['RANK'])\nprint('rank', r, os.environ.get('DSBISECT_CHECK_IMPORTS'),"
            " flush=True)\nlogs = [os.path.join(os.environ['LOGS'], f'rank{i}.log') for i in (0, 2)]\n"
            "if r == 1:\n    while not all(os.path.exists(p) and os.path.getsize(p) for p in logs):\n"
            "        time.sleep(0.02)\n    sys.exit(7)\ntime.sleep(600)\n")
    proc = _ranks(tmp_path, prog, nproc=3, env=dict(os.environ, DSBISECT_CHECK_IMPORTS="dsb-x",
                                                    LOGS=str(tmp_path / "ranks")))
    out, _ = proc.communicate(timeout=120)  # the sleepers (600 s) were stopped, not waited for
    assert proc.returncode == 7 and out == "dsbisect: rank 1 exited with code 7\n", (proc.returncode, out)
    logs = {r: (tmp_path / "ranks" / f"rank{r}.log").read_text() for r in range(3)}
    assert logs == {0: "rank 0 dsb-x\n", 1: "rank 1 None\n", 2: "rank 2 None\n"}  # the check: rank 0's alone


def test_the_supervisor_names_a_rank_killed_by_a_signal_and_exits_0_when_all_do(tmp_path):
    proc = _ranks(tmp_path, "import os, signal\nif os.environ['RANK'] == '0': os.kill(os.getpid(), signal.SIGSEGV)\n")
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (128 + signal.SIGSEGV, "dsbisect: rank 0 killed by SIGSEGV\n")
    proc = _ranks(tmp_path, "print('hi')\n", nproc=4)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "")
    assert all((tmp_path / "ranks" / f"rank{r}.log").read_text().endswith("hi\n") for r in range(4))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_supervisor_reaches_every_rank(tmp_path, sig):
    prog = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIG" + sig.name[3:] + ", lambda *a: (print('got it', flush=True), sys.exit(3)))\n"
            "open(os.path.join(sys.argv[1], 'up' + os.environ['RANK']), 'w').close()\ntime.sleep(60)\n")
    (tmp_path / "ranks").mkdir()
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(RANKS_SCRIPT), "2", str(tmp_path / "ranks"), "--",
                             sys.executable, "-S", "-c", prog, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    wait_until(lambda: (tmp_path / "up0").exists() and (tmp_path / "up1").exists(), 20, "both ranks up")
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig and out == "", (proc.returncode, out)
    assert all((tmp_path / "ranks" / f"rank{r}.log").read_text() == "got it\n" for r in (0, 1))


@pytest.mark.parametrize("error", ["", "import x (x) failed: ImportError: no"])
def test_the_other_ranks_start_once_rank_0s_import_check_is_in_and_never_after_a_failed_one(tmp_path, error):
    # rank 0 stands in for the hook: it writes the check (through a rename, as the hook does) after 1 s
    prog = ("import json, os, sys, time\nr = os.environ['RANK']\n"
            f"if r == '0':\n    time.sleep(1)\n    p = os.path.join(sys.argv[1], 'import_check.json')\n"
            f"    json.dump({{'error': {error!r}}}, open(p + '.tmp', 'w'))\n    os.replace(p + '.tmp', p)\n"
            f"    {'os._exit(125)' if error else 'time.sleep(0.5)'}\n"
            "print(r, os.path.exists(os.path.join(sys.argv[1], 'import_check.json')), flush=True)\n")
    (tmp_path / "ranks").mkdir()
    env = dict(os.environ, DSBISECT_CHECK_IMPORTS="x", DSBISECT_RUN_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-I", "-S", str(RANKS_SCRIPT), "3", str(tmp_path / "ranks"), "--",
                           sys.executable, "-S", "-c", prog, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=60)
    logs = sorted(p.name for p in (tmp_path / "ranks").iterdir())
    if error:
        assert (proc.returncode, proc.stdout, logs) == (125, "dsbisect: rank 0 exited with code 125\n", ["rank0.log"])
    else:
        assert proc.returncode == 0, proc.stdout
        assert [(tmp_path / "ranks" / f"rank{r}.log").read_text() for r in (1, 2)] == ["1 True\n", "2 True\n"]


@pytest.mark.slow
def test_a_rank_that_ignores_sigterm_after_another_failed_is_named_and_killed(tmp_path):
    """Rank 0 fails while rank 1 ignores SIGTERM (and would sleep for 120 s): the supervisor names
    it and kills it once its grace is over; the run ends with rank 0's code, nothing left."""
    prog = ("import os, signal, sys, time\nif os.environ['RANK'] == '1':\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "    open(os.path.join(sys.argv[1], 'ignoring'), 'w').close()\n"
            "    open(os.path.join(sys.argv[1], 'pid1'), 'w').write(str(os.getpid()))\n    time.sleep(120)\n"
            "while not os.path.exists(os.path.join(sys.argv[1], 'ignoring')):\n    time.sleep(0.02)\nsys.exit(4)\n")
    (tmp_path / "ranks").mkdir()
    proc = subprocess.run([sys.executable, "-I", "-S", str(RANKS_SCRIPT), "2", str(tmp_path / "ranks"), "--",
                           sys.executable, "-S", "-c", prog, str(tmp_path)], capture_output=True, text=True, timeout=110)
    assert (proc.returncode, proc.stdout) == (4, "dsbisect: rank 0 exited with code 4\n"
                                                 "dsbisect: rank 1 still running 5 s after SIGTERM: SIGKILL\n")
    assert first_rank_exit(proc.stdout) == (0, 4)  # the first line is still the failure's
    assert not live_pids([int((tmp_path / "pid1").read_text())])
