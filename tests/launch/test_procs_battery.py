"""Processes and memory, tried as a hostile rank and a big input would (issue 20, second battery).

- kill -9 of a real ``dsbisect run`` whose rank started a ``sleep``, an ``os.fork`` child, a
  ``multiprocessing`` fork child and a double-forked, setsid, signal-ignoring daemon: every
  one is gone (the run's guard, a child subreaper, kills its whole tree; nothing else would).
- SIGTERM to ``dsbisect run`` while its rank has 50 such daemons: all gone, exit 143, the run
  recorded interrupted. How soon (within 5 s on a quiet machine) is printed, not asserted:
  the tests wait for the processes to be gone for up to ``GONE_S``, so a loaded machine fails
  none, and a daemon that nothing kills still fails them.
- A 1.5 GB (sparse) file named on the command line is digested with bounded memory; a package
  that prints hundreds of MB at import, and any command that prints as much, is read with
  bounded memory and kept as head and tail; files read whole are refused past a limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import toypkg
from conftest import live_pids, offline, wait_until

from dsbisect.core import proc
from dsbisect.launch import reaper
from dsbisect.core.model import RunStatus
from dsbisect.store.store import Store

SRC = str(Path(__file__).parents[2] / "src")
GONE_S = 120.0  # the longest a test waits for processes to be gone (a guard against a test that hangs)

# A rank that leaves every kind of child a rank can leave.  PROCS_DAEMONS of them are setsid
# daemons that ignore INT, TERM and HUP, every second one double-forked (its parent exits, so
# it has lost its parent before dsbisect is stopped).
HOSTILE = """\
import multiprocessing, os, signal, subprocess, sys, time


def stubborn():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    while True:
        time.sleep(1)


def daemon(double):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        if double and os.fork() != 0:
            os._exit(0)
        os.write(w, b"%d\\n" % os.getpid())
        os.close(w)
        stubborn()
    os.close(w)
    with os.fdopen(r) as f:
        return int(f.readline())


pids = [os.getpid(), subprocess.Popen(["sleep", "600"]).pid]
child = os.fork()
if child == 0:
    stubborn()
pids.append(child)
mp = multiprocessing.get_context("fork").Process(target=stubborn)
mp.start()
pids.append(mp.pid)
pids += [daemon(i % 2 == 0) for i in range(int(os.environ.get("PROCS_DAEMONS", "1")))]
out = os.environ["PROCS_FILE"] + "." + str(os.getpid())  # one per rank and run
with open(out + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(out + ".tmp", out)
print(f"started {len(pids)} processes", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("procs-wheels"), {"1.0.0": "ok", "1.1.0": "ok"},
                                   dist="dsb-procs")


def _start(folder: Path, house: Path, cache_dir: Path, daemons: int, nproc: int = 1,
           versions: tuple[str, ...] = ("1.0.0",)) -> tuple[subprocess.Popen, Path]:
    """``nproc`` 1: the rank runs without a launcher; 2: under the deepspeed launcher.  Several
    ``versions`` run at once (``--jobs``, one slot each)."""
    pids = folder / "pids.txt"
    (folder / "hostile.py").write_text(HOSTILE)
    (folder / "matrix.yaml").write_text(f"""\
defaults: {{accelerator: cpu, nproc: {nproc}, timeout: 300, collective_timeout: 60}}
cases:
  hostile:
    script: hostile.py
    env: {{OMP_NUM_THREADS: "1", PROCS_FILE: "{pids}", PROCS_DAEMONS: "{daemons}"}}
    axes: {{dsb-procs: [{", ".join(f'"{v}"' for v in versions)}]}}
""")
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", "--jobs", str(len(versions))]
    return subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), pids


def _started(run: subprocess.Popen, pids: Path, ranks: int = 1, limit: float = 240) -> list[int]:
    """Every rank's pid and its children's, once ``ranks`` ranks wrote them."""
    deadline = time.monotonic() + limit
    while len(files := sorted(pids.parent.glob(f"{pids.name}.[0-9]*"))) < ranks:
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the ranks did not start their children"
        time.sleep(0.2)
    found = [int(p) for f in files for p in f.read_text().split()]
    assert live_pids(found) == found  # every one is running before dsbisect is stopped
    return found


def _left_after(pids: list[int], t0: float, seconds: float) -> list[int]:
    """The pids still running ``seconds`` after ``t0`` (polled: returns as soon as none is)."""
    return _still_after(lambda: live_pids(pids), t0, seconds)


def _still_after(alive, t0: float, seconds: float) -> list:
    """``alive()`` once it is empty, or as it is ``seconds`` after ``t0`` (polled)."""
    while True:
        found = alive()
        if not found or time.monotonic() - t0 > seconds:
            return found
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["no-launcher", "deepspeed-launcher"])
def test_kill_9_of_dsbisect_leaves_no_child_of_a_rank(tmp_path, house, cache_dir, nproc):
    run, pids_file = _start(tmp_path, house, cache_dir, daemons=2, nproc=nproc)
    pids = _started(run, pids_file, nproc)
    (run_dir,) = (tmp_path / ".dsbisect" / "runs").glob("*")
    run.kill()
    t0 = time.monotonic()
    run.communicate()
    left = _left_after(pids, t0, GONE_S)  # signal-ignoring daemons: without the guard, never
    print(f"kill -9: {len(pids)} processes, {len(left)} left ({time.monotonic() - t0:.2f} s)")
    assert left == [], f"still running {GONE_S:g} s after kill -9 of dsbisect: {left}"
    # ...and nothing else of the run (its launcher's interpreters): the guard SIGKILLs them at
    # once, but a large process is torn down by the kernel for a while, running in /proc until
    # it is a zombie (seen under four pytest workers: one left 0.02 s after the kill)
    tagged = _still_after(lambda: reaper.tagged(run_dir), t0, GONE_S)
    assert tagged == [], f"still running {GONE_S:g} s after kill -9 of dsbisect: {tagged}"


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, points", [(signal.SIGTERM, 143, 1), (signal.SIGINT, 130, 1), (signal.SIGHUP, 129, 2)],
                         ids=["TERM", "INT", "HUP-two-runs-at-once"])
def test_a_signal_stops_50_signal_ignoring_daemons(tmp_path, house, cache_dir, sig, code, points):
    versions = ("1.0.0", "1.1.0")[:points]  # two: each run's teardown is on a worker thread of its own
    run, pids_file = _start(tmp_path, house, cache_dir, daemons=50 // points, versions=versions)
    pids = _started(run, pids_file, points)
    run.send_signal(sig)
    t0 = time.monotonic()
    left = _left_after(pids, t0, GONE_S)
    took = time.monotonic() - t0
    _, err = run.communicate(timeout=GONE_S)
    print(f"{sig.name}: {len(pids)} processes, {len(left)} left (all gone in {took:.2f} s)")
    assert left == [], f"{len(left)} of {len(pids)} still running {GONE_S:g} s after {sig.name}"
    assert run.returncode == code, err
    records = Store(tmp_path / ".dsbisect").runs(include_unfinished=True)
    assert len(records) == points and all(r.status is RunStatus.INTERRUPTED for r in records), records


def _peak_rss(popen: subprocess.Popen) -> int:
    """The process's peak RSS (VmHWM, the kernel's high-water mark), read until it ends."""
    peak = 0
    while popen.poll() is None:
        try:
            status = Path(f"/proc/{popen.pid}/status").read_text()
            peak = max(peak, int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) << 10)
        except (OSError, StopIteration, ValueError):
            pass
        time.sleep(0.02)
    return peak


@pytest.mark.slow
def test_a_huge_file_on_the_command_line_is_digested_with_bounded_memory(tmp_path, house, cache_dir):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:  # sparse, as `truncate -s 1500M`: no disk used
        f.truncate(1500 << 20)
    (tmp_path / "quick.py").write_text("import sys\nprint('read', sys.argv[1:])\n")
    run = subprocess.Popen([sys.executable, "-m", "dsbisect", "run", "--versions", "dsb-procs=1.0.0",
                            "--accelerator", "cpu", *offline(house, cache_dir), "--format", "json", "--", "python", "quick.py", "big.bin"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = _peak_rss(run)
    out, err = run.communicate()
    print(f"1.5 GB file named: dsbisect peak RSS {peak / 1e6:.0f} MB")
    assert run.returncode == 0, err
    (record,) = json.loads(out)["runs"]
    inputs = {Path(i["path"]).name: i for i in record["environment"]["inputs"]}
    assert inputs["big.bin"]["bytes"] == 1500 << 20 and inputs["big.bin"]["sha256"] not in ("", "missing")
    assert peak < 200e6, f"dsbisect's RSS reached {peak / 1e6:.0f} MB"


# ------------------------------------------------------------------ captured output

MEASURE = """\
import json, sys
sys.path[:0] = [sys.argv[1]]
from dsbisect.core import proc
from dsbisect.envs import facts
kind = sys.argv[2]
if kind == "import":
    got = facts.import_check(sys.executable, ["chatty"], {"PYTHONPATH": sys.argv[3], "PATH": "/usr/bin:/bin"})
    out = {"ok": got.ok, "reason": got.reason, "version": got.facts.version("chatty")}
else:
    done = proc.run([sys.executable, "-c", sys.argv[3]])
    out = {"code": done.returncode, "cut": done.cut, "out_len": len(done.stdout), "err_len": len(done.stderr),
           "out_head": done.stdout[:20], "out_tail": done.stdout[-20:], "err_tail": done.stderr[-20:],
           "note": "bytes of this output were cut here" in done.stdout}
# VmHWM, this process's own high-water mark: ru_maxrss would start at the RSS pytest had when it
# forked this process (Linux carries it over exec), 108 MB by the end of the fast tier
status = open("/proc/self/status").read()
out["peak"] = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) << 10
print(json.dumps(out))
"""

PRINTER = """\
import os, sys
line = "x" * 1023 + "\\n"
sys.stdout.write("FIRST\\n")
for _ in range(int(os.environ.get("MB", "300")) * 1024):
    sys.stdout.write(line)
    sys.stderr.write(line)
print("LAST-OUT")
print("LAST-ERR", file=sys.stderr)
"""


def _measure(*args: str, mb: int = 300) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE, SRC, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MB=str(mb)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # the check imports torch too
def test_a_package_printing_300_mb_at_import_is_checked_with_bounded_memory(tmp_path):
    site = tmp_path / "site"
    (site / "chatty").mkdir(parents=True)
    (site / "chatty" / "__init__.py").write_text(PRINTER.replace('os.environ.get("MB", "300")', '"300"'))
    info = site / "chatty-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chatty\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("chatty\n")
    got = _measure("import", str(site))
    print(f"300 MB printed at import: peak RSS {got['peak'] / 1e6:.0f} MB")
    assert got["ok"] and got["version"] == "1.0", got
    assert got["peak"] < 100e6, f"{got['peak'] / 1e6:.0f} MB"


def test_a_command_printing_120_mb_keeps_head_and_tail_in_bounded_memory():
    got = _measure("run", PRINTER, mb=60)  # on stdout and on stderr: 120 MB would be 240+ MB held whole
    print(f"120 MB printed (60 MB on stdout, 60 on stderr): peak RSS {got['peak'] / 1e6:.0f} MB, {got['cut'] / 1e6:.0f} MB cut")
    assert got["code"] == 0 and got["peak"] < 100e6, got
    assert got["out_head"].startswith("FIRST") and got["out_tail"].endswith("LAST-OUT\n"), got
    assert got["err_tail"].endswith("LAST-ERR\n") and got["note"], got
    keep = proc.KEEP.head + proc.KEEP.tail + 200
    assert got["out_len"] <= keep and got["err_len"] <= keep and got["cut"] > 110e6, got


@pytest.mark.slow  # subprocesses that start interpreters: ~1.5-2.5 s (the fast tier's budget)
def test_a_command_that_times_out_keeps_what_it_printed():
    done = proc.run([sys.executable, "-c", "import time; print('before', flush=True); time.sleep(60)"], timeout=1.5)
    assert done.returncode is None and done.error == "no answer within 1.5 s" and done.stdout == "before\n"


def test_git_output_read_as_data_is_refused_when_it_would_be_cut(tmp_path):
    done = proc.run([sys.executable, "-c", "print('x' * 5000)"], keep=proc.Keep(1000, 0))
    assert done.ok and done.cut > 0 and len(done.stdout) < 1100  # and gitrepo._git refuses a cut answer


@pytest.mark.parametrize("what", ["matrix", "hostfile"])
def test_a_huge_input_file_is_one_line_exit_2(tmp_path, cli, what):
    toypkg.write_repro(tmp_path)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
    if what == "matrix":
        args = ["run", "big"]
    else:
        (tmp_path / "m.yaml").write_text("cases:\n  toy:\n    script: toy_repro.py\n    hostfile: big\n"
                                         "    axes: {dsb-toy: ['1.0.0']}\n")
        args = ["run", "m.yaml"]
    before = {p.name for p in tmp_path.iterdir()}
    res = cli(*args, "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "too large to read (64.0 MB" in lines[0], res.stderr
    assert {p.name for p in tmp_path.iterdir()} == before


# ------------------------------------------------------------------ the backstop

STUCK_LAUNCHER = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; [signal.signal(s, signal.SIG_IGN) for s in (2, 15)]; time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=dict(os.environ, RANK="0"))
open(os.environ["PIDS"], "w").write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


@pytest.mark.slow
def test_a_signal_while_a_stack_snapshot_holds_the_launch_still_stops_the_tree(tmp_path):
    """A signal sets the runner's cancel while the launch's thread is inside a slow hook (a py-spy
    dump of a stuck rank can take 20 s): the guard kills the tree all the same, while the hook
    still holds the thread (it is released only once the tree is gone)."""
    import threading

    from dsbisect.launch.supervise import LaunchSpec, launch
    from dsbisect.core.rundir import RunDir

    (tmp_path / "launcher.py").write_text(STUCK_LAUNCHER)
    spec = LaunchSpec(argv=(sys.executable, str(tmp_path / "launcher.py")), env=dict(os.environ, PIDS=str(tmp_path / "pids")),
                      cwd=tmp_path, run=RunDir(tmp_path / "run"), wall_timeout=3.0, early_hang=False)
    cancel, release, signalled = threading.Event(), threading.Event(), []

    def slow_snapshot(procs, why):
        wait_until(lambda: (tmp_path / "pids").is_file(), GONE_S, "the launcher's pids")
        signalled.append(time.monotonic())
        cancel.set()  # what the runner does on SIGTERM
        release.wait(600)  # held until the test saw the tree gone: only the backstop can kill it

    results = []
    worker = threading.Thread(target=lambda: results.append(launch(spec, on_hang=slow_snapshot, cancel=cancel)))
    worker.start()
    wait_until(lambda: signalled, GONE_S, "the slow snapshot")
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    left = _left_after(pids, signalled[0], GONE_S)
    gone_in = time.monotonic() - signalled[0]
    held = not release.is_set() and worker.is_alive()
    release.set()
    worker.join(GONE_S)
    print(f"the tree gone {gone_in:.1f} s after the cancel, the hook still holding the thread")
    assert left == [] and held, f"{left} still running {gone_in:.1f} s after the cancel"
    assert results and not live_pids(pids)


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe not text", b"{not json", None],
                         ids=["a-list", "not-utf8", "not-json", "300MB"])
def test_a_bad_or_huge_base_snapshot_is_one_line_exit_2(tmp_path, cli, content):
    toypkg.write_repro(tmp_path)
    (tmp_path / "matrix.yaml").write_text("cases:\n  toy:\n    script: toy_repro.py\n    axes: {dsb-toy: ['1.0.0']}\n")
    snap = tmp_path / "snap.json"
    if content is None:
        with open(snap, "wb") as f:
            f.truncate(300 << 20)
    else:
        snap.write_bytes(content)
    res = cli("prefetch", "matrix.yaml", "--base-snapshot", "snap.json", "--dest", str(tmp_path / "wh"),
              "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--base-snapshot snap.json" in lines[0], res.stderr
    assert content is not None or "too large to read (300.0 MB" in lines[0]


def test_a_huge_mark_log_is_refused_in_one_line(tmp_path, cli):
    log = tmp_path / "marks.log"
    with open(log, "wb") as f:
        f.truncate(64 << 20)
    res = cli("replay", str(log), "--store", str(tmp_path / "st"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "too large to read (64.0 MB" in lines[0], res.stderr
