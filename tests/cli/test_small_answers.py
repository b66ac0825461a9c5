"""Issue 23 item 10: the small answers a new user meets first.

A store whose index is gone points to ``store repair``; a mark of a release that does not
exist, or that no bisection of the case tests, is refused; ``bisect`` with nothing to run says
what to give; ``versions PACKAGE GOOD`` runs to the latest release; ``envs list`` shows every
requirement whole at 80 columns.  Bad input: one line, exit 2, nothing created.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from dsbisect.render import report as rep
from dsbisect.envs.venvs import CachedEnv
from dsbisect.core.model import Outcome, Point
from dsbisect.store.store import DB, Store
from dsbisect.records.bisections import AskedFor, BisectionStatus
from packaging.version import Version


def _one_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    return lines[0]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ------------------------------------------------------------------ a lost index


def _store_with_runs(folder: Path, n: int = 2) -> None:
    st = Store(folder)
    for i in range(n):
        rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", f"1.{i}.0"),)), "env", 1)
        st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.save_bisection("b1", "dsb-toy", "1.0.0", "1.1.0", AskedFor.from_json({"case": "toy"}), BisectionStatus.DONE,
                      {"candidates": ["1.0.0", "1.1.0"]})
    st.close()


@pytest.mark.parametrize("left", ["records", "bisections only", "folders without records", "the lock only"])
def test_a_store_without_its_index_points_to_store_repair(tmp_path, cli, left):
    store = tmp_path / "st"
    _store_with_runs(store)
    for p in store.glob(f"{DB}*"):
        p.unlink()
    if left != "records":
        for p in store.glob("runs/*/run.json"):
            p.unlink()
    if left in ("folders without records", "the lock only"):
        for p in store.glob("bisections/*"):
            p.unlink()
    if left == "the lock only":
        for p in store.glob("runs/*"):
            p.rmdir()
    before = _tree(tmp_path)
    for args in (["report"], ["show", "1"], ["log"]):
        res = cli(*args, "--store", str(store))
        line = _one_line(res)
        assert res.exit_code == 1, res.output
        assert f"'dsbisect store repair --store {store}'" in line and "dsbisect run' first" not in line, line
    assert _tree(tmp_path) == before  # nothing made, the index included


def test_a_folder_that_never_was_a_store_is_still_no_store(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "empty", tmp_path / "absent"):
        res = cli("report", "--store", str(folder))
        assert res.exit_code == 2 and "no dsbisect store in" in _one_line(res)
    assert not (tmp_path / "absent").exists()


# ------------------------------------------------------------------ mark


def test_a_mark_outside_every_bisection_of_the_case_is_named_pure():
    from dsbisect.bisect.marks import out_of_range

    ranges = [("0.18.1", "0.18.2", "0.18.5")]
    assert out_of_range("deepspeed", "0.18.2", "c", ranges) == ""
    assert out_of_range("deepspeed", "0.18.02", "c", ranges) == ""  # the same version, spelt otherwise
    assert out_of_range("deepspeed", "9.9.9", "c", []) == ""  # no bisection: nothing to hold it to
    for v in ("9.9.9", "0.18.3", "0.1"):  # past the end, a gap (yanked, pre-release), before the start
        why = out_of_range("deepspeed", v, "c", ranges)
        assert why.startswith(f"deepspeed=={v}: not a release that the bisection of c tests (0.18.1 … 0.18.5 (3")
    assert out_of_range("ds", "2.0", "c", [("1.0", "1.1"), ("2.0", "2.1")]) == ""


def test_a_mark_of_no_release_is_named_pure():
    from dsbisect.bisect.marks import not_released

    listed = ([Version("1.0.0"), Version("1.1.0")], "the wheelhouse /w")
    assert not_released("x", "1.1", listed) == ""
    assert not_released("x", "9.9.9", None) == ""  # the index could not tell: never refused for that
    assert not_released("x", "9.9.9", listed) == ("x==9.9.9: no such release on the wheelhouse /w (it has 2, 1.0.0 … "
                                                  "1.1.0); check the version")


def _runs(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "runs").iterdir()) if (store / "runs").is_dir() else []


def test_mark_refuses_a_release_no_bisection_of_the_case_tests(tmp_path, cli):
    (tmp_path / "rep.py").write_text("print('hi')\n")
    st = Store(tmp_path / ".dsbisect")
    st.save_bisection("b1", "dsb-toy", "1.0.0", "1.3.0", AskedFor.from_json({"case": "rep"}), BisectionStatus.DONE,
                      {"candidates": ["1.0.0", "1.1.0", "1.3.0"]})
    st.close()
    for v in ("9.9.9", "1.2.0", "0.9"):
        res = cli("mark", "bad", f"dsb-toy=={v}", "--script", "rep.py", cwd=tmp_path)
        assert res.exit_code == 2 and "not a release that the bisection of rep tests" in _one_line(res)
        assert _runs(tmp_path / ".dsbisect") == []
    res = cli("mark", "bad", "dsb-toy==1.1.0", "dsb-toy==9.9.9", "--script", "rep.py", cwd=tmp_path)
    assert res.exit_code == 2 and _runs(tmp_path / ".dsbisect") == []  # all checked before any is recorded
    res = cli("mark", "bad", "dsb-toy==1.3.0", "--script", "rep.py", cwd=tmp_path)
    assert res.exit_code == 0, res.output


def test_mark_refuses_a_release_the_index_does_not_have(tmp_path, cli, monkeypatch):
    house = tmp_path / "house"
    house.mkdir()
    for v in ("1.0.0", "1.1.0"):
        (house / f"dsb_mark-{v}-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setenv("UV_OFFLINE", "1")  # the user's own uv settings: a wheelhouse, no network
    monkeypatch.setenv("UV_FIND_LINKS", str(house))
    work = tmp_path / "w"
    work.mkdir()
    (work / "rep.py").write_text("print('hi')\n")
    res = cli("mark", "bad", "dsb-mark==9.9.9", "--script", "rep.py", cwd=work)
    line = _one_line(res)
    assert res.exit_code == 2 and "dsb-mark==9.9.9: no such release on" in line and "1.0.0 … 1.1.0" in line, line
    assert _tree(work) == ["rep.py"]
    res = cli("mark", "bad", "dsb-mark==1.1.0", "--script", "rep.py", cwd=work)
    assert res.exit_code == 0, res.output
    res = cli("mark", "bad", "dsb-other==9.9.9", "--script", "rep.py", cwd=work)  # not listed anywhere: cannot tell
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------ bisect


@pytest.mark.parametrize("args", [["bisect", "deepspeed", "0.18.6", "0.18.7"],
                                  ["bisect", "deepspeed", "0.18.6", "0.18.7", "--matrix", "cases.yaml"],
                                  ["mark", "bad", "deepspeed==0.18.7"]])
def test_nothing_to_run_says_what_to_give(tmp_path, cli, args):
    res = cli(*args, cwd=tmp_path)
    line = _one_line(res)
    assert res.exit_code == 2 and "give --case NAME, --script FILE or -- COMMAND" in line, line
    assert "no such matrix file" not in line
    assert _tree(tmp_path) == []


def test_run_with_nothing_to_run_says_what_to_give(tmp_path, cli):
    res = cli("run", cwd=tmp_path)
    line = _one_line(res)
    assert res.exit_code == 2 and "give a MATRIX file, or --versions PKG=V1,V2 (or --pin REQ) and -- COMMAND" in line
    assert _tree(tmp_path) == []
    res = cli("run", "other.yaml", cwd=tmp_path)  # a file named: that file is missing
    assert res.exit_code == 2 and "other.yaml: no such matrix file" in _one_line(res)


def test_a_named_case_without_its_matrix_still_names_the_file(tmp_path, cli):
    res = cli("bisect", "deepspeed", "0.18.6", "0.18.7", "--case", "toy", cwd=tmp_path)
    assert res.exit_code == 2 and "matrix.yaml: no such matrix file" in _one_line(res)


# ------------------------------------------------------------------ versions


def test_versions_with_a_good_end_only_runs_to_the_latest(tmp_path, cli):
    for v in ("1.0.0", "1.1.0", "1.2.0rc1", "1.2.0", "2.0.0"):
        (tmp_path / f"dsb_toy-{v}-py3-none-any.whl").write_bytes(b"")
    res = cli("versions", "dsb-toy", "1.1.0", "--offline", "--find-links", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert res.stdout.split() == ["1.1.0", "1.2.0", "2.0.0"]
    both = cli("versions", "dsb-toy", "1.1.0", "2.0.0", "--offline", "--find-links", str(tmp_path))
    assert both.stdout == res.stdout
    res = cli("versions", "dsb-toy", "9.0.0", "--offline", "--find-links", str(tmp_path))
    assert res.exit_code == 2 and "newer than bad 2.0.0" in _one_line(res)


# ------------------------------------------------------------------ envs list


@pytest.mark.parametrize("width", [80, 100])
def test_envs_list_at_80_columns_shows_every_requirement_whole(tmp_path, width):
    reqs = ("deepspeed==0.18.7", "transformers==4.46.3", "nvidia-cudnn-cu12==9.1.0.70", "accelerate==1.2.1")
    envs = [CachedEnv("3f9a1c2b7d4e5f60", tmp_path, "layered", reqs, None, (("torch", "2.13.0", "2.5.1"),),
                      812_000_000, 95.3),
            CachedEnv("0014f3a64d83582f", tmp_path, "isolated", reqs[:1], "deepspeed@" + "a" * 40, (), 1_812_000_000,
                      195.3)]
    console = Console(width=width, record=True, color_system=None)
    console.print(rep.envs_table(envs))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    words = text.split()
    for whole in (*reqs, "3f9a1c2b7d4e5f60", "0014f3a64d83582f", "layered", "isolated", "95.3", "195.3", "1812",
                  "2.13.0→2.5.1"):
        assert whole in words, (whole, text)
    assert "…" not in text
    assert "a" * 40 in "".join(text.split())  # the commit, folded over lines, is all there
