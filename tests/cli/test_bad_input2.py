"""Bad input, second battery: one clear line on stderr, exit 2, nothing created, never a
traceback; and renderers that show an odd record as far as it goes instead of crashing.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import offline, write_matrix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dsbisect.render import report as rep
from dsbisect.records.run import Evidence, RunFacts
from dsbisect.core.model import Outcome, Point
from dsbisect.store.store import Store


def _one_line_exit_2(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


# ------------------------------------------------------- matrix.yaml values


@pytest.mark.parametrize("settings_text, where", [
    ('    env: {A: "x\\0y"}\n', "cases.toy.env.A"),
    ('    args: ["a\\0b"]\n', "cases.toy.args.0"),
    ('    env: {"A\\0": x}\n', "cases.toy.env"),
    ('    launcher_args: ["--x\\0"]\n', "cases.toy.launcher_args.0"),
    ('    gpu: {H200: {env: {B: "\\0"}}}\n', "cases.toy.gpu.H200.env.B"),
    ('    env: {"A=B": x}\n', "'A=B' is not a variable name"),
    ('    env: {"": x}\n', "'' is not a variable name"),
    ('    gpu: {H200: {env: {"C=D": x}}}\n', "'C=D' is not a variable name"),
])
def test_a_matrix_value_no_program_can_take_is_refused_before_anything_runs(tmp_path, cli, settings_text, where):
    """NUL bytes and '=' in variable names passed validation on main, then broke mid-run with
    the store created and the run left running."""
    path = write_matrix(tmp_path, ["1.0.0"])
    text = path.read_text().replace("  toy:\n", "  toy:\n" + settings_text, 1)
    assert settings_text in text
    path.write_text(text)
    res = cli("run", str(path), "--store", str(tmp_path / "st"), "--offline", cwd=tmp_path)
    _one_line_exit_2(res, where)
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("args", [
    ["run", "--versions", "dsb-toy=1.0.0", "--pin", "x==1\0", "--", "python", "x.py"],
    ["run", "--versions", "dsb-toy=1.0.0", "--", "python", "x.py", "a\0b"],
    ["bisect", "dsb-toy", "1.0.0", "1.1.0", "--", "python", "x.py", "\0"],
    ["mark", "good", "dsb-toy==1.0.0", "--", "python", "x\0.py"],
    ["report", "--case", "a\0"],
])
def test_a_nul_byte_on_the_command_line_is_one_line_and_exit_2(tmp_path, cli, args):
    (tmp_path / "x.py").write_text("pass\n")
    res = cli(*args, "--store", str(tmp_path / "st"), cwd=tmp_path) if args[0] != "report" else \
        cli(*args, "--store", str(tmp_path / "st"), cwd=tmp_path)
    _one_line_exit_2(res, "NUL byte")
    assert not (tmp_path / "st").exists()


def test_a_replayed_line_with_a_nul_byte_is_refused(tmp_path, cli):
    (tmp_path / "x.log").write_text("dsbisect mark good dsb-toy==1.0.0 -- python 'x\0.py'\n")
    res = cli("replay", "x.log", "--store", str(tmp_path / "st"), cwd=tmp_path)
    _one_line_exit_2(res, "x.log:1", "NUL byte")
    assert not (tmp_path / "st").exists()


# ------------------------------------------------------- numbers and paths


def _store_with_a_run(tmp_path: Path) -> Path:
    st = Store(tmp_path / "st")
    rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), "env", 1)
    st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.close()
    return tmp_path / "st"


@pytest.mark.parametrize("run_id", ["99999999999999999999", "9223372036854775808", "0", "-5"])
def test_show_of_a_run_id_beyond_any_run_says_there_is_none(tmp_path, cli, run_id):
    store = _store_with_a_run(tmp_path)
    res = cli("show", "--store", str(store), "--", run_id)
    _one_line_exit_2(res, f"no run {run_id}")


@pytest.mark.parametrize("args, words", [
    (["show", "1", "--lines", "-3"], ["--lines"]),
    (["run", "--versions", "dsb-toy=1.0.0", "--jobs", "99999999999999999999", "--", "python", "x.py"], ["--jobs"]),
    (["run", "--versions", "dsb-toy=1.0.0", "--repeat", "99999999999999999999", "--", "python", "x.py"], ["--repeat"]),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--confirm", "99999999999999999999", "--", "python", "x.py"],
     ["--confirm"]),
    (["envs", "prune", "--older-than", "nan"], ["--older-than"]),
])
def test_numbers_out_of_range_are_one_line_and_exit_2(tmp_path, cli, args, words):
    (tmp_path / "x.py").write_text("pass\n")
    (tmp_path / "cache" / "envs").mkdir(parents=True)
    store = _store_with_a_run(tmp_path)
    extra = ["--cache-dir", str(tmp_path / "cache")] if args[0] == "envs" else ["--store", str(store)]
    res = cli(*args[:2], *extra, *args[2:], cwd=tmp_path)
    _one_line_exit_2(res, *words)


@pytest.mark.parametrize("target", ["nonexistent/dir/x.md", "afile/x.md", "."])
@pytest.mark.parametrize("command", [
    ["report"], ["report", "--format", "json"],
    ["run", "--versions", "dsb-toy=1.0.0", "--offline", "--", "python", "x.py"],
    ["bisect", "dsb-toy", "1.0.0", "1.1.0", "--offline", "--", "python", "x.py"],
    ["snapshot-base"],
])
def test_an_output_file_that_cannot_be_written_is_refused_before_anything_runs(tmp_path, cli, command, target):
    """On main, report crashed with a traceback and bisect crashed after the whole bisection."""
    (tmp_path / "x.py").write_text("pass\n")
    (tmp_path / "afile").write_text("")
    store = _store_with_a_run(tmp_path) if command[0] == "report" else tmp_path / "fresh"
    extra = [] if command[0] == "snapshot-base" else ["--store", str(store)]
    cut = command.index("--") if "--" in command else len(command)
    res = cli(*command[:cut], *extra, "-o", str(tmp_path / target), *command[cut:], cwd=tmp_path)
    _one_line_exit_2(res, "--output")
    assert not (tmp_path / "fresh").exists()


@pytest.mark.slow  # a resolution venv and a download: 3 s
def test_prefetch_without_a_matrix_fetches_what_it_is_asked_for(tmp_path, cli, simple_index):
    """The README's `prefetch --no-cases ...` said 'matrix.yaml: no such matrix file' on main."""
    import toypkg

    simple_index.add(toypkg.build_wheel(tmp_path / "w", "3.0.0", "ok", dist="dsb-nomatrix"))
    for dist, version in (("setuptools", "70.0.0"), ("wheel", "0.43.0"), ("pip", "24.0")):  # the build pins
        simple_index.add(toypkg.build_wheel(tmp_path / "w", version, "ok", dist=dist, module=f"toy_{dist}"))
    res = cli("prefetch", "--no-cases", "--extra", "dsb-nomatrix==3.0.0", "--index-url", simple_index.url,
              "--dest", str(tmp_path / "wh"), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert [p.name for p in (tmp_path / "wh").glob("dsb_nomatrix-3.0.0-*.whl")], res.output
    res = cli("prefetch", "--no-cases", "--case", "x", "--dest", str(tmp_path / "wh2"), cwd=tmp_path)
    _one_line_exit_2(res, "--case")
    res = cli("prefetch", "missing.yaml", "--no-cases", "--tool", "--dest", str(tmp_path / "wh3"), cwd=tmp_path)
    _one_line_exit_2(res, "missing.yaml")  # a matrix named is still read


# ------------------------------------------------------- odd values in a record

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                       lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                       max_leaves=8)
FACT_KEYS = ["command", "inputs", "host", "versions", "python", "torch", "cuda", "nccl", "gpus", "shadowed", "index",
             "accelerator", "nvcc"]
EVIDENCE_KEYS = ["notes", "escaped", "manual", "note", "survivors", "shm_removed", "replayed"]
ODD = st.one_of(st.none(), st.text(max_size=5), st.integers(), st.floats(), st.lists(st.integers(), max_size=2))


def _render_everything(r) -> None:
    from dsbisect.render.show import render_run

    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    g = rep.grid([r])
    console.print(rep.grid_renderable(g, "t"))
    rep.grid_markdown(g, "t")
    json.dumps(rep.grid_json(g))
    console.print(render_run(r))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(facts=st.dictionaries(st.sampled_from(FACT_KEYS), JSONISH, max_size=5) | JSONISH,
       evidence=st.dictionaries(st.sampled_from(EVIDENCE_KEYS), JSONISH, max_size=4) | JSONISH,
       seconds=ODD, exit_code=ODD, attempt=ODD, started=ODD)
def test_renderers_show_an_odd_record_without_a_traceback(tmp_path_factory, facts, evidence, seconds, exit_code,
                                                          attempt, started):
    """A record whose fields hold other types than dsbisect writes (a hand-edited row, another
    version's): every report renders it."""
    base = _base_record(tmp_path_factory)
    odd = replace(base, facts=RunFacts.from_json(facts), evidence=Evidence.from_json(evidence), seconds=seconds, exit_code=exit_code, attempt=attempt,
                  started=started)
    _render_everything(odd)


_BASE: list = []


def _base_record(factory):
    if not _BASE:
        st_ = Store(factory.mktemp("odd"))
        rid = st_.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), "env", 1)
        st_.finish_run(rid, Outcome.FAIL, 1, 1.0, reason="boom")
        _BASE.append(st_.run(rid))
    return _BASE[0]


def test_odd_values_read_from_a_database_row_do_not_crash_report_or_show(tmp_path, cli):
    """The row itself edited (SQLite keeps any type in any column): report and show still work."""
    import sqlite3

    store = _store_with_a_run(tmp_path)
    db = sqlite3.connect(store / "dsbisect.sqlite3")
    db.execute("""UPDATE runs SET seconds='abc', exit_code='x', started='y', attempt='z', finished='q',
                  facts='{"shadowed": [[1]], "host": "str", "inputs": [{"path": 5, "copy": 7, "bytes": "x"}],
                          "command": "notalist", "versions": {"torch": 5}}',
                  evidence='{"notes": "str", "escaped": 5, "manual": 1, "note": 3}'""")
    db.commit()
    db.close()
    for command in (["report"], ["report", "--format", "json"], ["report", "--format", "markdown"], ["show", "1"]):
        res = cli(*command, "--store", str(store))
        assert "Traceback" not in res.output, (command, res.output)
        # rendered as far as it goes, or (the store's call) the row named as unreadable, in one line each
        assert res.exit_code == 0 or (res.exit_code in (1, 2) and "run 1" in res.stderr), (command, res.output)


@pytest.mark.parametrize("args, words", [
    (["run", "--versions", "dsb-toy=1.0.0", "--cache-dir", "afile", "--", "python", "x.py"], ["--cache-dir", "not a folder"]),
    (["run", "--versions", "dsb-toy=1.0.0", "--cache-dir", "afile/below", "--", "python", "x.py"], ["--cache-dir"]),
    (["envs", "list", "--cache-dir", "afile"], ["--cache-dir"]),
    (["prefetch", "--no-cases", "--tool", "--dest", "afile"], ["--dest", "not a folder"]),
    (["prefetch", "--no-cases", "--tool", "--dest", "afile/wh"], ["--dest"]),
    (["run", "--versions", "dsb-toy=1.0.0", "--", "./afile"], ["./afile", "not an executable"]),
    (["run", "--versions", "dsb-toy=1.0.0", "--", "./adir"], ["./adir", "not an executable"]),
])
def test_a_path_of_the_wrong_kind_is_one_line_before_anything_is_made(tmp_path, cli, wheelhouse, args, words):
    """On main: NotADirectoryError, FileExistsError, PermissionError tracebacks (the last one
    mid-run, with the store made)."""
    (tmp_path / "x.py").write_text("pass\n")
    (tmp_path / "afile").write_text("#!/bin/sh\n")  # not executable
    (tmp_path / "adir").mkdir()
    store = ["--store", str(tmp_path / "st"), *offline(wheelhouse)] if args[0] == "run" else []
    res = cli(*args[:1], *store, *args[1:], cwd=tmp_path)
    _one_line_exit_2(res, *words)
    assert not (tmp_path / "st").exists()
