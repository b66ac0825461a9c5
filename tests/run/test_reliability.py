"""Trust under faults and hostile input.

- Bad input: every case of the table is one line on stderr, exit 2, and creates nothing.
- The store: lost, emptied or damaged databases, stale run folders, read-only stores,
  several dsbisects at once — no traceback, no wrong verdict, nothing recorded lost.
- Signals: SIGINT, SIGTERM, SIGHUP and kill -9 of dsbisect leave no process of the run
  behind (how soon is printed, not asserted); a daemon that leaves the process tree is found
  by its tag.
- Secrets stay out of reports; what ranks print cannot blow up dsbisect's memory.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import toypkg
from conftest import live_pids, offline, wait_until, write_matrix
from dsbisect.launch import reaper
from dsbisect.core.model import Outcome, Point, RunStatus
from dsbisect.store.store import Store

# ------------------------------------------------------------------ bad input

MATRICES = {
    "binary": bytes(range(256)) * 4,
    "latin1": "cases:\n  a:\n    script: caf\xe9.py\n".encode("latin-1"),
    "empty": b"",
    "list": b"- a\n- b\n",
    "dup_case": b"cases:\n  toy:\n    script: toy_repro.py\n  toy:\n    script: toy_repro.py\n",
    "dup_key": b"cases:\n  toy:\n    script: toy_repro.py\n    nproc: 2\n    nproc: 3\n",
    "long_script": ("cases:\n  toy:\n    script: " + "x" * 5000 + ".py\n    axes: {dsb-toy: ['1.0.0']}\n").encode(),
    "inf_timeout": b"cases:\n  toy:\n    script: toy_repro.py\n    timeout: .inf\n    axes: {dsb-toy: ['1.0.0']}\n",
    "nan_timeout": b"cases:\n  toy:\n    script: toy_repro.py\n    timeout: .nan\n    axes: {dsb-toy: ['1.0.0']}\n",
    "huge_nproc": b"cases:\n  toy:\n    script: toy_repro.py\n    nproc: 100000\n    axes: {dsb-toy: ['1.0.0']}\n",
    "bad_version": b"cases:\n  toy:\n    script: toy_repro.py\n    axes: {dsb-toy: ['one']}\n",
    "unknown_key": b"cases:\n  toy:\n    script: toy_repro.py\n    gpus: 3\n    axes: {dsb-toy: ['1.0.0']}\n",
}

BAD_ARGS = [
    # (arguments after the command, what the one line says)
    (["run", "{matrix}", "--timeout", "-1"], "--timeout -1: expected a number of seconds greater than 0"),
    (["run", "{matrix}", "--timeout", "0"], "--timeout 0: expected"),
    (["run", "{matrix}", "--timeout", "nan"], "--timeout nan: expected"),
    (["run", "{matrix}", "--timeout", "abc"], "Invalid value for '--timeout'"),
    (["run", "{matrix}", "--idle-timeout", "-5"], "--idle-timeout -5: expected"),
    (["run", "{matrix}", "--collective-timeout", "0"], "--collective-timeout 0: expected"),
    (["run", "{matrix}", "--collective-timeout", "-3"], "--collective-timeout -3: expected"),
    (["run", "{matrix}", "--format", "xml"], "Invalid value for '--format'"),
    (["run", "{matrix}", "--repeat", "0"], "Invalid value for '--repeat'"),
    (["run", "{matrix}", "--jobs", "0"], "Invalid value for '--jobs'"),
    (["run", "{matrix}", "--base", "weird"], "Invalid value for '--base'"),
    (["run", "{matrix}", "--case", "ghost"], "no case named 'ghost'"),
    (["run", "{matrix}", "--python", "/nonexistent/python"], "python interpreter '/nonexistent/python' not found"),
    (["run", "{matrix}", "--find-links", "/nonexistent/wheels"], "--find-links /nonexistent/wheels: no such folder"),
    (["run", "{matrix}", "--store", "{file}"], "is a file, not a folder"),
    (["run", "{matrix}", "--store", "{file}/sub"], "is a file, not a folder"),
    (["run", "{matrix}", "--store", "/proc/dsbisect-store"], "is not writable"),
    (["run", "{matrix}", "--no-such-option"], "No such option: --no-such-option"),
    (["bisect", "dsb-toy", "1.1.0", "1.1.0", "--case", "toy"], "good and bad are the same version (1.1.0)"),
    (["bisect", "dsb-toy", "1.3.0", "1.1.0", "--case", "toy"], "good 1.3.0 is newer than bad 1.1.0"),
    (["bisect", "dsb-toy", "abc", "1.1.0", "--case", "toy"], "'abc' is not a version"),
    (["bisect", "dsb-toy", "1..2", "1.1.0", "--case", "toy"], "'1..2' is not a version"),
    (["bisect", "dsb-ghost", "1.0.0", "1.1.0", "--case", "toy"], "dsb-ghost: no releases found"),
    (["bisect", "dsb-toy", "1.0.0", "9.9.9", "--case", "toy"], "dsb-toy==9.9.9 (bad end) is not on"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--git-repo", "/nonexistent"], "no such folder"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--python", "/nonexistent"], "not found"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--pin", "torch>>1"], "is not a requirement"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--signature", " "], "--signature needs some text"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--regress-on", "slow"], "'--regress-on'"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--case", "toy", "--confirm", "0"], "'--confirm'"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--script", "missing.py"], "missing.py: no such script"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--script", "toy_repro.py", "--nproc", "10000"], "'--nproc'"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--script", "toy_repro.py", "--accelerator", "gpu"], "'--accelerator'"),
    (["show", "abc"], "Invalid value for 'run_id'"),
    (["show", "1"], "no dsbisect store in"),
    (["report"], "no dsbisect store in"),
    (["report", "--store", "{file}"], "is a file, not a folder"),
    (["envs", "prune", "--cache-dir", "{tmp}/cache"], "say which venvs: --all, or --older-than DAYS"),
    (["versions", "dsb-toy", "1.0.0", "--offline"], "--offline needs at least one --find-links"),  # GOOD alone: to the latest
    (["prefetch", "{matrix}", "--offline"], "cannot run --offline itself"),
    (["prefetch", "{matrix}", "--commits", "a..b"], "--git-repo and --commits OLD..NEW go together"),
    (["--shared-group", "no-such-group-here", "report"], "--shared-group no-such-group-here: no such group"),
]


def _one_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _created(tmp_path: Path, before: set[str]) -> set[str]:
    return {p.name for p in tmp_path.iterdir()} - before


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_bad_matrix_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, name):
    toypkg.write_repro(tmp_path)
    (tmp_path / "m.yaml").write_bytes(MATRICES[name])
    before = {p.name for p in tmp_path.iterdir()}
    res = cli("run", "m.yaml", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert _one_line(res).startswith("error: m.yaml")
    assert "Traceback" not in res.output and _created(tmp_path, before) == set()


def test_an_unreachable_index_is_one_line_exit_1_with_its_credentials_hidden(tmp_path, cli):
    """Not bad input (exit 1: the index did not answer; tests/cli/test_cli.py has more of its forms)."""
    res = cli("versions", "dsb-toy", "--index-url", "https://me:s3cr3t@127.0.0.1:9/simple", cwd=tmp_path)
    assert res.exit_code == 1, res.output
    assert "https://***@127.0.0.1:9/simple" in _one_line(res) and "s3cr3t" not in res.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, expected", BAD_ARGS, ids=[" ".join(a[:3]) + "…" + e[:12] for a, e in BAD_ARGS])
def test_bad_arguments_are_one_line_exit_2_and_create_nothing(tmp_path, cli, wheelhouse, args, expected):
    write_matrix(tmp_path, ["1.0.0"])
    (tmp_path / "a-file").write_text("not a folder")
    fill = {"{matrix}": "matrix.yaml", "{file}": str(tmp_path / "a-file"), "{tmp}": str(tmp_path)}
    argv = [fill.get(a, a) for a in args]
    argv = [a.replace("{file}", str(tmp_path / "a-file")).replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] in ("run", "bisect"):
        argv += ["--offline", "--find-links", str(wheelhouse), "--cache-dir", str(tmp_path / "cache")]
    before = {p.name for p in tmp_path.iterdir()}
    res = cli(*argv, cwd=tmp_path)
    assert res.exit_code == 2, res.output
    line = _one_line(res)
    assert line.startswith("error: ") and expected in line, line
    assert "Traceback" not in res.output
    assert _created(tmp_path, before) == set()  # no store, no cache skeleton


def test_report_exit_codes_agree_with_the_docs(tmp_path, cli):
    """No store at --store: bad input (2).  A store with nothing to report: 1."""
    assert cli("report", cwd=tmp_path).exit_code == 2
    Store(tmp_path / ".dsbisect").close()
    res = cli("report", cwd=tmp_path)
    assert res.exit_code == 1 and "no runs recorded" in _one_line(res)
    page = (Path(__file__).parents[2] / "docs" / "reference" / "exit-codes.md").read_text()
    assert "| 2 | bad input:" in page and "no store at --store" in page


# ------------------------------------------------------------------ the store


def _stored_runs(store: Path, n: int = 3) -> list[int]:
    st = Store(store)
    ids = []
    for i in range(n):
        rid = st.start_run("toy", "case-key", Point(versions=(("dsb-toy", f"1.{i}.0"),)), "env", 1)
        st.finish_run(rid, Outcome.PASS if i % 2 == 0 else Outcome.HANG, 0, 1.5 + i, reason="", signature=f"sig {i}")
        ids.append(rid)
    st.close()
    return ids


def _report(cli, store: Path) -> list[dict]:
    res = cli("report", "--store", str(store), "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["runs"]


def test_a_lost_or_emptied_database_is_rebuilt_from_the_run_folders(tmp_path, cli):
    store = tmp_path / "st"
    ids = _stored_runs(store)
    for damage in ("delete", "empty"):
        db = store / "dsbisect.sqlite3"
        for extra in store.glob("dsbisect.sqlite3*"):
            extra.unlink()
        if damage == "empty":
            db.write_bytes(b"")
        st = Store(store)
        assert any(f"rebuilt from {len(ids)} run folder(s)" in n for n in st.notes)
        assert [r.id for r in st.runs()] == ids
        assert [r.signature for r in st.runs()][:3] == ["sig 0", "sig 1", "sig 2"]
        # New runs never reuse a folder of the old ones.
        new = st.start_run("toy", "case-key", Point(versions=(("dsb-toy", "9.0.0"),)), None, 1)
        assert new not in ids and Path(st.run(new).run_dir).name not in {f"{i:06d}" for i in ids}
        st.finish_run(new, Outcome.PASS, 0, 1.0)
        st.close()
        ids.append(new)


@pytest.mark.parametrize("damage", ["truncated", "garbage header", "garbage page"])
def test_a_damaged_database_is_one_line_then_repaired_without_loss(tmp_path, cli, damage):
    store = tmp_path / "st"
    ids = _stored_runs(store, 40)
    db = store / "dsbisect.sqlite3"
    with sqlite3.connect(db) as con:  # everything into the main file, as a crash could leave it
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    assert len(data) > 8192
    if damage == "truncated":
        data = data[:10_000]
    elif damage == "garbage header":
        data[:100] = os.urandom(100)
    else:
        data[4096:8192] = os.urandom(4096)
    db.write_bytes(bytes(data))
    for extra in ("-wal", "-shm"):
        Path(str(db) + extra).unlink(missing_ok=True)
    for args in (["report", "--store", str(store)], ["show", str(ids[0]), "--store", str(store)]):
        res = cli(*args)
        if res.exit_code == 0:  # a page the query never read: nothing to say yet
            continue
        line = _one_line(res)
        assert res.exit_code == 1 and "is damaged" in line and "dsbisect store repair" in line, line
        assert "Traceback" not in res.output
    res = cli("store", "repair", "--store", str(store))
    assert res.exit_code == 0, res.output
    assert "moved to" in res.stderr and "rebuilt from 40 run folder(s)" in res.stderr
    assert [r["id"] for r in _report(cli, store)] == ids  # nothing recorded was lost


def test_a_copied_runs_folder_without_its_database_gives_no_stale_evidence(tmp_path):
    """Old run folders without records (a copied runs/): a new run gets a folder of its own."""
    old = tmp_path / "st" / "runs" / "000001"
    (old / "ranks").mkdir(parents=True)
    (old / "launcher.log").write_text("Watchdog caught collective operation timeout: WorkNCCL(...)\n")
    st = Store(tmp_path / "st")
    rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), None, 1)
    folder = Path(st.run(rid).run_dir)
    assert rid == 1 and folder != old and folder.name.startswith("000001-")
    assert list(folder.iterdir()) == [] and (old / "launcher.log").exists()


@pytest.mark.slow  # subprocesses that start interpreters: ~1.5-2.5 s (the fast tier's budget)
def test_reading_works_on_a_read_only_store(tmp_path, cli, wheelhouse):
    store = tmp_path / "st"
    ids = _stored_runs(store)
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespaces here")
    # A read-only bind mount: the permission bits cannot stop root, a read-only mount does.
    code = (f"mount --bind {store} {store} && mount -o remount,ro,bind {store} && "
            f"{sys.executable} -m dsbisect report --store {store} --format json && "
            f"{sys.executable} -m dsbisect show {ids[1]} --store {store}/dsbisect.sqlite3 && "
            f"{{ {sys.executable} -m dsbisect run {tmp_path}/m.yaml --store {store} --offline "
            f"--find-links {wheelhouse} --cache-dir {tmp_path}/c; echo rc=$?; }}")
    write_matrix(tmp_path, ["1.0.0"]).rename(tmp_path / "m.yaml")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", code],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout[:out.stdout.index("\n}\n") + 3])
    assert [r["id"] for r in report["runs"]] == ids
    assert f"run {ids[1]}" in out.stdout and "sig 1" in out.stdout
    assert "rc=2" in out.stdout and "is not writable" in out.stderr and "Traceback" not in out.stderr


def test_several_dsbisects_on_a_fresh_store_claim_a_point_once(tmp_path):
    """Four processes open one new store at once and claim the same point: one runs it, the
    others are told whose run to wait for (the runner then waits for it and reuses it)."""
    code = ("import sys, os, time; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point, Outcome\n"
            "st = Store(sys.argv[1])\n"
            "c = st.claim('toy', 'k', Point(versions=(('dsb-toy', '1.0.0'),)), 1)\n"
            "open(os.path.join(sys.argv[1], f'claimed.{os.getpid()}'), 'w').close()\n"
            "t0 = time.monotonic()\n"
            "while c.run and len([f for f in os.listdir(sys.argv[1]) if f.startswith('claimed.')]) < 4 \\\n"
            "        and time.monotonic() - t0 < 60:\n"
            "    time.sleep(0.05)\n"
            "if c.run: st.finish_run(c.run.id, Outcome.PASS, 0, 1.0)\n"
            "print('ran' if c.run else f'busy:{c.busy.id}')\n")
    src = str(Path(__file__).parents[2] / "src")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "st"), src], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    said = sorted(o.strip() for o, _ in outs)
    assert said.count("ran") == 1 and all(s.startswith("busy:") for s in said if s != "ran"), said
    runs = Store(tmp_path / "st").runs(include_unfinished=True)
    assert len(runs) == 1 and runs[0].status is RunStatus.DONE


# ------------------------------------------------------------------ processes


@pytest.fixture(scope="module")
def fault_house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("fault-wheels"),
                                   {"1.0.0": "sleep", "1.1.0": "daemon", "1.2.0": "segv", "1.3.0": "exit125",
                                    "1.4.0": "chatty"}, dist="dsb-fault")


def _start(tmp_path: Path, house: Path, cache_dir: Path, version: str, *extra: str, env: dict | None = None,
           launcher: str = "deepspeed") -> subprocess.Popen:
    write_matrix(tmp_path, [version], package="dsb-fault", collective_timeout=120, timeout=300,
                 extra=f"    launcher: {launcher}\n")
    cmd = [sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
           "--format", "json", *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))


def _wait_for_ranks(tmp_path: Path, n: int = 2, limit: float = 900) -> list[psutil.Process]:
    """The run's rank processes, once ``n`` of them are up (found by their tag)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        runs = sorted((tmp_path / ".dsbisect" / "runs").glob("*"))
        if runs:
            ranks = [p for p in reaper.tagged(runs[-1]) if "RANK" in _environ(p)]
            if len(ranks) >= n and any(runs[-1].glob("ranks/*.log")):
                return reaper.tagged(runs[-1])
        time.sleep(0.3)
    raise AssertionError("the ranks did not start")


def _environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def _gone(procs: list[psutil.Process], limit: float = 120) -> None:
    """Wait for every process of ``procs`` to be gone (printing how soon), failing after ``limit`` s:
    an event, not a time (they were started to outlive a plain kill)."""
    t0 = time.monotonic()
    wait_until(lambda: not live_pids([p.pid for p in procs]), limit, "every process of the run to be gone")
    print(f"every process of the run gone in {time.monotonic() - t0:.2f} s")


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_every_process_and_records_the_run_as_interrupted(tmp_path, cache_dir, fault_house,
                                                                        sig, code):
    proc = _start(tmp_path, fault_house, cache_dir, "1.0.0")
    procs = _wait_for_ranks(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"interrupted by {sig.name}" in err or "interrupted;" in err
    _gone(procs)
    (run,) = Store(tmp_path / ".dsbisect").runs(include_unfinished=True)
    assert run.status is RunStatus.INTERRUPTED
    record = json.loads((Path(run.run_dir) / "run.json").read_text())
    assert record["status"] == "interrupted" and record["id"] == run.id
    assert not list((cache_dir / "envs").glob("*.tmp"))


@pytest.mark.slow
def test_kill_9_of_dsbisect_takes_the_run_with_it_and_the_next_start_says_so(tmp_path, cache_dir, fault_house):
    proc = _start(tmp_path, fault_house, cache_dir, "1.0.0")
    procs = _wait_for_ranks(tmp_path)
    proc.kill()
    proc.wait()
    _gone(procs)  # every process of the run dies with its parent

    # With that turned off and the run's guard killed with dsbisect (kill -9 of both), the
    # processes outlive dsbisect: the next dsbisect on the store stops them.
    again = tmp_path / "again"
    again.mkdir()
    proc = _start(again, fault_house, cache_dir, "1.0.0", env={"DSBISECT_PDEATHSIG": "0"})
    procs = _wait_for_ranks(again)
    (guard,) = [p for p in psutil.Process(proc.pid).children() if "dsbisect_guard.py" in " ".join(p.cmdline())]
    guard.suspend()  # stopped, it cannot act on dsbisect's death before it dies too
    proc.kill()
    proc.wait()
    guard.kill()
    wait_until(lambda: not live_pids([guard.pid]), 10, "the guard to die")
    assert live_pids([p.pid for p in procs])  # dsbisect and its guard are gone, the ranks are not
    nxt = _start(again, fault_house, cache_dir, "1.0.0", "--timeout", "5")
    nxt.communicate(timeout=120)
    _gone(procs)
    first = Store(again / ".dsbisect").run(1)
    assert first.status is RunStatus.INTERRUPTED and "died" in first.reason and "were stopped" in first.reason


@pytest.mark.slow
def test_a_daemon_that_left_the_tree_is_found_by_its_tag(tmp_path, cache_dir, fault_house):
    proc = _start(tmp_path, fault_house, cache_dir, "1.1.0")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["outcome"] == "pass"
    assert run["evidence"]["escaped"], run["evidence"]
    assert not live_pids(run["evidence"]["escaped"]) and not reaper.tagged(run["run_dir"])
    assert any("left the run's process tree" in n for n in run["evidence"]["notes"])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun", "direct"])
def test_a_segfault_is_named_and_125_is_a_skip_under_every_launcher(tmp_path, cache_dir, fault_house, launcher):
    seg, skip = tmp_path / "segv", tmp_path / "skip"
    for folder, version in ((seg, "1.2.0"), (skip, "1.3.0")):
        folder.mkdir()
        proc = _start(folder, fault_house, cache_dir, version, launcher=launcher)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        (run,) = json.loads(out)["runs"]
        if version == "1.2.0":
            assert run["outcome"] == "fail" and run["reason"].startswith("rank 1 killed by SIGSEGV"), run["reason"]
        else:
            assert run["outcome"] == "skip", run["reason"]


@pytest.mark.slow
def test_what_ranks_print_does_not_blow_up_memory_and_is_capped(tmp_path, cache_dir, fault_house):
    mb = os.environ.get("DSB_TOY_MB", "120")  # DSB_TOY_MB=300: the figure in docs/reliability.md
    proc = _start(tmp_path, fault_house, cache_dir, "1.4.0", env={"DSB_TOY_MB": mb})
    peak = _peak_rss(proc)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["outcome"] == "pass", run["reason"]
    assert peak < 100e6, f"dsbisect's RSS reached {peak / 1e6:.0f} MB"
    kept = sum(p.stat().st_size for p in Path(run["run_dir"]).rglob("*.log"))
    print(f"{mb} MB printed: dsbisect peak RSS {peak / 1e6:.0f} MB, {kept / 1e6:.1f} MB of logs kept")
    assert kept < 40e6 and any("cut from the middle" in n for n in run["evidence"]["notes"])
    cut = next(Path(run["run_dir"]).glob("ranks/*rank0.log")).read_bytes()
    assert b"MB) of this log were cut here]" in cut
    show = subprocess.Popen([sys.executable, "-m", "dsbisect", "show", str(run["id"])], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = _peak_rss(show)
    assert show.returncode == 0 and "xxxx" in show.stdout.read() and peak < 100e6, f"{peak / 1e6:.0f} MB"
    print(f"show: peak RSS {peak / 1e6:.0f} MB")


def _peak_rss(proc: subprocess.Popen) -> int:
    me, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, me.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
    return peak


# ------------------------------------------------------------------ secrets


def test_credentials_never_reach_a_report(tmp_path):
    from dsbisect.core.redact import redact, redact_tree

    secret = "s3cr3t-T0KEN"
    st = Store(tmp_path / "st")  # what is stored for display is redacted when it is recorded
    rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), None, 1)
    st.finish_run(rid, Outcome.SKIP, None, 0.0, reason=f"venv could not be built: https://u:{secret}@mirror/simple")
    assert secret not in st.run(rid).reason and secret not in (Path(st.run(rid).run_dir) / "run.json").read_text()

    line = redact(f"uv: Failed to fetch https://__token__:{secret}@h/simple/x; HF_TOKEN={secret} WANDB_API_KEY='{secret}'")
    assert secret not in line and "https://***@h/simple/x" in line
    assert redact_tree({"HF_TOKEN": secret, "OMP_NUM_THREADS": "1"}) == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "1"}
    pins = "held pins: tokenizers==0.15.2, huggingface-hub>=0.20, accelerate!=1.0"
    assert redact(pins) == pins  # a requirement is no NAME=value


def test_the_reproduce_line_hides_credentials(tmp_path, monkeypatch):
    from dsbisect.cli.output import reproduce_line

    monkeypatch.setattr(sys, "argv", ["dsbisect", "bisect", "x", "1", "2", "--index-url",
                                      "https://me:hunter2@h/simple", "--format", "json"])
    assert reproduce_line("dsbisect bisect x 1 2") == "dsbisect bisect x 1 2 --index-url https://***@h/simple"


@pytest.mark.slow  # subprocesses that start interpreters: ~1.5-2.5 s (the fast tier's budget)
def test_what_dsbisect_writes_is_private_unless_shared(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    out = subprocess.run([sys.executable, "-c", "from dsbisect.cli import main; main()", "store", "repair",
                          "--store", str(tmp_path / "st")], capture_output=True, text=True, env=env)
    assert out.returncode == 2  # no store there: nothing to repair
    Store(tmp_path / "mine").close()
    subprocess.run([sys.executable, "-m", "dsbisect", "store", "repair", "--store", str(tmp_path / "mine")],
                   check=True, capture_output=True, env=env)
    assert oct((tmp_path / "mine" / "dsbisect.sqlite3").stat().st_mode & 0o777) == "0o600"
    group = next((g for g in ("users", "staff", "daemon") if _group_exists(g)), None)
    if group is None:
        pytest.skip("no group to share with")
    shared = tmp_path / "shared"
    from dsbisect.run import session

    old = os.umask(0o022)
    try:
        session.share_with(group)
        session.make_shared(shared)
        Store(shared).close()
        assert oct(shared.stat().st_mode & 0o7777) == "0o2770"
        assert oct((shared / "dsbisect.sqlite3").stat().st_mode & 0o777) == "0o660"
        import grp

        assert shared.stat().st_gid == grp.getgrnam(group).gr_gid == (shared / "dsbisect.sqlite3").stat().st_gid
    finally:
        os.umask(old)
        session._GROUP.clear()


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False
