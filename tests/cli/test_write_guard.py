"""Third battery (issue 36), "written where it must not be": a file a command is asked to write
(-o, --html, --dest) never lands in a store, over an input, or over another output, whatever
name reaches it (the path, a symlink, ``..``, a hard link); refused in one line, exit 2, before
anything runs, with nothing changed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dsbisect.core import outputs
from dsbisect.core.errors import InputError
from dsbisect.core.model import Outcome, Point
from dsbisect.store import claims
from dsbisect.store.store import DB, Store


def _store(folder: Path, n: int = 3) -> Path:
    st = Store(folder)
    for i in range(n):
        rid = st.start_run("toy", "ck", Point(versions=(("dsb-toy", f"1.{i}.0"),)), "env", 1)
        st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.close()
    return folder


def _digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (but SQLite's -shm, which readers touch) and its content."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith("-shm")}


def _refused(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


def test_the_store_files_are_the_ones_the_guard_knows():
    from dsbisect.envs.cache import MARKER

    assert set(outputs.STORE_FILES) == {DB, claims.LOCK} and outputs.VENV_MARKER == MARKER


def test_nothing_is_written_into_a_point_venv(tmp_path, cli):
    venv = tmp_path / "cache" / "envs" / "abc123"
    (venv / "bin").mkdir(parents=True)
    (venv / "dsbisect-env.json").write_text("{}")
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    _store(tmp_path / "st", 1)
    res = cli("report", "--store", "st", "-o", str(venv / "bin" / "python"), cwd=tmp_path)
    _refused(res, "point venv")
    assert (venv / "bin" / "python").read_text() == "#!/bin/sh\n"


@pytest.mark.parametrize("args", [
    ["report", "-o", "st/dsbisect.sqlite3"],
    ["report", "--format", "json", "-o", "st/runs/000002/run.json"],
    ["report", "-o", "st/runs/000001/new.md"],
    ["report", "--html", "st/report.html"],
    ["report", "-o", "link-to-db"],
    ["report", "-o", "st/../st/dsbisect.sqlite3-wal"],
    ["report", "-o", "other/dsbisect.sqlite3"],  # a store this command does not name
    ["report", "--format", "html", "-o", "other/runs/000001/run.json"],
    ["show", "2", "--format", "html", "-o", "st/runs/000002/run.json"],
    ["show", "1", "--format", "html", "-o", "link-to-record"],
    ["diff", "a.txt", "b.txt", "-o", "st/dsbisect.sqlite3"],
    ["snapshot-base", "-o", "st/runs/000003/run.json"],
    ["prefetch", "--no-cases", "--extra", "x==1", "--dest", "st"],
    ["prefetch", "--no-cases", "--extra", "x==1", "--dest", "st/runs/wheels"],
])
def test_nothing_is_written_into_a_store(tmp_path, cli, args):
    """report -o STORE/dsbisect.sqlite3 overwrote the database with HTML (exit 0); show -o a
    run.json overwrote a record, which repair then quarantined: a run lost."""
    st, other = _store(tmp_path / "st"), _store(tmp_path / "other", 1)
    (tmp_path / "link-to-db").symlink_to(st / DB)
    (tmp_path / "link-to-record").symlink_to(st / "runs" / "000001" / "run.json")
    (tmp_path / "a.txt").write_text("torch==2.0\n")
    (tmp_path / "b.txt").write_text("torch==2.1\n")
    before = (_digest(st), _digest(other))
    store_args = ["--store", "st"] if args[0] in ("report", "show") else []
    res = cli(*args, *store_args, cwd=tmp_path)
    _refused(res, "inside")
    assert (_digest(st), _digest(other)) == before


@pytest.mark.parametrize("args, victim", [
    (["diff", "a.txt", "b.txt", "-o", "a.txt"], "a.txt"),
    (["diff", "a.txt", "b.txt", "--format", "json", "-o", "link-to-b"], "b.txt"),
    (["diff", "a.txt", "venv", "-o", "venv/pyvenv.cfg"], "venv"),
    (["run", "matrix.yaml", "-o", "matrix.yaml"], "matrix.yaml"),
    (["run", "matrix.yaml", "-o", "toy_repro.py"], "toy_repro.py"),  # the matrix's script
    (["run", "matrix.yaml", "-o", "cfg.json"], "cfg.json"),  # a file of the case's args
    (["run", "--versions", "dsb-toy=1.0.0", "-o", "x.py", "--", "python", "x.py"], "x.py"),
    (["bisect", "dsb-toy", "1.0.0", "1.2.0", "--script", "x.py", "-o", "x.py"], "x.py"),
    (["bisect", "--good-env", "a.txt", "--bad-env", "b.txt", "-o", "b.txt", "--", "python", "x.py"], "b.txt"),
    (["bisect", "--good-env", "a.txt", "--bad-env", "venv", "-o", "venv/x.md", "--", "python", "x.py"], None),
    (["replay", "log.txt"], None),  # replay writes nothing: no guard to trip (control below)
    (["report", "-o", "r.md", "--html", "r.md"], None),
    (["report", "-o", "r.md", "--html", "hard-r.md"], None),
])
def test_no_output_replaces_an_input_or_another_output(tmp_path, cli, args, victim):
    from conftest import write_matrix

    write_matrix(tmp_path, ["1.0.0", "1.1.0"], extra="    args: [--cfg, cfg.json]\n")
    (tmp_path / "cfg.json").write_text("{}\n")
    (tmp_path / "x.py").write_text("print('x')\n")
    (tmp_path / "a.txt").write_text("torch==2.0\n")
    (tmp_path / "b.txt").write_text("torch==2.1\n")
    (tmp_path / "link-to-b").symlink_to("b.txt")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "r.md").write_text("old\n")
    os.link(tmp_path / "r.md", tmp_path / "hard-r.md")
    (tmp_path / "log.txt").write_text("# nothing\n")
    _store(tmp_path / "st", 1)
    before = _digest(tmp_path)
    extra = {"report": ["--store", "st"], "replay": ["--store", "st"], "diff": []}
    res = cli(*args, *extra.get(args[0], ["--store", "st2", "--offline"]), cwd=tmp_path)
    if args[0] == "replay":
        assert res.exit_code != 2 or "an input" not in res.stderr
        return
    _refused(res)
    assert "an input" in res.stderr or "names it too" in res.stderr, res.stderr
    assert _digest(tmp_path) == before
    assert not (tmp_path / "st2").exists()
    if victim:
        assert victim in res.stderr or Path(victim).name in res.stderr or "link-to-b" in res.stderr


def test_a_report_written_through_a_hard_link_leaves_the_other_name_whole(tmp_path, cli):
    """-o a name that shares its inode with a store's record: written beside and renamed in,
    so the record keeps its content (no inode is written in place)."""
    st = _store(tmp_path / "st")
    record = st / "runs" / "000002" / "run.json"
    os.link(record, tmp_path / "alias.json")
    before = record.read_bytes()
    res = cli("report", "--store", "st", "--format", "json", "-o", "alias.json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert record.read_bytes() == before
    assert b'"runs"' in (tmp_path / "alias.json").read_bytes()
    assert not list(tmp_path.glob(".alias.json.*.tmp"))


def test_a_device_is_still_an_output(tmp_path, cli):
    _store(tmp_path / "st", 1)
    res = cli("report", "--store", "st", "--format", "json", "-o", os.devnull, cwd=tmp_path)
    assert res.exit_code == 0, res.output


def test_check_target_table(tmp_path):
    """The pure rules, one line each (the CLI test above covers the commands)."""
    st = _store(tmp_path / "st", 1)
    inp = tmp_path / "in.txt"
    inp.write_text("x")
    g = outputs.Guarded(stores=(("--store", st),), inputs=(inp,), input_dirs=(tmp_path / "venv",),
                        outputs=(("--html", tmp_path / "page.html"),))
    (tmp_path / "venv").mkdir()
    ok = [tmp_path / "r.md", tmp_path / "in.txt.md"]
    bad = [st / DB, st / "runs", st / "new", inp, tmp_path / "venv" / "x", tmp_path / "page.html",
           tmp_path / "venv" / ".." / "in.txt"]
    for p in ok:
        outputs.check_target(p, "-o", g)
    for p in bad:
        with pytest.raises(InputError):
            outputs.check_target(p, "-o", g)
    with pytest.raises(InputError, match="inside"):
        outputs.check_target(st / "runs" / "wheels", "--dest", outputs.Guarded(), folder=True)
