"""The store under the third battery (issue 36): wrong statuses (an interrupted bisection shown
running forever; repair calling a sound database damaged), a newer dsbisect's store used and
"repaired" down, a read-only store's traceback, sizes read and written whole, credentials
kept at rest.  Each test failed on main d71b288.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dsbisect

from dsbisect.core.errors import InputError
from dsbisect.core.model import Outcome, Point
from dsbisect.records.bisections import AskedFor, BisectionStatus
from dsbisect.store import bounds, claims
from dsbisect.store.repair import repair
from dsbisect.store.store import DB, SCHEMA, Store

SRC = str(Path(dsbisect.__file__).parents[1])  # where the dsbisect under test is (src, or a wheel's install)
P = [Point(versions=(("dsb-toy", f"1.{i}.0"),)) for i in range(8)]


def _runs(store: Path, n: int = 3) -> list[int]:
    st = Store(store)
    ids = []
    for i in range(n):
        rid = st.start_run("toy", "case-key", P[i], "env", 1)
        st.finish_run(rid, Outcome.PASS if i % 2 == 0 else Outcome.FAIL, i % 2, 1.5 + i, signature=f"sig {i}")
        ids.append(rid)
    st.close()
    return ids


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith("-shm")}


def _report_ids(cli, store: Path) -> list[int]:
    res = cli("report", "--store", str(store), "--format", "json")
    assert res.exit_code == 0, res.output
    return [r["id"] for r in json.loads(res.stdout)["runs"]]


# ------------------------------------------------------------ repair of a sound index


def test_repair_of_a_sound_database_moves_nothing_and_says_so(tmp_path, cli):
    """It said "the damaged database was moved…" then "…was missing or empty: rebuilt"."""
    st = tmp_path / "st"
    ids = _runs(st)
    inode = (st / DB).stat().st_ino
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0, res.output
    assert "damaged" not in res.stderr and "missing or empty" not in res.stderr, res.stderr
    assert "sound" in res.stderr and "nothing to repair" in res.stderr, res.stderr
    assert (st / DB).stat().st_ino == inode and not list(st.glob(f"{DB}.damaged-*"))
    assert _report_ids(cli, st) == ids


@pytest.mark.parametrize("harm", ["record deleted", "record overwritten", "record cut", "row deleted",
                                  "row says running", "record of a newer dsbisect"])
def test_repair_of_a_sound_database_with_a_harmed_run_loses_nothing(tmp_path, cli, harm):
    """A sound index beside one harmed run folder: kept in place, the run kept (its record
    written from the row, or its row from the record), the harm said; an unreadable record is
    set aside beside it, never deleted."""
    st = tmp_path / "st"
    ids = _runs(st, 4)
    record = st / "runs" / f"{ids[1]:06d}" / "run.json"
    original = record.read_bytes()
    if harm == "record deleted":
        record.unlink()
    elif harm == "record overwritten":
        record.write_text("<html>a report written over a record</html>")
    elif harm == "record cut":
        record.write_bytes(original[: len(original) // 2])
    elif harm == "record of a newer dsbisect":
        record.write_text(json.dumps(json.loads(original) | {"format": 9, "new_field": [1, 2]}))
    else:
        db = sqlite3.connect(st / DB)
        if harm == "row deleted":
            db.execute("DELETE FROM runs WHERE id=?", (ids[1],))
        else:
            db.execute("UPDATE runs SET status='running', outcome=NULL WHERE id=?", (ids[1],))
        db.commit()
        db.close()
    before = record.read_bytes() if record.exists() else None
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert "sound" in res.stderr and not list(st.glob(f"{DB}.damaged-*")), res.stderr
    if harm == "record of a newer dsbisect":  # left as it is; its row (of this dsbisect) stays
        assert record.read_bytes() == before and "newer dsbisect" in res.stderr, res.stderr
        return
    assert _report_ids(cli, st) == ids
    assert json.loads(record.read_text())["outcome"] == "fail"
    if harm in ("record overwritten", "record cut"):
        (aside,) = record.parent.glob("run.json.unreadable-*")
        assert aside.read_bytes() == before and "set aside" in res.stderr
    if harm in ("row deleted", "row says running"):
        assert "re-indexed" in res.stderr and str(ids[1]) in res.stderr, res.stderr
    again = cli("store", "repair", "--store", str(st))
    assert "nothing to repair" in again.stderr, again.stderr


def test_an_empty_database_file_is_rebuilt_not_called_damaged(tmp_path, cli):
    st = tmp_path / "st"
    ids = _runs(st)
    for p in st.glob(f"{DB}*"):
        p.unlink()
    (st / DB).write_bytes(b"")
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0 and "damaged" not in res.stderr and "rebuilt from 3" in res.stderr, res.stderr
    assert _report_ids(cli, st) == ids


def test_a_damaged_database_is_still_moved_aside_and_the_why_said(tmp_path, cli):
    st = tmp_path / "st"
    ids = _runs(st)
    data = bytearray((st / DB).read_bytes())
    data[4096:8192] = os.urandom(4096)  # a garbage page
    (st / DB).write_bytes(bytes(data))
    for side in ("-wal", "-shm"):
        Path(f"{st / DB}{side}").unlink(missing_ok=True)
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0, res.output
    assert "damaged (" in res.stderr and list(st.glob(f"{DB}.damaged-*")), res.stderr
    assert _report_ids(cli, st) == ids


# ------------------------------------------------------------ a newer dsbisect's store


@pytest.mark.parametrize("schema", [len(SCHEMA) + 1, 99, 2**31 - 1])
@pytest.mark.parametrize("command", [["store", "repair"], ["report"], ["show", "1"], ["log"],
                                     ["mark", "bad", "dsb-toy==1.5.0", "--script", "x.py"]])
def test_a_store_of_a_newer_dsbisect_is_refused_untouched(tmp_path, cli, schema, command):
    """Schema 99 was used silently and written to; repair "rebuilt" it at 4."""
    st = tmp_path / "st"
    _runs(st)
    db = sqlite3.connect(st / DB)
    db.execute(f"PRAGMA user_version = {schema}")
    db.commit()
    db.close()
    (tmp_path / "x.py").write_text("print(1)\n")
    before = _files(st)
    res = cli(*command, "--store", str(st), cwd=tmp_path)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert f"written by a newer dsbisect (schema {schema}" in res.stderr and len(res.stderr.splitlines()) == 1
    assert _files(st) == before


def test_a_newer_schema_committed_to_the_wal_is_refused_too(tmp_path):
    """The header on disk says 4 while the WAL holds 99: SQLite is asked, nothing is written."""
    st = tmp_path / "st"
    _runs(st)
    holder = sqlite3.connect(st / DB)  # keeps the WAL from being checkpointed into the file
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("PRAGMA user_version = 99")
    holder.commit()
    try:
        with pytest.raises(InputError, match="schema 99"):
            Store(st)
        with pytest.raises(InputError, match="schema 99"):
            repair(st)
    finally:
        holder.close()


# ------------------------------------------------------------ a read-only store


@pytest.mark.slow
def test_repair_and_writers_on_a_read_only_mount_are_one_line(tmp_path):
    """store repair on a read-only filesystem: an OSError traceback (claims.py:117)."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("a read-only bind mount needs root and mount namespaces")
    st = tmp_path / "st"
    ids = _runs(st)
    (tmp_path / "x.py").write_text("print(1)\n")
    py = f"{sys.executable} -m dsbisect"
    code = (f"mount --bind {st} {st} && mount -o remount,ro,bind {st} && "
            f"{{ {py} store repair --store {st}; echo rc=$?; "
            f"{py} mark bad dsb-toy==1.5.0 --script {tmp_path}/x.py --store {st}; echo rc=$?; "
            f"{py} report --store {st} --format json; echo rc=$?; }}")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", code],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC))
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and all("read-only" in ln or "not writable" in ln for ln in lines), out.stderr
    assert out.stdout.count("rc=2") == 2 and "rc=0" in out.stdout, out.stdout
    report = json.loads(out.stdout[out.stdout.index("{"):out.stdout.rindex("}") + 1])
    assert [r["id"] for r in report["runs"]] == ids


def test_a_store_lock_that_cannot_be_made_is_one_line(tmp_path):
    st = tmp_path / "st"
    st.mkdir()
    (st / claims.LOCK).mkdir()  # not a file: os.open fails with EISDIR
    with pytest.raises(Exception) as e:
        claims.StoreLock(st)
    assert type(e.value).__name__ == "StoreError" and "cannot be locked" in str(e.value)


# ------------------------------------------------------------ sizes


def test_what_is_written_is_capped_and_what_is_read_is_bounded(tmp_path):
    st = tmp_path / "st"
    store = Store(st)
    rid = store.start_run("toy", "k", P[0], None, 1)
    huge = "x" * (bounds.RECORD_LIMIT * 3)
    rec = store.finish_run(rid, Outcome.FAIL, 1, 1.0, reason=huge)
    store.close()
    path = st / "runs" / f"{rid:06d}" / "run.json"
    assert path.stat().st_size < bounds.RECORD_LIMIT
    assert len(rec.reason) <= bounds.TEXT_CAP + 200 and "cut here" in rec.reason
    many = bounds.capped({"notes": ["y" * 200_000] * 100})
    assert len(json.dumps(many)) < bounds.RECORD_LIMIT


def test_a_record_over_the_limit_is_quarantined_unread_and_named(tmp_path, cli):
    st = tmp_path / "st"
    ids = _runs(st)
    big = st / "runs" / "000099"
    big.mkdir()
    good = json.loads((st / "runs" / f"{ids[0]:06d}" / "run.json").read_text())
    with open(big / "run.json", "w") as f:  # a field just over the limit: refused unread
        f.write(json.dumps(good | {"id": 99, "reason": "z" * (bounds.RECORD_LIMIT + 10)}))
    for p in st.glob(f"{DB}*"):
        p.unlink()
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0, res.output
    assert "too large to read" in res.stderr and "quarantine" in res.stderr, res.stderr
    assert _report_ids(cli, st) == ids and (st / "quarantine" / "000099" / "run.json").exists()


def test_a_row_over_the_limit_is_left_out_and_named_never_loaded(tmp_path, cli):
    """An index an older dsbisect filled whole: report, show and repair leave the row out."""
    st = tmp_path / "st"
    ids = _runs(st)
    db = sqlite3.connect(st / DB)
    db.execute("UPDATE runs SET evidence=? WHERE id=?",
               (json.dumps({"notes": ["n" * (bounds.SQL_LIMIT + 1)]}), ids[1]))
    db.commit()
    db.close()
    res = cli("report", "--store", str(st), "--format", "json")
    assert res.exit_code == 0 and "too large to read" in res.stderr, res.output
    assert [r["id"] for r in json.loads(res.stdout)["runs"]] == [ids[0], ids[2]]
    res = cli("show", str(ids[1]), "--store", str(st))
    assert res.exit_code == 1 and "too large to read" in res.stderr and len(res.stderr.splitlines()) == 1
    res = cli("store", "repair", "--store", str(st))  # the record in its folder stands for it
    assert res.exit_code == 0 and _report_ids(cli, st) == ids, res.output


# ------------------------------------------------------------ secrets at rest


CRED = "pkg @ https://alice:Hunter2Secret9@wheels.example.com/pkg-1.0-py3-none-any.whl?token=Tok3nValue77"


def test_a_pins_credentials_are_not_kept_at_rest(tmp_path, cli):
    """--pin "pkg @ https://user:pass@…?token=…" was stored raw in run.json and SQLite."""
    st = tmp_path / "st"
    store = Store(st)
    point = Point(versions=(("dsb-toy", "1.0.0"),), pins=(CRED,))
    claim = store.claim("toy", "k", point, 1)
    assert claim.run.point.pins == (CRED,)  # the process that runs it has what to install
    store.finish_run(claim.run.id, Outcome.SKIP, None, 0.0, reason=f"could not fetch {CRED.split(' @ ')[1]}")
    asked = AskedFor.from_json({"case": "toy", "argv": ["--pin", CRED], "pins": [CRED]})
    store.save_bisection("b" * 16, "dsb-toy", "1.0.0", "1.1.0", asked, BisectionStatus.DONE, {"steps": []})
    store.close()
    for path, data in _files(st).items():
        for secret in (b"Hunter2Secret9", b"Tok3nValue77"):
            assert secret not in data, path
    # the key is the masked one: another credential for the same wheel is the same point
    other = Point(versions=(("dsb-toy", "1.0.0"),), pins=(CRED.replace("Hunter2Secret9", "Rotated77x"),))
    assert other.key == point.key
    res = cli("report", "--store", str(st), "--format", "json")
    assert "Hunter2Secret9" not in res.stdout and "***" in res.stdout


def test_repair_masks_what_an_older_dsbisect_kept_raw(tmp_path, cli):
    st = tmp_path / "st"
    _runs(st, 1)
    record = st / "runs" / "000001" / "run.json"
    data = json.loads(record.read_text())
    data["point"]["pins"] = [CRED]
    record.write_text(json.dumps(data))
    db = sqlite3.connect(st / DB)
    db.execute("UPDATE runs SET point=?", (json.dumps(data["point"]),))
    db.commit()
    db.close()
    res = cli("store", "repair", "--store", str(st))
    assert res.exit_code == 0 and "masked now" in res.stderr, res.output
    for path, data in _files(st).items():
        assert b"Hunter2Secret9" not in data, path


# ------------------------------------------------------------ an interrupted bisection


KEY = "c0ffee" * 2 + "beef"


def _bisecting(st: Path, host: str | None = None) -> subprocess.Popen:
    """A dsbisect stand-in that records a running bisection and waits (stdin)."""
    code = ("import sys, socket; sys.path[:0] = [sys.argv[2]]\n"
            "from dsbisect.store.store import Store\n"
            "from dsbisect.records.bisections import AskedFor, BisectionStatus\n"
            + (f"socket.gethostname = lambda: {host!r}\n" if host else "")
            + "st = Store(sys.argv[1])\n"
            f"st.save_bisection({KEY!r}, 'dsb-toy', '1.0.0', '1.7.0', AskedFor.from_json({{'case': 'toy', "
            "'argv': ['dsb-toy', '1.0.0', '1.7.0', '--case', 'toy'], 'cwd': '/w'}), BisectionStatus.RUNNING, "
            "{'steps': []})\n"
            "print('saved', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(st), SRC], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "saved"
    return proc


def _status(cli, st: Path) -> dict:
    res = cli("report", "--store", str(st), "--format", "json")
    assert res.exit_code == 0, res.output
    (b,) = json.loads(res.stdout)["bisections"]
    return b


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT", "exit"])
def test_a_bisection_whose_dsbisect_is_gone_reads_interrupted_with_how_to_resume(tmp_path, cli, how):
    """It showed `not finished (running)` / "status": "running" forever with no process alive."""
    st = tmp_path / "st"
    _runs(st, 1)
    proc = _bisecting(st)
    assert _status(cli, st)["status"] == "running"  # while it lives
    if how == "exit":
        proc.stdin.close()
    else:
        proc.send_signal(getattr(signal, how))
    proc.wait(timeout=30)
    b = _status(cli, st)
    assert b["status"] == "interrupted" and b["verdict"] is None, b
    text = " ".join(b["answer"])
    assert f"pid {proc.pid}" in text and "last seen" in text and "to resume" in text, text
    table = cli("report", "--store", str(st)).stdout
    assert "not finished (interrupted)" in table and "to resume" in table
    assert "(interrupted)" in cli("log", "--store", str(st)).stdout.splitlines()[0]
    again = _bisecting(st)  # resumed: running again while it lives, the file says running
    assert _status(cli, st)["status"] == "running"
    again.stdin.close()
    again.wait(timeout=30)


def test_a_bisection_of_another_host_is_judged_by_its_heartbeat(tmp_path, cli):
    st = tmp_path / "st"
    _runs(st, 1)
    proc = _bisecting(st, host="elsewhere")
    try:
        assert _status(cli, st)["status"] == "running"  # fresh: respected
        (token,) = [p for p in (st / claims.WRITERS).iterdir()]
        old = time.time() - claims.LEASE_S - 60
        os.utime(token, (old, old))
        db = sqlite3.connect(st / DB)
        db.execute("UPDATE bisections SET updated=?", (old,))
        db.commit()
        db.close()
        b = _status(cli, st)
        assert b["status"] == "interrupted" and "no sign of life" in " ".join(b["answer"]), b
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_running_bisection_of_an_older_dsbisect_is_interrupted_once_no_one_holds_the_store(tmp_path, cli):
    st = tmp_path / "st"
    _runs(st, 1)
    db = sqlite3.connect(st / DB)
    db.execute("INSERT INTO bisections (key, package, good, bad, params, status, result, created, updated)"
               " VALUES (?,?,?,?,?,?,?,?,?)", (KEY, "dsb-toy", "1.0", "1.7", "{}", "running", "{}", 1.0, 1.0))
    db.commit()
    db.close()
    b = _status(cli, st)
    assert b["status"] == "interrupted" and "no dsbisect holds the store" in " ".join(b["answer"])
    assert socket.gethostname()  # (judged on this host)


def _peak(*args: str, cwd: Path) -> tuple[int, int, str]:
    """(peak RSS in KB, exit code, stderr) of ``dsbisect ARGS`` in a fresh process."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(p.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "dsbisect", *args], cwd=cwd,
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=SRC))
    kb, rc = map(int, out.stdout.split())
    return kb, rc, out.stderr


@pytest.mark.slow
def test_a_150_mb_field_costs_no_memory_and_no_run(tmp_path):
    """A 150 MB field in one run.json: repair peaked at 490 MB, report --format json (of the index
    an older repair filled) at 786 MB.  Now each stays under 100 MB and the run is kept."""
    st = tmp_path / "st"
    ids = _runs(st)
    record = st / "runs" / f"{ids[1]:06d}" / "run.json"
    data = json.loads(record.read_text())
    head, tail = json.dumps(data | {"reason": "@@"}).split('"@@"')
    with open(record, "w") as f:
        f.write(head + '"')
        for _ in range(150):
            f.write("x" * (1 << 20))
        f.write('"' + tail)
    kb, rc, said = _peak("store", "repair", "--store", "st", cwd=tmp_path)
    print(f"repair with a 150 MB field in run.json: peak RSS {kb / 1024:.0f} MB")
    assert rc == 0 and kb < 100 * 1024 and "too large to read" in said and "Traceback" not in said, said
    assert [r.id for r in Store(st, readonly=True).runs()] == ids  # written from its row: kept
    db = sqlite3.connect(st / DB)  # as an older dsbisect's repair left it: the value in the index
    db.execute("UPDATE runs SET reason=? WHERE id=?", ("y" * (150 << 20), ids[1]))
    db.commit()
    db.close()
    for args in (["report", "--format", "json"], ["report", "--format", "markdown"], ["show", str(ids[1])],
                 ["report", "--format", "html"]):
        kb, rc, said = _peak(*args, "--store", "st", cwd=tmp_path)
        print(f"{' '.join(args)} with a 150 MB value in a row: peak RSS {kb / 1024:.0f} MB")
        assert kb < 100 * 1024 and "Traceback" not in said and "too large to read" in said, said
