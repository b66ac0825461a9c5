"""The store under the second battery (issue 20, "Runs lost or corrupted"): copied, killed,
full, repaired beside a writer, fed malformed records, opened by another user, shared by
several hosts, moved — no run lost, no traceback, nothing written into another store.

Filesystems of a few MB are real tmpfs mounts (root only; skipped, saying why, elsewhere);
another user is ``nobody``, reached by dropping privileges in a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import toypkg
from conftest import live_pids, offline, write_matrix
from dsbisect.store import claims
from dsbisect.store.claims import Liveness
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import DiskFull, EnvBuildError, InputError, StoreError
from dsbisect.core.model import IndexOptions, Outcome, Point, RunStatus
from dsbisect.records.run import Evidence, ImportCheck, RunFacts
from dsbisect.core.rundir import cap_log
from dsbisect.run.session import reap_orphans
from dsbisect.store.store import SCHEMA, Store

SRC = str(Path(__file__).parents[2] / "src")
P = [Point(versions=(("dsb-toy", f"1.{i}.0"),)) for i in range(12)]


def _runs(store: Path, n: int = 3) -> list[int]:
    st = Store(store)
    ids = []
    for i in range(n):
        rid = st.start_run("toy", "case-key", P[i], "env", 1)
        (st.dir / st.run(rid).run_dir / "launcher.log").write_text(f"log of run {rid}\n")
        st.finish_run(rid, Outcome.PASS if i % 2 == 0 else Outcome.FAIL, i % 2, 1.5 + i, signature=f"sig {i}")
        ids.append(rid)
    st.close()
    return ids


def _one_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _report_ids(cli, store: Path) -> list[int]:
    res = cli("report", "--store", str(store), "--format", "json")
    assert res.exit_code == 0, res.output
    return [r["id"] for r in json.loads(res.stdout)["runs"]]


def _writer(store: Path, point: int = 5, tag: Path | None = None) -> subprocess.Popen:
    """A live dsbisect stand-in: opens the store, claims a run (its rank, a ``sleep`` tagged with
    the run folder when ``tag``), prints the run's id and waits for stdin to close."""
    code = ("import sys, os, subprocess; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point\n"
            "st = Store(sys.argv[1])\n"
            f"c = st.claim('toy', 'case-key', Point(versions=(('dsb-toy', '1.{point}.0'),)), 1)\n"
            "rank = None\n"
            "if sys.argv[3] == 'tag':\n"
            "    rank = subprocess.Popen(['sleep', '300'], env=dict(os.environ, DSBISECT_RUN_DIR=c.run.run_dir),\n"
            "                            stdout=subprocess.DEVNULL)\n"
            "print(c.run.id, rank.pid if rank else 0, flush=True)\n"
            "sys.stdin.read()\n")
    return subprocess.Popen([sys.executable, "-c", code, str(store), SRC, "tag" if tag else "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _old_store(folder: Path, n: int = 3, running: bool = True) -> None:
    """A store as dsbisect 80d1cb7 made it: schema 3, absolute run-folder paths in the index and
    in every run.json, and (``running``) a run left running by a writer that is gone."""
    folder.mkdir(parents=True)
    db = sqlite3.connect(folder / "dsbisect.sqlite3", isolation_level=None)
    for script in SCHEMA[:3]:
        for stmt in script.split(";"):
            if stmt.strip():
                db.execute(stmt)
    db.execute("PRAGMA user_version = 3")
    dead = subprocess.Popen(["true"])
    dead.wait()
    for i in range(n + int(running)):
        run = folder / "runs" / f"{i + 1:06d}"
        (run / "ranks").mkdir(parents=True)
        (run / "launcher.log").write_text(f"log of run {i + 1}\n")
        done = i < n
        row = {"id": i + 1, "case_name": "toy", "case_key": "case-key", "point_key": P[i].key,
               "point": json.dumps(P[i].to_json()), "env_key": "env", "attempt": 1,
               "status": "done" if done else "running", "outcome": "pass" if done else None,
               "exit_code": 0 if done else None, "seconds": 1.0 if done else None, "started": time.time() - 60,
               "finished": time.time() if done else None, "reason": "", "run_dir": str(run),
               "signature": "", "evidence": "{}", "facts": "{}", "pid": dead.pid, "host": socket.gethostname(),
               "folder": str(run)}
        db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
        if done:
            record = {"format": 1} | row | {c: json.loads(row[c]) for c in ("point", "evidence", "facts")}
            (run / "run.json").write_text(json.dumps(record))
    db.close()


# ------------------------------------------------------------- a copied store


def test_a_copied_store_is_a_store_of_its_own(tmp_path, cli):
    """cp -a A B while A runs: reaping, show and repair in B touch only B (new and old stores)."""
    a, b = tmp_path / "A", tmp_path / "B"
    ids = _runs(a)
    writer = _writer(a, tag=a)
    try:
        live_id, rank = map(int, writer.stdout.readline().split())
        subprocess.run(["cp", "-a", str(a), str(b)], check=True)
        a_db = (a / "dsbisect.sqlite3").read_bytes()
        notes: list[str] = []
        st = Store(b)
        reap_orphans(st, lambda kind, text: notes.append(text))
        # B's copy of the live run is B's own, abandoned there; A's run and its rank go on.
        assert any(f"run {live_id}" in n for n in notes), notes
        assert json.loads((b / "runs" / f"{live_id:06d}" / "run.json").read_text())["status"] == "interrupted"
        assert not (a / "runs" / f"{live_id:06d}" / "run.json").exists()
        assert live_pids([rank]) == [rank] and writer.poll() is None
        assert Store(a, readonly=True).run(live_id).status is RunStatus.RUNNING
        assert all(Path(r.run_dir).is_relative_to(b) for r in st.runs(include_unfinished=True))
        st.close()
        res = cli("show", str(ids[0]), "--store", str(b))
        assert res.exit_code == 0 and str(b / "runs") in res.stdout and str(a / "runs") not in res.stdout
        res = cli("store", "repair", "--store", str(b))
        assert res.exit_code == 0, res.output
        assert (a / "dsbisect.sqlite3").read_bytes() == a_db and not list(a.glob("dsbisect.sqlite3.damaged-*"))
        assert _report_ids(cli, a) == ids and _report_ids(cli, b) == ids
        assert Store(b, readonly=True).run(live_id).status is RunStatus.INTERRUPTED
    finally:
        with contextlib.suppress(ProcessLookupError, NameError):
            os.kill(rank, signal.SIGKILL)
        writer.communicate("")
    # An old store (absolute paths everywhere), copied: migrated to paths of its own.
    old, copy = tmp_path / "old", tmp_path / "old-copy"
    _old_store(old)
    subprocess.run(["cp", "-a", str(old), str(copy)], check=True)
    st = Store(copy)
    reap_orphans(st, lambda kind, text: None)
    assert json.loads((copy / "runs" / "000004" / "run.json").read_text())["status"] == "interrupted"
    assert not (old / "runs" / "000004" / "run.json").exists()
    assert all(Path(r.run_dir).is_relative_to(copy) for r in st.runs(include_unfinished=True))
    st.close()
    res = cli("store", "repair", "--store", str(copy))
    assert res.exit_code == 0 and not list(old.glob("dsbisect.sqlite3.damaged-*")), res.output
    assert _report_ids(cli, copy) == [1, 2, 3]
    res = cli("show", "2", "--store", str(copy))
    assert res.exit_code == 0 and "log of run 2" in res.stdout and str(old / "runs") not in res.stdout


# ------------------------------------------------------- kill -9 mid-record


def test_a_kill_between_record_and_index_loses_no_finished_run(tmp_path, cli):
    # A finished row whose run.json never got written (an older dsbisect killed between the
    # two): repair writes its record from the index instead of dropping it.
    st = tmp_path / "st"
    ids = _runs(st, 4)
    (st / "runs" / f"{ids[1]:06d}" / "run.json").unlink()
    shutil.rmtree(st / "runs" / f"{ids[2]:06d}")  # and one whose whole folder is gone: kept, marked
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0, res.output
    assert "written from the index" in res.stderr
    assert _report_ids(cli, st) == ids
    assert (st / "runs" / f"{ids[1]:06d}" / "run.json").exists()
    res = cli("show", str(ids[2]), "--store", str(st))
    assert "run folder was gone" in res.stdout
    # The record comes first: a record on disk with its row still 'running' (killed before the
    # index): the next start takes the result from the record, not "interrupted".
    dead = subprocess.run([sys.executable, "-c", "import sys; sys.path[:0] = [sys.argv[2]]\n"
                           "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point, Outcome\n"
            "from dsbisect.records.run import Evidence\n"
                           "st = Store(sys.argv[1])\n"
                           "rid = st.start_run('toy', 'case-key', Point(versions=(('dsb-toy', '1.7.0'),)), None, 1)\n"
                           "v = st.writer.values(rid) | {'status': 'done', 'outcome': 'hang', 'reason': 'wall'}\n"
                           "from dsbisect.store.values import write_record\n"
                           "write_record(st.dir, v)\nprint(rid)\n", str(st), SRC],
                          capture_output=True, text=True, check=True)
    rid = int(dead.stdout)
    notes: list[str] = []
    store = Store(st)
    reap_orphans(store, lambda kind, text: notes.append(text))
    assert store.run(rid).outcome is Outcome.HANG and "had finished" in " ".join(notes), notes
    store.close()


@pytest.mark.slow
def test_random_kills_of_a_writer_then_repair_lose_no_finished_run(tmp_path, cli):
    """A writer finishing runs, killed -9 at random moments (12 times): every run it said it
    finished, and every row the index had as finished, is in the repaired index as finished."""
    house = tmp_path / "kills"
    code = ("import sys; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point, Outcome\n"
            "from dsbisect.records.run import Evidence\n"
            "st = Store(sys.argv[1])\n"
            "for i in range(10**6):\n"
            "    rid = st.start_run('toy', 'k', Point(versions=(('dsb-toy', f'9.{i}'),)), None, 1)\n"
            "    st.finish_run(rid, Outcome.PASS, 0, 0.1, evidence=Evidence.of(notes=['x' * 2000]))\n"
            "    print(rid, flush=True)\n")
    said = set()
    rng = random.Random(20)
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", code, str(house), SRC], stdout=subprocess.PIPE, text=True)
        # a kill while it writes, not while Python starts (which takes over a second on a loaded machine)
        first = proc.stdout.readline()
        time.sleep(rng.random() * 0.6)
        proc.kill()
        said |= {int(x) for x in (first + proc.communicate()[0]).split()}
    db = sqlite3.connect(house / "dsbisect.sqlite3")
    done_before = {r for (r,) in db.execute("SELECT id FROM runs WHERE status='done'")}
    db.close()
    assert said and said <= done_before
    records = len(list(house.glob("runs/*/run.json")))
    res = cli("store", "repair", "--store", str(house))
    assert res.exit_code == 0, res.output
    kept = {r.id for r in Store(house, readonly=True).runs()}
    print(f"12 kills: {len(done_before)} finished rows, {len(done_before) - records} without run.json before "
          f"repair, {len(done_before - kept)} lost by repair")
    assert done_before <= kept, f"lost by repair: {sorted(done_before - kept)}"


# ------------------------------------------------------------ a full disk


@contextlib.contextmanager
def small_fs(size: str):
    """A real tmpfs of ``size`` (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="dsbisect-smallfs-"))
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def _fill(where: Path) -> Path:
    """Fill the filesystem at ``where`` to the last byte; the filler file."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
    with contextlib.suppress(OSError), open(where / "filler2", "wb", buffering=0) as f:
        while True:
            f.write(b"\0")
    return filler


def _partial_files(where: Path) -> list[Path]:
    return [p for p in where.rglob("*") if p.name.endswith((".tmp", ".cap")) or ".damaged-" in p.name]


def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, cli):
    # A log that filled the disk is capped in place: no copy, no .cap file, no traceback.
    with small_fs("8m") as fs:
        log = fs / "rank0.log"
        with open(log, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                for i in range(100_000):
                    f.write(f"{i:09d} ".encode() * 100 + b"\n")
        size = log.stat().st_size
        assert size > 7e6
        cut = cap_log(log, head=1 << 20, tail=2 << 20)
        data = log.read_bytes()
        assert cut == size - (3 << 20) and data.startswith(b"000000000 ") and not _partial_files(fs)
        assert f"[dsbisect: {cut} bytes".encode() in data
    # A full store disk: one line naming the disk; repair neither loops nor loses the index.
    with small_fs("2m") as fs:
        store = fs / "st"
        ids = _runs(store)
        open_before = Store(store)
        filler = _fill(fs)
        with pytest.raises(DiskFull, match=rf"no space left on .*{fs}.*dsbisect.sqlite3"):  # SQLite's own "full"
            for i in range(50):
                open_before.put_import_check(f"env{i}", ("k",), ImportCheck(True, "", RunFacts.from_json({"x": "y" * 100_000})))
        open_before.close()
        with pytest.raises(DiskFull, match=rf"no space left on .*{fs}"):
            st = Store(store)  # opening for writing may already need a byte
            try:
                for i in range(50):  # until the last free page is gone
                    st.finish_run(st.start_run("toy", "case-key", P[7], None, 1), Outcome.PASS, 0, 1.0,
                                  evidence=Evidence.of(notes=["x" * 4000]))
            finally:
                st.close()
        assert not _partial_files(fs)
        before = (store / "dsbisect.sqlite3").read_bytes()
        res = cli("store", "repair", "--store", str(store))
        line = _one_line(res)
        assert res.exit_code == 1 and "no space left on" in line and str(fs) in line and "damaged" not in line, line
        assert (store / "dsbisect.sqlite3").read_bytes() == before and not _partial_files(fs)
        assert _report_ids(cli, store)[:3] == ids  # reading needs no space
        filler.unlink()
        res = cli("store", "repair", "--store", str(store))
        assert res.exit_code == 0, res.output
        assert _report_ids(cli, store)[:3] == ids


@pytest.mark.slow
def test_a_full_cache_disk_is_a_build_failure_saying_so(tmp_path):
    """The venv cannot be built (an EnvBuildError, which a run records as a SKIP), in one line
    naming the disk, with no half-built venv left behind."""
    wh = tmp_path / "wheels"
    toypkg.build_wheel(wh, "2.0.0", "ok", dist="dsb-env-toy")
    for size in ("300k", "1m"):
        with small_fs(size) as fs:
            mgr = EnvManager(fs / "cache", index=IndexOptions(offline=True, find_links=(str(wh),)))
            with pytest.raises(EnvBuildError, match=rf"no space left on .*{fs}"):
                mgr.ensure(Point(versions=(("dsb-env-toy", "2.0.0"),)))
            assert not list((fs / "cache").glob("envs/*.tmp"))


@pytest.mark.slow
def test_a_rank_printing_most_of_a_small_store_disk_still_passes(tmp_path, cache_dir):
    """30 MB from one rank on a 40 MB store: the run passes, its log capped in place."""
    house = toypkg.build_wheelhouse(tmp_path / "wheels", {"1.4.0": "chatty"}, dist="dsb-chatty")
    with small_fs("40m") as fs:
        write_matrix(tmp_path, ["1.4.0"], package="dsb-chatty", nproc=1, collective_timeout=60, timeout=240)
        out = subprocess.run([sys.executable, "-m", "dsbisect", "run", "matrix.yaml", *offline(house, cache_dir),
                              "--store", str(fs / "st"), "--format",
                              "json"], cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, DSB_TOY_MB="30"))
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        (run,) = json.loads(out.stdout)["runs"]
        assert run["outcome"] == "pass", run["reason"]
        assert any("cut from the middle" in n for n in run["evidence"]["notes"])
        assert not _partial_files(fs)
        assert sum(p.stat().st_size for p in fs.rglob("*.log")) < 20e6


# ------------------------------------------------------- repair and a writer


def test_repair_beside_a_live_writer_is_refused_and_names_it(tmp_path, cli):
    st = tmp_path / "st"
    ids = _runs(st)
    writer = _writer(st)
    try:
        live_id, _ = map(int, writer.stdout.readline().split())
        res = cli("store", "repair", "--store", str(st))
        line = _one_line(res)
        assert res.exit_code == 1 and f"pid {writer.pid} on {socket.gethostname()}" in line, line
        assert not list(st.glob("dsbisect.sqlite3.damaged-*")) and _report_ids(cli, st) == ids
    finally:
        writer.communicate("")
    assert cli("store", "repair", "--store", str(st)).exit_code == 0


@pytest.mark.slow
def test_repairs_tried_while_a_writer_commits_lose_none_of_its_runs(tmp_path, cli):
    """A writer committing 60 runs while repairs are tried: each is refused or whole, and all
    60 are indexed afterwards."""
    busy = tmp_path / "busy"
    code = ("import sys, time; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point, Outcome\n"
            "from dsbisect.records.run import Evidence\n"
            "st = Store(sys.argv[1])\nprint('open', flush=True)\n"
            "for i in range(60):\n"
            "    rid = st.start_run('toy', 'k', Point(versions=(('dsb-toy', f'9.{i}'),)), None, 1)\n"
            "    st.finish_run(rid, Outcome.PASS, 0, 0.1)\n"
            "    time.sleep(0.01)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(busy), SRC], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    refused = 0
    while proc.poll() is None:
        res = cli("store", "repair", "--store", str(busy))
        refused += res.exit_code == 1 and "in use by" in res.stderr
    assert proc.wait() == 0 and refused >= 1
    assert cli("store", "repair", "--store", str(busy)).exit_code == 0
    assert len(_report_ids(cli, busy)) == 60


# ------------------------------------------------------ malformed run.json


BAD_RECORDS = {
    "null": "null",
    "list": "[1, 2, 3]",
    "string": '"run"',
    "empty object": "{}",
    "not json": "{'id': 1",
    "truncated": '{"format": 1, "id": 9, "case_na',
    "no case_name": None,  # made from a good record below
    "outcome PASS": None,
    "status odd": None,
    "id a string": None,
    "point a list": None,
    "evidence a list": None,
    "started text": None,
}
BREAK = {
    "no case_name": lambda d: d.pop("case_name"),
    "outcome PASS": lambda d: d.update(outcome="PASS"),
    "status odd": lambda d: d.update(status="finished"),
    "id a string": lambda d: d.update(id="7"),
    "point a list": lambda d: d.update(point=["dsb-toy", "1.0.0"]),
    "evidence a list": lambda d: d.update(evidence=[]),
    "started text": lambda d: d.update(started="yesterday"),
}


def test_malformed_records_are_quarantined_named_and_the_rest_indexed(tmp_path, cli):
    st = tmp_path / "st"
    n = len(BAD_RECORDS) + 3
    ids = _runs(st, 3)
    good = json.loads((st / "runs" / f"{ids[0]:06d}" / "run.json").read_text())
    for i, (name, text) in enumerate(BAD_RECORDS.items(), start=100):
        folder = st / "runs" / f"{i:06d}"
        folder.mkdir()
        if text is None:
            data = dict(good, id=i)
            BREAK[name](data)
            text = json.dumps(data)
        (folder / "run.json").write_text(text)
    for extra in st.glob("dsbisect.sqlite3*"):
        extra.unlink()
    res = cli("report", "--store", str(st))
    assert res.exit_code == 1 and "store repair" in _one_line(res)
    for attempt in range(2):  # and again: a repaired store repairs
        res = cli("store", "repair", "--store", str(st))
        assert res.exit_code == 0 and "Traceback" not in res.output, res.output
        assert _report_ids(cli, st) == ids
    moved = [ln for ln in cli("store", "repair", "--store", str(st)).stderr.splitlines() if "quarantine" in ln]
    assert not moved  # quarantined once, named once
    assert len(list((st / "quarantine").iterdir())) == len(BAD_RECORDS) and n > len(ids)
    # Bad values in rows of the index: left out and named; the rest is reported, shown.
    db = sqlite3.connect(st / "dsbisect.sqlite3")
    db.execute("UPDATE runs SET outcome='PASS' WHERE id=?", (ids[0],))
    db.execute("UPDATE runs SET point='{not json' WHERE id=?", (ids[1],))
    db.commit()
    db.close()
    for fmt in ("table", "json", "markdown"):
        res = cli("report", "--store", str(st), "--format", fmt)
        assert res.exit_code == 0 and "Traceback" not in res.output, res.output
        assert f"run {ids[0]}: its entry" in res.stderr and f"run {ids[1]}: its entry" in res.stderr
    assert json.loads(cli("report", "--store", str(st), "--format", "json").stdout)["runs"][0]["id"] == ids[2]
    res = cli("show", str(ids[0]), "--store", str(st))
    assert res.exit_code == 1 and "not readable" in _one_line(res) and "store repair" in _one_line(res)
    assert cli("show", str(ids[2]), "--store", str(st)).exit_code == 0


# ------------------------------------------------------- another user's store


NO_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner,-chown"]


def _as_other_user(*args: str) -> subprocess.CompletedProcess:
    """dsbisect as a user who does not own the store: the stores belong to ``nobody`` and this
    runs as root without the capabilities that override file permissions (root's own files,
    the interpreter among them, stay readable)."""
    return subprocess.run([*NO_OVERRIDE, sys.executable, "-m", "dsbisect", *args], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=SRC, COLUMNS="200"))


@pytest.mark.slow  # ten dsbisect processes
def test_permission_denied_is_not_damage(tmp_path):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv, to be a user without rights to another user's store")
    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    os.chown(secret, 65534, 65534)
    probe = subprocess.run([*NO_OVERRIDE, "cat", str(secret)], capture_output=True, text=True)
    if probe.returncode == 0:
        pytest.skip("setpriv cannot drop the permission override here")
    tmp_path.chmod(0o755)
    for form in ("private store", "private database", "readable, not writable"):
        st = tmp_path / form.replace(" ", "-").replace(",", "")
        ids = _runs(st)
        db = st / "dsbisect.sqlite3"
        with sqlite3.connect(db) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        subprocess.run(["chown", "-R", "65534:65534", str(st)], check=True)
        subprocess.run(["chmod", "-R", "u+rwX,go+rX" if form == "readable, not writable" else "go-rwx", str(st)],
                       check=True)
        before = db.read_bytes()
        if form == "private store":
            st.chmod(0o700)
        elif form == "private database":
            st.chmod(0o777)  # the other user may write the folder, not the database
        else:
            st.chmod(0o755)
        for args in (["report", "--store", str(st)], ["show", str(ids[0]), "--store", str(st)]):
            out = _as_other_user(*args)
            if form == "readable, not writable":
                assert out.returncode == 0 and "1.0.0" in out.stdout, out.stderr
                continue
            assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
            assert "permission denied" in out.stderr and "damaged" not in out.stderr, out.stderr
        out = _as_other_user("store", "repair", "--store", str(st))
        assert out.returncode != 0 and "permission denied" in out.stderr and "Traceback" not in out.stderr, \
            (form, out.stderr)
        assert db.read_bytes() == before and not list(st.glob("dsbisect.sqlite3.damaged-*")), form
        assert [r.id for r in Store(st, readonly=True).runs()] == ids  # the owner still sees every run


# -------------------------------------------------------- the lease of a claim


def _claim_as(store: Path, host: str, heartbeat_age: float | None) -> int:
    st = Store(store)
    rid = st.start_run("toy", "case-key", P[6], None, 1)
    st.close()
    db = sqlite3.connect(store / "dsbisect.sqlite3")
    db.execute("UPDATE runs SET host=?, pid=4242, started=? WHERE id=?",
               (host, time.time() - (heartbeat_age or 3600) - 10, rid))
    if "heartbeat" in {c for _, c, *_ in db.execute("PRAGMA table_info(runs)")}:
        db.execute("UPDATE runs SET writer=NULL, heartbeat=? WHERE id=?",
                   (None if heartbeat_age is None else time.time() - heartbeat_age, rid))
    db.commit()
    db.close()
    return rid


@pytest.mark.parametrize("age, abandoned", [(3600.0, True), (2 * claims.LEASE_S, True), (None, True),
                                            (1.0, False), (claims.LEASE_S / 2, False)])
def test_a_claim_of_another_host_lasts_as_long_as_its_heartbeat(tmp_path, age, abandoned):
    st = tmp_path / "st"
    rid = _claim_as(st, "login-node-7", age)
    store = Store(st)
    notes: list[str] = []
    reap_orphans(store, lambda kind, text: notes.append(text))
    claim = store.claim("toy", "case-key", P[6], 1)
    if abandoned:
        assert claim.run is not None and claim.busy is None
        assert store.run(rid).status is RunStatus.INTERRUPTED
        assert any(f"run {rid}" in n and "login-node-7 sent no heartbeat" in n and "abandoned" in n for n in notes)
    else:
        assert claim.busy is not None and claim.busy.id == rid and not notes
        assert store.run(rid).status is RunStatus.RUNNING


@pytest.mark.slow  # subprocesses that start interpreters: ~1.5-2.5 s (the fast tier's budget)
def test_a_live_run_keeps_its_heartbeat_fresh(tmp_path):
    code = ("import sys, time; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store import claims\nclaims.HEARTBEAT_S = 0.1\n"
            "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point\n"
            "st = Store(sys.argv[1])\n"
            "rid = st.start_run('toy', 'k', Point(versions=(('dsb-toy', '1.0.0'),)), None, 1)\n"
            "time.sleep(1)\nprint(rid)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "st"), SRC], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (row,) = sqlite3.connect(tmp_path / "st" / "dsbisect.sqlite3").execute("SELECT started, heartbeat FROM runs")
    assert row[1] - row[0] > 0.5
    # The judgement itself, as a table.
    now = 1000.0
    assert claims.judge("b", "a", now - 1, now, False, None) is Liveness.ALIVE
    assert claims.judge("b", "a", now - claims.LEASE_S - 1, now, True, True) is Liveness.EXPIRED
    assert claims.judge("a", "a", None, now, True, None) is Liveness.ALIVE
    assert claims.judge("a", "a", now, now, True, False) is Liveness.DEAD  # a copy's row
    assert claims.judge("a", "a", now, now, False, True) is Liveness.DEAD


# ------------------------------------------------------- a moved store, a lost index


def test_a_moved_store_and_a_lost_index_say_what_to_do(tmp_path, cli):
    for make in ("new", "old"):
        src, dst = tmp_path / f"{make}-before", tmp_path / f"{make}-after"
        if make == "new":
            ids = _runs(src)
            crashed = subprocess.run([sys.executable, "-c", "import sys; sys.path[:0] = [sys.argv[2]]\n"
                                      "from dsbisect.store.store import Store\nfrom dsbisect.core.model import Point\n"
                                      "print(Store(sys.argv[1]).start_run('toy', 'case-key', "
                                      "Point(versions=(('dsb-toy', '1.6.0'),)), None, 1))\n", str(src), SRC],
                                     capture_output=True, text=True, check=True)
            crashed_id = int(crashed.stdout)
        else:
            _old_store(src)
            ids, crashed_id = [1, 2, 3], 4
        src.rename(dst)
        store = Store(dst)
        notes: list[str] = []
        reap_orphans(store, lambda kind, text: notes.append(text))
        assert any(f"run {crashed_id}" in n for n in notes), notes
        assert json.loads((dst / "runs" / f"{crashed_id:06d}" / "run.json").read_text())["status"] == "interrupted"
        store.close()
        res = cli("show", str(ids[0]), "--store", str(dst))
        assert res.exit_code == 0 and f"log of run {ids[0]}" in res.stdout, res.output
        for extra in dst.glob("dsbisect.sqlite3*"):
            extra.unlink()
        for args in (["report", "--store", str(dst)], ["show", str(ids[0]), "--store", str(dst)]):
            res = cli(*args)
            line = _one_line(res)
            assert "dsbisect store repair" in line and "runs/" in line and "dsbisect run' first" not in line, line
        assert cli("store", "repair", "--store", str(dst)).exit_code == 0
        assert _report_ids(cli, dst) == ids
    with pytest.raises(InputError):  # and a store with neither index nor records is still "no store"
        Store(tmp_path / "nothing", readonly=True)


# ------------------------------------------- any value in a row: never a traceback

try:
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st_
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    JSONS = st_.recursive(st_.none() | st_.booleans() | st_.integers(min_value=-(2**63), max_value=2**63 - 1) | st_.floats(allow_nan=False)
                          | st_.text(max_size=8), lambda kids: st_.lists(kids, max_size=3)
                          | st_.dictionaries(st_.text(max_size=6), kids, max_size=3), max_leaves=6)
    PLACES = ["point", "evidence", "facts", "outcome", "status", "exit_code", "seconds", "reason", "signature",
              "case_name", "attempt", "started", "host", "run_dir",
              *(f"facts.{k}" for k in ("host", "versions", "python", "gpus", "cuda", "inputs", "command", "index")),
              *(f"evidence.{k}" for k in ("notes", "manual", "note", "escaped", "survivors", "files")),
              "facts.host.name", "facts.host.topology", "point.versions", "point.source", "point.pins"]

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(place=st_.sampled_from(PLACES), value=JSONS)
    def test_no_value_in_a_row_of_the_index_crashes_report_or_show(tmp_path, place, value):
        """Whatever a row holds (one value anywhere replaced by any JSON), reading it gives a
        record or leaves it out, named; rendering what is read never raises."""
        import io

        from rich.console import Console

        from dsbisect.render import report as rep
        from dsbisect.render.htmlreport import render
        from dsbisect.render.htmlsource import one_run_page, store_page
        from dsbisect.render.show import render_run

        template = tmp_path / "template"
        if not template.exists():
            _runs(template, 2)
        folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "st"
        shutil.copytree(template, folder)
        db = sqlite3.connect(folder / "dsbisect.sqlite3")
        column, *path = place.split(".")
        (raw,) = db.execute(f"SELECT {column} FROM runs WHERE id=1").fetchone()
        if path:
            data = json.loads(raw)
            inner = data
            for k in path[:-1]:
                inner = inner.setdefault(k, {}) if isinstance(inner.get(k), dict) or k not in inner else {}
            inner[path[-1]] = value
            new = json.dumps(data)
        else:
            new = json.dumps(value) if column in ("point", "evidence", "facts") else \
                value if not isinstance(value, (list, dict)) else json.dumps(value)
        not_null = {name for _, name, _, notnull, *_ in db.execute("PRAGMA table_info(runs)") if notnull}
        assume(new is not None or column not in not_null)  # a NULL the schema refuses cannot be in a row
        db.execute(f"UPDATE runs SET {column}=? WHERE id=1", (new,))
        db.commit()
        db.close()
        store = Store(folder, readonly=True)
        records = store.runs()
        assert [r.id for r in records] in ([1, 2], [2]) or place in ("status", "outcome")
        try:
            one = store.run(1)
        except StoreError as e:
            assert "not readable" in str(e)
            one = None
        console = Console(file=io.StringIO(), width=200)
        g = rep.grid(records)
        json.dumps(rep.grid_json(g, ()))
        rep.grid_markdown(g, "t", ())
        console.print(rep.grid_renderable(g, "t"))
        render(store_page(store, records))
        if one is not None:
            console.print(render_run(one))
            render(one_run_page(one, folder))
        store.close()
