"""``dsbisect run MATRIX --versions PKG=V --pin REQ``: a matrix's cases at other versions (a YAML
file after ``run`` is never a command line), and a launch line whose program cannot start is an
untestable point with its reason, never a traceback.

On main before this, ``run matrix.yaml --case cpu_smoke --versions deepspeed=0.19.8`` took
``matrix.yaml`` for a command, built the venv, and died in the launch with a rich traceback of
``FileNotFoundError: 'matrix.yaml'``, the run left "running" in the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import offline, write_matrix

from dsbisect.run import matrix as matrix_mod
from dsbisect.core.errors import InputError

TWO_CASES = """\
defaults: {nproc: 1}
cases:
  a:
    script: a.py
    axes: {dsb-toy: ["1.0.0", "1.1.0"], other-pkg: ["2.0", "3.0"]}
  b:
    script: b.py
    axes: {other-pkg: ["2.0"]}
"""


def _cases(tmp_path: Path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("print('x')\n")
    (tmp_path / "m.yaml").write_text(TWO_CASES)
    return matrix_mod.load(tmp_path / "m.yaml")


def _versions(case) -> list[tuple[tuple[str, str], ...]]:
    return [p.versions for p in case.points]


def test_versions_replace_that_axis_and_keep_the_others(tmp_path):
    m = _cases(tmp_path)
    (a,) = matrix_mod.narrowed(m.select(["a"]), ["DSB_toy=1.2.0,1.3.0"], [])
    assert _versions(a) == [
        (("dsb-toy", "1.2.0"), ("other-pkg", "2.0")), (("dsb-toy", "1.3.0"), ("other-pkg", "2.0")),
        (("dsb-toy", "1.2.0"), ("other-pkg", "3.0")), (("dsb-toy", "1.3.0"), ("other-pkg", "3.0")),
    ]
    (both,) = matrix_mod.narrowed(m.select(["a"]), ["dsb-toy=1.0.0", "other-pkg=3.0"], [])
    assert _versions(both) == [(("dsb-toy", "1.0.0"), ("other-pkg", "3.0"))]


def test_a_pin_is_held_in_every_point_and_the_case(tmp_path):
    m = _cases(tmp_path)
    narrowed = matrix_mod.narrowed(m.select(None), [], ["numpy==1.26.4"])
    assert [c.name for c in narrowed] == ["a", "b"]
    for c in narrowed:
        assert "numpy==1.26.4" in c.pins and all("numpy==1.26.4" in p.requirements() for p in c.points)
        assert len(c.points) == len(m.case(c.name).points)


def test_a_pin_replaces_the_case_s_pin_of_that_package(tmp_path):
    for name in ("a.py",):
        (tmp_path / name).write_text("print('x')\n")
    (tmp_path / "m.yaml").write_text("defaults: {nproc: 1, pins: ['numpy==1.26.4', 'tqdm<5']}\n"
                                     "cases:\n  a:\n    script: a.py\n    axes: {dsb-toy: ['1.0.0']}\n")
    (a,) = matrix_mod.narrowed(matrix_mod.load(tmp_path / "m.yaml").select(None), [], ["NumPy==2.4.6"])
    assert a.pins == ("tqdm<5", "NumPy==2.4.6") and a.points[0].pins == ("tqdm<5", "NumPy==2.4.6")


@pytest.mark.parametrize("versions, pins, says", [
    (["dsb-toy=1.0.0"], [], "case 'b' does not move dsb-toy"),  # b has no dsb-toy axis
    ([], ["other-pkg==2.0"], "--pin other-pkg==2.0: case 'a' moves other-pkg"),
    (["dsb-toy="], [], "expected PACKAGE=V1,V2"),
    (["dsb-toy=not a version"], [], "--versions 'dsb-toy=not a version'"),
    ([], ["numpy =="], "--pin 'numpy ==' is not a requirement"),
])
def test_what_cannot_narrow_a_matrix_is_bad_input(tmp_path, versions, pins, says):
    m = _cases(tmp_path)
    with pytest.raises(InputError, match=None) as e:
        matrix_mod.narrowed(m.select(None), versions, pins)
    assert says in str(e.value)


def test_narrowing_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli):
    write_matrix(tmp_path, ["1.0.0"])
    res = cli("run", "matrix.yaml", "--versions", "other=1.0", "--store", str(tmp_path / "st"), cwd=tmp_path)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.strip().count("\n") == 0 and "case 'toy' does not move other" in res.stderr
    assert not (tmp_path / "st").exists() and not (tmp_path / ".dsbisect").exists()


@pytest.mark.slow
def test_a_matrix_runs_at_the_versions_given(tmp_path, cli, wheelhouse, cache_dir):
    write_matrix(tmp_path, ["1.0.0", "1.1.0"], nproc=1)
    res = cli("run", "matrix.yaml", "--versions", "dsb-toy=1.1.0", "--format", "json",
              *offline(wheelhouse, cache_dir), cwd=tmp_path)
    report = json.loads(res.stdout)
    assert [(r["point"], r["case"]) for r in report["runs"]] == [("dsb-toy 1.1.0", "toy")], res.output
    table = cli("run", "matrix.yaml", "--versions", "dsb-toy=1.1.0", *offline(wheelhouse, cache_dir), cwd=tmp_path)
    assert "dsbisect run matrix.yaml --versions dsb-toy=1.1.0" in table.stdout, table.output  # its title


@pytest.mark.slow
def test_a_program_that_cannot_start_is_an_untestable_point_with_its_reason(tmp_path, cli, wheelhouse, cache_dir):
    """A bare name that exec cannot find on the point venv's PATH (a file of the working folder
    is not on PATH): no traceback, the run recorded as a skip that says why, the store usable."""
    (tmp_path / "job.sh").write_text("#!/bin/sh\nexit 0\n")
    res = cli("run", "--versions", "dsb-toy=1.0.0", "--accelerator", "cpu", "--format", "json",
              *offline(wheelhouse, cache_dir), "--", "dsbisect-no-such-program", "--x", cwd=tmp_path)
    assert "Traceback" not in res.output and res.exit_code != 2, res.output
    (run,) = json.loads(res.stdout)["runs"]
    assert run["outcome"] == "skip" and run["evidence"]["skip_cause"] == "start", run
    assert "could not start dsbisect-no-such-program: No such file or directory" in run["reason"], run
    shown = cli("show", str(run["id"]), cwd=tmp_path)
    assert shown.exit_code == 0 and "could not start dsbisect-no-such-program" in shown.stdout, shown.output


@pytest.mark.slow
def test_prefetch_takes_the_versions_run_will_be_given(tmp_path, cli, cache_dir):
    """The README's Slurm block: prefetch the matrix's case at other versions (and the releases
    between them), so that run and bisect with those versions work offline."""
    import toypkg

    house = toypkg.build_wheelhouse(tmp_path / "house", {v: "ok" for v in ("1.0.0", "1.1.0", "1.2.0", "1.3.0")},
                                    dist="dsb-pf")
    matrix = write_matrix(tmp_path, ["1.0.0"], package="dsb-pf", nproc=1)
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))  # no setuptools here
    dest = tmp_path / "wh"
    res = cli("prefetch", "matrix.yaml", "--case", "toy", "--versions", "dsb-pf=1.1.0,1.3.0", "--with-candidates",
              "--dest", str(dest), "--find-links", str(house), "--index-url", (tmp_path / "none").as_uri(),
              "--cache-dir", str(cache_dir), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    got = sorted(w.name.split("-")[1] for w in dest.rglob("dsb_pf-*.whl"))
    assert got == ["1.1.0", "1.2.0", "1.3.0"], (got, res.output)
    bad = cli("prefetch", "matrix.yaml", "--versions", "dsb-pf=1.1.0", "--no-cases", "--tool", "--dest", str(dest),
              cwd=tmp_path)
    assert bad.exit_code == 2 and "cannot go with --no-cases" in bad.stderr, bad.output


@pytest.mark.parametrize("words, says", [
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "matrix.yaml"], "`bisect` as --matrix with --case NAME"),
    (["run", "--versions", "dsb-toy=1.0.0", "--", "job"], "job: a file here, not a program on PATH: give ./job"),
    (["bisect", "dsb-toy", "1.0.0", "1.1.0", "--", "job", "--steps", "3"], "give ./job to run it"),
])
def test_a_bare_name_that_is_a_file_here_and_no_program_is_bad_input(tmp_path, cli, words, says):
    """exec never looks in the working folder: `bisect deepspeed A B matrix.yaml` built a venv per
    release and skipped each with 'could not start matrix.yaml'."""
    write_matrix(tmp_path, ["1.0.0"])
    (tmp_path / "job").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "job").chmod(0o755)
    res = cli(*words, "--store", str(tmp_path / "st"), cwd=tmp_path)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.strip().count("\n") == 0 and says in res.stderr, res.stderr
    assert not (tmp_path / "st").exists()


def test_a_yml_matrix_is_narrowed_too_and_never_run_as_a_command(tmp_path, cli):
    """The other spelling of a YAML file: `run m.yml --versions …` reads it as the matrix."""
    write_matrix(tmp_path, ["1.0.0"])
    (tmp_path / "matrix.yaml").rename(tmp_path / "m.yml")
    res = cli("run", "m.yml", "--versions", "other=1.0", "--store", str(tmp_path / "st"), cwd=tmp_path)
    assert res.exit_code == 2 and "case 'toy' does not move other" in res.stderr, res.output
    assert not (tmp_path / "st").exists()
