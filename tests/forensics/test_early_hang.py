"""The early deadlock verdict end to end: real ranks, the real start-up hook, gloo on CPU
(NCCL on 2 GPUs for the ``gpu`` variants).

- a deadlock (rank 1 skips an all_reduce) at a collective timeout of 300 s is a HANG proven
  by the rounds, long before the timeout, with a proof naming the ranks and their collectives
  (how long after the deadlock is printed here and measured by ``benchmarks/bench.py early``:
  no test asserts it, so that a loaded machine fails none);
- slow but progressing runs are never hangs: a rank computing before the collective the other
  waits in, rank 0 saving a checkpoint while the others wait in a barrier, ranks loading a
  model at different speeds, one large all_reduce on gloo;
- ``early_hang=False`` waits for the collective timeout, as before.

Durations are parameters (``SECS``, ``DSBISECT_TEST_BATTERY_S``): about 12 s here, 40–45 s in
the benchmark.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest
import toypkg
from conftest import live_pids, wait_until

from dsbisect.forensics.evidence import Capture
from dsbisect.launch.supervise import LaunchResult, LaunchSpec, free_port, launch
from dsbisect.core.model import Outcome
from dsbisect.verdict.outcome import classify
from dsbisect.core.rundir import RunDir, flight_recorder_env

pytestmark = pytest.mark.slow

HOOK = Path(__file__).parents[2] / "src" / "dsbisect" / "_hook" / "dsbisect_hook.py"
SECS = float(os.environ.get("DSBISECT_TEST_BATTERY_S", "12"))

# A launcher like deepspeed's: one process per rank; when a rank fails, the others are
# killed and its exit code is the job's; ranks that exit 0 are waited for.
LAUNCHER = """\
import os, subprocess, sys, time
n, script = int(sys.argv[1]), sys.argv[2]
procs = []
for r in range(n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n))
    procs.append(subprocess.Popen([sys.executable, "-u", script], env=env))
while procs:
    for p in list(procs):
        rc = p.poll()
        if rc is None:
            continue
        procs.remove(p)
        if rc != 0:
            for q in procs:
                q.kill()
            sys.exit(rc)
    time.sleep(0.2)
"""

PRELUDE = """\
import datetime, math, os, sys, time
import torch
import torch.distributed as dist

SECS = float(os.environ["SECS"])
NCCL = os.environ.get("BACKEND") == "nccl"
if NCCL:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
DEV = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if NCCL else torch.device("cpu")
dist.init_process_group("nccl" if NCCL else "gloo",
                        timeout=datetime.timedelta(seconds=float(os.environ["COLLECTIVE_TIMEOUT"])))
RANK, WORLD = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(1, device=DEV))  # every link is up before the scenario


def sync():
    if NCCL:
        torch.cuda.synchronize()


def finish():
    dist.barrier()
    sync()
    print(f"rank {RANK}: done", flush=True)
    dist.destroy_process_group()


print(f"rank {RANK} of {WORLD}: ready", flush=True)
"""

SCENARIOS = {
    # rank 1 skips the all_reduce that rank 0 waits in (the toy's "skip")
    "deadlock": """
if RANK == 0:
    print(f"DEADLOCK-AT {time.time()}", flush=True)
if RANK != 1:
    dist.all_reduce(torch.ones(4, device=DEV))
finish()
""",
    # each rank waits in a different process group: rank 0 in the world's, rank 1 in a subgroup's
    "crossed": """
sub = dist.new_group([0, 1])
dist.all_reduce(torch.ones(1, device=DEV), group=sub)  # the subgroup's links are up
if RANK == 0:
    print(f"DEADLOCK-AT {time.time()}", flush=True)
    dist.all_reduce(torch.ones(4, device=DEV))
else:
    dist.all_reduce(torch.ones(4, device=DEV), group=sub)
sync()
finish()
""",
    # NCCL only (gloo sees the peer's sockets close: an error, not a hang): rank 1 ends early,
    # cleanly, without the all_reduce that rank 0 then waits in
    "exit": """
if RANK == 1:
    print(f"DEADLOCK-AT {time.time()}", flush=True)
    sync()
    os._exit(0)
dist.all_reduce(torch.ones(4, device=DEV))
finish()
""",
    # rank 1 computes for SECS, silently, while rank 0 waits in the all_reduce
    "compute": """
if RANK == 1:
    a = torch.rand(256, 256, device=DEV)
    end = time.time() + SECS
    while time.time() < end:
        a = torch.nn.functional.normalize(a @ a, dim=1)
    sync()
t = torch.ones(4, device=DEV)
dist.all_reduce(t)
assert float(t[0]) == WORLD, t
finish()
""",
    # rank 0 writes a checkpoint for SECS/2, then waits on "the filesystem" (a still stack
    # outside any collective) for SECS/2, while the others wait in the barrier
    "checkpoint": """
if RANK == 0:
    end = time.time() + SECS / 2
    with open(os.environ["WORK"] + "/ckpt.bin", "wb") as f:
        while time.time() < end:
            f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
            time.sleep(0.1)
    time.sleep(SECS / 2)
finish()
""",
    # each rank loads "its shard" of a model, rank r for (r + 1) / WORLD of SECS; then the
    # weights are broadcast from rank 0 and all-reduced
    "loading": """
path = os.environ["WORK"] + f"/shard.{RANK}.pt"
torch.save(torch.randn(1 << 18), path)
end = time.time() + SECS * (RANK + 1) / WORLD
while time.time() < end:
    w = torch.load(path)
    time.sleep(0.05)
w = w.to(DEV)
dist.broadcast(w, src=0)
dist.all_reduce(w)
finish()
""",
    # gloo: one all_reduce sized to last about SECS (at most CAP fp16 elements), entered
    # rounds.after - 0.5 s after the last output, so that a round looks while it runs.
    # NCCL: large all_reduces back to back for SECS, silently (a fast link; progress only).
    "big": """
if NCCL:
    big = torch.ones(1 << 28, dtype=torch.float16, device=DEV)
    end = time.time() + SECS
    while time.time() < end:
        dist.all_reduce(big)
        sync()
else:
    probe = torch.ones(1 << 24, dtype=torch.float16)
    dist.barrier()
    t0 = time.time()
    dist.all_reduce(probe)
    rate = probe.numel() / max(time.time() - t0, 1e-3)
    n = torch.tensor([min(int(rate * SECS), int(os.environ["CAP"]))])
    dist.broadcast(n, src=0)
    del probe
    big = torch.ones(int(n), dtype=torch.float16)
    print(f"rank {RANK}: BIG {int(n)} elements", flush=True)
    time.sleep(float(os.environ["LEAD"]))
    t0 = time.time()
    dist.all_reduce(big)
    # capped by memory, one all_reduce can end before a look (4 s on an idle 2-core machine):
    # then more of the same, silently, for about SECS in all. Rank 0 says how many: a count each
    # rank took from its own clock could differ by one, and the last all_reduce of one rank would
    # meet the other's barrier (a real mismatch, which the early proof rightly called a deadlock)
    more = torch.tensor([max(0, math.ceil(SECS / max(time.time() - t0, 1e-3)) - 1)])
    dist.broadcast(more, src=0)
    for _ in range(int(more)):
        dist.all_reduce(big)
    print(f"rank {RANK}: BIG-TOOK {time.time() - t0:.1f}", flush=True)
finish()
""",
}


@pytest.fixture(scope="module")
def hook_path(tmp_path_factory) -> Path:
    """The start-up hook on PYTHONPATH, as a point venv's .pth would load it."""
    folder = tmp_path_factory.mktemp("hook")
    shutil.copy(HOOK, folder / "dsbisect_hook.py")
    (folder / "sitecustomize.py").write_text("import dsbisect_hook  # noqa: F401\n")
    return folder


def _launch(tmp_path: Path, hook_path: Path, scenario: str, *, secs: float = SECS, backend: str = "gloo",
            collective_timeout: float = 300, **spec_kw) -> tuple[LaunchResult, RunDir, Capture, float]:
    run = RunDir(tmp_path / "run")
    run.path.mkdir(parents=True)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    (tmp_path / "job.py").write_text(PRELUDE + SCENARIOS[scenario])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook_path), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               DSBISECT_RUN_DIR=str(run.path), SECS=str(secs), BACKEND=backend,
               COLLECTIVE_TIMEOUT=str(collective_timeout), WORK=str(tmp_path),
               CAP=os.environ.get("DSBISECT_TEST_BIG_CAP", str(1 << 30)), LEAD="3.5")
    env |= flight_recorder_env(run)
    if backend == "gloo":
        env["CUDA_VISIBLE_DEVICES"] = ""
    spec = LaunchSpec(argv=(sys.executable, str(tmp_path / "launcher.py"), "2", str(tmp_path / "job.py")),
                      env=env, cwd=tmp_path, run=run,
                      **({"wall_timeout": collective_timeout + secs + 120} | spec_kw))
    capture = Capture(run)
    t0 = time.monotonic()
    res = launch(spec, on_hang=capture, on_quiet=capture)
    return res, run, capture, time.monotonic() - t0


def _deadlock_at(run: RunDir) -> float:
    # not anchored: both ranks write to the one launcher log, and print()'s text and its newline
    # are two writes, so "rank 1 of 2: readyDEADLOCK-AT 1796103293.63" happens (CI, 2026-12-01)
    m = re.search(r"DEADLOCK-AT (\d+\.\d+)", run.launcher_log.read_text())
    assert m, run.launcher_log.read_text()[-3000:]
    return float(m.group(1))


def _rounds(run: RunDir) -> list[str]:
    return run.fr_rounds.read_text().splitlines() if run.fr_rounds.is_file() else []


# ------------------------------------------------------------------ the deadlock


def test_toy_deadlock_is_proven_a_hang_long_before_a_300_s_collective_timeout(tmp_path, cli, toy_deadlock):
    """Through the whole tool: matrix, point venv (with the hook), deepspeed launcher, classify, show
    (the run is the session's ``toy_deadlock``, which other tests read too)."""
    run, ended = toy_deadlock.run, toy_deadlock.ended
    run_dir = Path(run["run_dir"])
    latency = ended - toypkg.deadlock_time(run_dir)
    print(f"deadlock -> verdict: {latency:.1f} s; {run['reason']}")
    assert run["outcome"] == "hang"
    assert re.match(r"deadlock proven at \d+\.\d s: rank 0 waits in ALLREDUCE #\d+ \(4\), rank 1 in BARRIER #\d+ "
                    r"— different ops at #\d+$", run["reason"]), run["reason"]
    proof = json.loads((run_dir / "fr" / "proof.json").read_text())
    assert proof["rule"] == "op" and len(proof["snapshots"]) == 2
    assert proof["wall_time"] > toypkg.deadlock_time(run_dir)  # proven after the deadlock, by the rounds
    assert run["evidence"]["hang_detected_after_s"] == pytest.approx(proof["at"], abs=0.1)
    assert any("pyspy.rank0.deadlock" in f for f in run["evidence"]["files"])  # stacks before teardown
    assert not toy_deadlock.left and not live_pids(run["evidence"]["pids"])
    shown = cli("show", str(run["id"]), "--store", str(toy_deadlock.store), cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    assert "deadlock proof" in shown.output and "rank 1: BARRIER" in shown.output, shown.output


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_deadlock_through_launch(tmp_path, hook_path, backend):
    res, run, capture, seconds = _launch(tmp_path, hook_path, "deadlock", backend=backend)
    latency = time.time() - _deadlock_at(run)
    assert res.timed_out and res.exit_code is None and res.hang_line == "", res
    assert res.why.startswith("deadlock proven at "), res.why
    assert res.proof is not None and res.proof.text == res.why and res.proof.where in res.why
    c = classify(res.exit_code, res.timed_out, res.hang_line, res.why, run.tails()[0])
    assert c.outcome is Outcome.HANG and c.reason == res.why
    # gloo: rank 1 waits in BARRIER #N; NCCL may pair the barrier with the all_reduce and let
    # rank 1 go on (then it exits, or stays in destroy_process_group having passed #N)
    assert re.search(r": rank 0 waits in (ALLREDUCE|\w*BARRIER\w*) #\d+", res.why), res.why
    print(f"deadlock -> verdict: {latency:.1f} s")
    assert res.hang_after is not None and res.hang_after < seconds
    assert capture.taken[-1] == "deadlock"
    assert run.deadlock_proof.is_file() and any("proof:" in line for line in _rounds(run))
    assert res.survivors == ()


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_ranks_waiting_in_different_process_groups(tmp_path, hook_path, backend):
    res, run, _, _ = _launch(tmp_path, hook_path, "crossed", backend=backend)
    latency = time.time() - _deadlock_at(run)
    assert re.search(r"rank 0 waits in ALLREDUCE #\d+ \(4\), rank 1 in ALLREDUCE #2 \(4\) on pg \d+ "
                     r"— rank 1 waits in another process group$", res.why), res.why
    print(f"deadlock -> verdict: {latency:.1f} s")
    assert json.loads(run.deadlock_proof.read_text())["rule"] == "group"


@pytest.mark.gpu
def test_a_rank_that_exited_while_another_waits_for_it(tmp_path, hook_path):
    res, run, _, _ = _launch(tmp_path, hook_path, "exit", backend="nccl")
    latency = time.time() - _deadlock_at(run)
    assert re.search(r"rank 0 waits in ALLREDUCE #2 \(4\), rank 1 exited — rank 1 exited \d+ s ago$", res.why), res.why
    print(f"deadlock -> verdict: {latency:.1f} s")  # a rank counts as exited once gone for rounds.min_gone (5 s)
    assert json.loads(run.deadlock_proof.read_text())["rule"] == "exited"


def test_the_rank_table_times_how_long_a_rank_has_been_gone():
    """Ranks are told by RANK in their environment while they live; a rank's child is not a rank."""
    import subprocess

    from dsbisect.launch.rounds import RankTable

    sleeper = [sys.executable, "-c", ("import subprocess, sys, time; "
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)")]
    procs = [subprocess.Popen(sleeper, env=dict(os.environ, RANK=str(r))) for r in range(2)]
    table, seen = RankTable(), {}
    try:
        for p in procs:
            seen[p.pid] = psutil.Process(p.pid)
            # each rank's child started (an event: a fixed sleep was too short on a loaded machine)
            seen.update({c.pid: c for c in wait_until(seen[p.pid].children, 120, "a rank's child")})
        table.update(seen, time.monotonic())
        assert sorted(rank for rank, _ in table.procs.values()) == [0, 1]  # the children are not ranks
        assert table.gone_for(1, time.monotonic()) is None
        procs[1].kill()
        procs[1].wait()
        t = time.monotonic()
        table.update(seen, t)
        assert table.gone_for(1, t + 2.0) == pytest.approx(2.0) and table.gone_for(0, t) is None
        assert table.gone_for(5, t) is None  # never seen: unknown, not gone
    finally:
        for q in seen.values():
            try:
                q.kill()
            except psutil.Error:
                pass
        for p in procs:
            p.kill()
            p.wait()


def test_without_early_hang_the_collective_timeout_decides(tmp_path, hook_path):
    res, run, _, _ = _launch(tmp_path, hook_path, "deadlock", collective_timeout=8, early_hang=False)
    c = classify(res.exit_code, res.timed_out, res.hang_line, res.why, run.tails()[0])
    assert c.outcome is Outcome.HANG and "Timed out waiting 8000ms" in c.reason, (res, c)
    assert not res.why.startswith("deadlock")
    deadlock_after = _deadlock_at(run) - (time.time() - res.seconds)  # about: seconds from launch
    assert res.hang_after - deadlock_after > 7  # not before the collective timeout
    assert not run.fr_dir.exists()  # no request was ever made


# ------------------------------------------------------------------ no false hangs


def _assert_passed(res: LaunchResult, run: RunDir) -> list[str]:
    rounds = _rounds(run)
    log = run.launcher_log.read_text()
    assert res.exit_code == 0 and not res.timed_out and not res.hang_line, (res, rounds, log[-3000:])
    assert not run.deadlock_proof.exists()
    assert rounds and not any("proof:" in line for line in rounds), rounds
    assert len(re.findall(r"rank \d: done", log)) == 2
    looked = [r for r in rounds if "no proof;" in r]
    print(f"{len(looked)} round(s) of two looks, no proof, {res.seconds:.1f} s")
    return rounds


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_a_rank_computing_before_the_collective_is_no_hang(tmp_path, hook_path, backend, request):
    # gloo's run is the session's (conftest's compute_launch), which test_htmlreport reads too
    res, run = request.getfixturevalue("compute_launch") if backend == "gloo" else \
        _launch(tmp_path, hook_path, "compute", backend=backend)[:2]
    rounds = _assert_passed(res, run)
    assert any("rank 0: ALLREDUCE" in r and "rank 1:" in r and "outside any collective" in r for r in rounds), rounds


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_rank_0_saving_a_checkpoint_while_the_others_wait_in_a_barrier_is_no_hang(tmp_path, hook_path, backend):
    res, run, _, _ = _launch(tmp_path, hook_path, "checkpoint", backend=backend)
    rounds = _assert_passed(res, run)
    waiting = r"rank 0: no pending collective; main thread outside any collective \| rank 1: .* in a collective"
    assert any(re.search(waiting, r) for r in rounds), rounds


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_ranks_loading_a_model_at_different_speeds_is_no_hang(tmp_path, hook_path, backend):
    res, run, _, _ = _launch(tmp_path, hook_path, "loading", backend=backend)
    rounds = _assert_passed(res, run)
    if backend == "gloo":  # NCCL's broadcast is asynchronous: the rank need not be seen waiting in it
        assert any("rank 0: BROADCAST" in r and "outside any collective" in r for r in rounds), rounds


@pytest.mark.xdist_group("memory")  # GiBs of tensors: one worker with test_memory's small cgroups
@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.gpu)])
def test_one_large_all_reduce_is_no_hang(tmp_path, hook_path, backend):
    cap = int(os.environ.get("DSBISECT_TEST_BIG_CAP", str(1 << 30)))
    if backend == "gloo" and psutil.virtual_memory().available < 3 * 2 * 2 * cap:
        pytest.skip(f"needs about {3 * 2 * 2 * cap >> 30} GiB of free memory for two ranks' tensors")
    res, run, _, _ = _launch(tmp_path, hook_path, "big", backend=backend)
    rounds = _assert_passed(res, run)
    if backend == "gloo":
        # the number only: another rank's text can follow on the line (see _deadlock_at)
        took = [float(x) for x in re.findall(r"BIG-TOOK (\d+(?:\.\d+)?)", run.launcher_log.read_text())]
        numel = re.search(r"BIG (\d+) elements", run.launcher_log.read_text()).group(1)
        print(f"all_reduces of {numel} fp16 elements took {max(took):.1f} s")
        both_in = rf"ALLREDUCE #\d+ \({numel}\) \[scheduled\]; main thread in a collective"
        inside = [r for r in rounds if len(re.findall(both_in, r)) == 2]
        assert inside, (took, rounds)  # a round looked at both ranks inside it, and did not call it a hang
