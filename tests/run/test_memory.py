"""dsbisect's own parallelism and memory (issue 20): fewer points at once when memory is short,
and an out-of-memory kill is an untestable run, tried again alone.

Pure: the slot arithmetic, the texts, the OOM verdict, the gate, and the readers over a /proc
and cgroup tree written to a folder.  Real: dsbisect in a memory cgroup made for the test (root
and a cgroup v1 memory hierarchy or a v2 one with the memory controller; skipped with the
reason where none can be made), 1-rank toy points that hold a given amount of memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toypkg
from conftest import offline, write_matrix
from dsbisect.run import memory
from dsbisect.run.memory import OomCount, OomKill, Room
from dsbisect.records.run import Evidence
from dsbisect.core.model import Outcome
from dsbisect.verdict.outcome import Classified

GiB, MiB = 1 << 30, 1 << 20


# ------------------------------------------------------------------ pure


@pytest.mark.parametrize("wanted, free, per_point, n", [
    (2, int(1.4e9), int(0.9e9), 1),   # the case: two at once in 1.4 GB would not fit
    (2, int(1.9e9), int(0.9e9), 2),
    (8, 10 * GiB, 3 * GiB, 3),
    (4, 100 * GiB, GiB, 4),           # memory is not what limits: the cores are
    (3, 100 * MiB, GiB, 1),           # not even one fits: one runs anyway (its run says why)
    (1, 0, GiB, 1),
])
def test_points_at_once(wanted, free, per_point, n):
    assert memory.points_at_once(wanted, Room(free, free, "cgroup v2 memory.max"), per_point) == n


def test_no_reading_leaves_the_count_alone():
    assert memory.points_at_once(4, None, GiB) == 4


def test_a_points_memory_is_its_recorded_peak_with_a_margin_else_a_guess_per_rank():
    assert memory.expected(2, [int(0.9e9), int(0.7e9)]) == int(0.9e9 * memory.MARGIN)
    assert memory.expected(2, []) == 2 * memory.RANK_GUESS + memory.LAUNCHER_GUESS
    assert memory.expected(1, [0]) == memory.RANK_GUESS  # a direct run has no launcher
    assert memory.expected(8, []) > memory.expected(2, [])


def test_the_progress_line_says_the_figures():
    room = Room(int(1.4e9), int(1.4e9), "cgroup v2 memory.max")
    assert memory.describe(room, int(0.9e9), True) == "memory: 1.4 GB free of 1.4 GB limit, ~0.9 GB per point"
    said = memory.describe(Room(int(20e9), int(25e9), "MemAvailable"), int(2.7e9), False)
    assert said == "memory: 20.0 GB free of 25.0 GB RAM, ~2.7 GB per point, a guess"


def test_a_counter_that_rose_is_the_evidence_cgroup_first():
    before = (OomCount("cgroup memory.events", 0), OomCount("/proc/vmstat", 7))
    assert memory.rise(before, before) is None
    after = (OomCount("cgroup memory.events", 1), OomCount("/proc/vmstat", 8))
    assert memory.rise(before, after) == OomKill("cgroup memory.events", 0, 1)
    assert memory.rise(before, (OomCount("cgroup memory.events", 0), OomCount("/proc/vmstat", 9))) == \
        OomKill("/proc/vmstat", 7, 9)
    assert memory.rise((), after) is None  # nothing read before: no evidence


KILL = OomKill("cgroup memory.events", 0, 1)
FAILED = Classified(Outcome.FAIL, "a rank killed by SIGKILL")
DS9 = "[ERROR] [launch.py:259:sigkill_handler] [...] exits with return code = -9"


@pytest.mark.parametrize("c, code, timed_out, tail, kill, others, retried, outcome, says", [
    (FAILED, 1, False, DS9, KILL, 1, False, Outcome.SKIP, "(cgroup memory.events oom_kill 0→1) while 1 other "
                                                          "point ran; it runs again alone"),
    (Classified(Outcome.FAIL, "exit -9 (signal SIGKILL)"), -9, False, "", KILL, 2, False, Outcome.SKIP,
     "while 2 other points ran"),
    (FAILED, 1, False, DS9, KILL, 0, True, Outcome.SKIP, "also when run alone: the point needs more memory"),
    (FAILED, 1, False, DS9, KILL, 0, False, Outcome.SKIP, "with no other point running"),
    (Classified(Outcome.FAIL, "RuntimeError: [pair.cc:553] Connection closed by peer"), 1, False, "", KILL, 1, False,
     Outcome.SKIP, "killed by the out-of-memory killer"),  # the killed rank left no word; its peer reacted
    (FAILED, 1, False, DS9, None, 1, False, Outcome.FAIL, "SIGKILL"),  # no counter rose: an ordinary kill
    # a rank that died of its child killed by SIGKILL (issue 36: a DataLoader worker, a subprocess)
    (Classified(Outcome.FAIL, "RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed."), 1, False, "",
     KILL, 0, False, Outcome.SKIP, "with no other point running"),
    (Classified(Outcome.FAIL, "CalledProcessError: Command '['x']' died with <Signals.SIGKILL: 9>."), 1, False, "",
     KILL, 1, False, Outcome.SKIP, "killed by the out-of-memory killer"),
    (Classified(Outcome.FAIL, "RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed."), 1, False, "",
     None, 0, False, Outcome.FAIL, "DataLoader worker"),  # no counter rose: the job's failure
    (Classified(Outcome.FAIL, "ValueError: nan"), 1, False, "", KILL, 1, False, Outcome.FAIL, "ValueError"),
    (Classified(Outcome.HANG, "wall timeout"), None, True, "", KILL, 1, False, Outcome.HANG, "wall"),  # dsbisect's kill
    (Classified(Outcome.PASS, ""), 0, False, "", KILL, 1, False, Outcome.PASS, ""),  # someone else was killed
])
def test_an_oom_kill_is_untestable_not_a_failure(c, code, timed_out, tail, kill, others, retried, outcome, says):
    room = Room(int(1.4e9), int(1.4e9), "cgroup v2 memory.max") if not others else None
    got, evidence = memory.oom_verdict(c, code, timed_out, tail, kill, others, retried, room)
    assert got.outcome is outcome and says in got.reason, got
    assert bool(evidence) == (outcome is Outcome.SKIP)


def test_the_reason_of_a_point_too_big_to_run_names_the_room():
    reason = memory.oom_reason(KILL, 0, True, Room(int(1.4e9), int(1.4e9), "cgroup v1 memory.limit_in_bytes"))
    assert reason.endswith("also when run alone: the point needs more memory than dsbisect has here "
                           "(1.4 GB free of 1.4 GB limit)"), reason


def _tree(root: Path, cgroup: str, mountinfo: str, files: dict[str, str], meminfo_kb: int = 8 << 20) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo.replace("ROOT", str(root)))
    (proc / "meminfo").write_text(f"MemTotal: {meminfo_kb * 2} kB\nMemAvailable: {meminfo_kb} kB\n")
    (proc / "vmstat").write_text("pgfault 10\noom_kill 3\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return proc


def test_the_readers_take_the_tightest_limit_of_a_v2_cgroup_and_its_ancestors(tmp_path):
    proc = _tree(tmp_path, "0::/job/step\n",
                 "30 1 0:26 / ROOT/cg rw,nosuid - cgroup2 cgroup2 rw\n",
                 {"cg/job/memory.max": str(3 * GiB), "cg/job/memory.current": str(GiB),
                  "cg/job/memory.stat": "anon 1\ninactive_file 0\n",
                  "cg/job/step/memory.max": "max", "cg/job/step/memory.current": str(GiB),
                  "cg/job/step/memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
                  "cg/job/step/memory.stat": "inactive_file 0\n"})
    room = memory.room(proc)
    assert room == Room(2 * GiB, 3 * GiB, "cgroup v2 memory.max")  # the job's limit, not the step's "max"
    assert memory.oom_counts(proc) == (OomCount("cgroup memory.events", 1), OomCount("/proc/vmstat", 3))


def test_the_readers_know_a_v1_memory_cgroup_and_its_page_cache(tmp_path):
    proc = _tree(tmp_path, "5:cpu:/\n4:memory:/slurm/job_7\n0::/\n",
                 "31 1 0:27 / ROOT/mem rw - cgroup cgroup rw,memory\n",
                 {"mem/slurm/job_7/memory.limit_in_bytes": str(int(1.4e9)),
                  "mem/slurm/job_7/memory.usage_in_bytes": str(int(0.9e9)),
                  "mem/slurm/job_7/memory.stat": f"cache 1\ntotal_inactive_file {int(0.5e9)}\n",
                  "mem/slurm/job_7/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
                  "mem/slurm/memory.limit_in_bytes": str(memory.UNLIMITED),
                  "mem/slurm/memory.usage_in_bytes": "5"})
    assert memory.room(proc) == Room(int(1.0e9), int(1.4e9), "cgroup v1 memory.limit_in_bytes")
    assert memory.oom_counts(proc)[0] == OomCount("cgroup memory.oom_control", 2)


def test_without_cgroups_memavailable_is_the_room(tmp_path):
    proc = _tree(tmp_path, "0::/\n", "", {}, meminfo_kb=1 << 20)
    assert memory.room(proc) == Room(GiB, 2 * GiB, "MemAvailable")
    assert memory.oom_counts(proc) == (OomCount("/proc/vmstat", 3),)
    assert memory.room(tmp_path / "nowhere") is None


def test_a_run_alone_waits_for_the_others_and_none_starts_beside_it():
    from dsbisect.run.memory import PointGate

    gate, log, lock = PointGate(), [], threading.Lock()

    def run(name: str, alone: bool, hold: float, start_after: float = 0.0) -> None:
        time.sleep(start_after)
        with gate.enter(alone) as token:
            with lock:
                log.append(("in", name, len(gate.active)))
            time.sleep(hold)
            with lock:
                log.append(("out", name, token.others))

    threads = [threading.Thread(target=run, args=a) for a in
               (("a", False, 0.6), ("b", False, 0.6), ("alone", True, 0.4, 0.2), ("c", False, 0.1, 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    order = [(what, name) for what, name, _ in log]
    i_in, i_out = order.index(("in", "alone")), order.index(("out", "alone"))
    assert order.index(("out", "a")) < i_in and order.index(("out", "b")) < i_in  # it waited for both
    assert i_out == i_in + 1  # nothing started or ended while it ran
    assert order.index(("in", "c")) > i_out  # c, which came while it waited, went after it
    assert dict(((n, o) for w, n, o in log if w == "out"))["a"] == 1  # a ran beside b


def test_the_cases_recorded_peak_bounds_how_many_points_run_at_once(tmp_path):
    """The runner's slot count over a real store: a guess first, then the peak a run recorded."""
    from conftest import make_case
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.core.model import Point
    from dsbisect.run.executor import Slot
    from dsbisect.run.runner import Runner
    from dsbisect.store.store import Store

    case = make_case(tmp_path, nproc=1)
    store = Store(tmp_path / "st")
    runner = Runner(store=store, envs=EnvManager(tmp_path / "cache"), jobs=4)
    guess = memory.points_at_once(4, memory.room(), memory.expected(1, []))
    assert len(runner.slots(case)) == guess
    n, said = runner.executor.memory_plan(case)
    assert n == guess and said.startswith("memory: ") and said.endswith("GB per point, a guess")
    run = store.start_run(case.name, case.key, Point((("dsb-toy", "1.0.0"),)), None, 1)
    store.finish_run(run, Outcome.PASS, 0, 1.0, evidence=Evidence.of(peak_rss=1 << 50))  # a point of a petabyte
    assert store.peak_rss(case.name) == [1 << 50]
    assert runner.slots(case) == [Slot()]
    assert runner.executor.memory_plan(case)[1].endswith(f"~{(1 << 50) * memory.MARGIN / memory.GB:.1f} GB per point")
    one = Runner(store=store, envs=runner.envs, jobs=1)
    assert one.executor.memory_plan(case) == (1, "")  # one at a time anyway: nothing to say


# ------------------------------------------------------------------ real cgroup

HOG = """
def step(dist):
    import os, time
    block = bytearray(int(os.environ.get("DSB_TOY_MB", "0")) << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    print(f"holding {len(block) >> 20} MB", flush=True)
    time.sleep(float(os.environ.get("DSB_TOY_HOLD", "5")))
    dist.barrier()
"""


def _v1_parent() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        tail = right.split()
        if len(tail) >= 3 and tail[0] == "cgroup" and "memory" in tail[2].split(","):
            return Path(left.split()[4])
    return None


def _v2_parent() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            root = Path(left.split()[4])
            if "memory" in (root / "cgroup.controllers").read_text().split():
                return root
    return None


@contextlib.contextmanager
def memory_cgroup(limit: int):
    """A memory cgroup of its own with ``limit`` bytes (v2 under the mount's root, else v1);
    skips the test with the reason where none can be made.  Removed afterwards, whatever ran."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    made = None
    for parent, v2 in ((_v2_parent(), True), (_v1_parent(), False)):
        if parent is None:
            continue
        path = parent / f"dsbisect-test-{os.getpid()}-{time.monotonic_ns()}"
        try:
            if v2 and "memory" not in (parent / "cgroup.subtree_control").read_text().split():
                (parent / "cgroup.subtree_control").write_text("+memory")
            path.mkdir()
            (path / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit))
            made = (path, parent)
            break
        except OSError as e:
            reason = f"{path}: {e}"
            with contextlib.suppress(OSError):
                path.rmdir()
    if made is None:
        pytest.skip(f"no memory cgroup can be made here ({locals().get('reason', 'no cgroup memory controller')})")
    path, parent = made
    try:
        yield path
    finally:
        _remove(path, parent)


def _remove(path: Path, parent: Path) -> None:
    deadline = time.monotonic() + 20
    while path.exists():
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), 9)
        try:
            path.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _dsbisect(folder: Path, cgroup: Path, house: Path, cache_dir: Path, mb: int, *extra: str):
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", "--jobs", "2", *extra]
    inner = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"'
    out = subprocess.run(["/bin/sh", "-c", inner, "sh", *cmd], cwd=folder, capture_output=True, text=True,
                         timeout=400, env=dict(os.environ, DSB_TOY_MB=str(mb), DSB_TOY_HOLD="5"))
    assert out.returncode == 0, out.stderr[-3000:]
    print("\n".join(ln for ln in out.stderr.splitlines() if "memory" in ln or "at once" in ln or "at a time" in ln))
    return json.loads(out.stdout)["runs"], out.stderr


@pytest.fixture(scope="module")
def hog_house(tmp_path_factory):
    toypkg.STEP["hog"] = HOG
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("hog-wheels"), {"1.0.0": "hog", "1.1.0": "hog"},
                                   dist="dsb-hog")


LIMIT = 1200 * MiB


def _seeded(tmp_path: Path, cgroup: Path, house: Path, cache_dir: Path) -> str:
    """Two points that hold nothing, run first: with no record, the guess fits one at a time."""
    write_matrix(tmp_path, ["1.0.0", "1.1.0"], package="dsb-hog", nproc=1, timeout=120)
    runs, err = _dsbisect(tmp_path, cgroup, house, cache_dir, 0)
    assert [r["outcome"] for r in runs] == ["pass", "pass"], runs
    assert all(r["evidence"]["peak_rss"] > 50 * MiB for r in runs), [r["evidence"] for r in runs]
    return err


@pytest.mark.slow
@pytest.mark.xdist_group("memory")  # small cgroups: one worker with the GiB all_reduce
def test_in_a_small_cgroup_points_run_one_at_a_time_and_an_oom_kill_runs_again_alone(
        tmp_path, cache_dir, hog_house):
    with memory_cgroup(LIMIT) as cgroup:
        err = _seeded(tmp_path, cgroup, hog_house, cache_dir)
        assert "toy: 1 point at a time (CPU; memory: " in err and "GB limit, ~1.1 GB per point, a guess)" in err, err
        # Now the points hold 700 MB each: the records (~0.25 GB a point) let two run at once, and
        # together they do not fit: one is killed, recorded as untestable, and runs again alone.
        runs, err = _dsbisect(tmp_path, cgroup, hog_house, cache_dir, 700, "--rerun")
        assert "toy: 2 points at once (CPU; memory: " in err, err
    assert sorted(r["outcome"] for r in runs) == ["pass", "pass"], [(r["outcome"], r["reason"]) for r in runs]
    assert "was killed by the out-of-memory killer while other points ran; waiting for them to run it alone" in err
    from dsbisect.store.store import Store

    killed = [r for r in Store(tmp_path / ".dsbisect").runs() if r.outcome is Outcome.SKIP]
    assert killed, "no run was OOM-killed: the test did not test anything"
    for r in killed:
        assert r.reason.startswith("killed by the out-of-memory killer (cgroup memory.") and \
            "while 1 other point ran; it runs again alone" in r.reason, r.reason
        assert r.evidence.oom["after"] > r.evidence.oom["before"], r.evidence


@pytest.mark.slow
@pytest.mark.xdist_group("memory")  # small cgroups: one worker with the GiB all_reduce
def test_a_point_killed_alone_too_stays_untestable_and_says_so(tmp_path, cache_dir, hog_house):
    with memory_cgroup(LIMIT) as cgroup:
        _seeded(tmp_path, cgroup, hog_house, cache_dir)
        runs, err = _dsbisect(tmp_path, cgroup, hog_house, cache_dir, 1400, "--rerun")
    assert [r["outcome"] for r in runs] == ["skip", "skip"], [(r["outcome"], r["reason"]) for r in runs]
    for r in runs:
        assert "killed by the out-of-memory killer (cgroup memory." in r["reason"], r["reason"]
        assert "also when run alone: the point needs more memory than dsbisect has here" in r["reason"] or \
            "with no other point running" in r["reason"], r["reason"]
    assert any("also when run alone" in r["reason"] for r in runs), [r["reason"] for r in runs]
