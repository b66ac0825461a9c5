"""sweep and settings: what ``dsbisect run`` runs (a matrix, a matrix at other versions, a command
line), and the shared settings that shape a case and choose where it runs, each checked before
anything is created."""

from __future__ import annotations

import math
from pathlib import Path
import pytest

from conftest import write_matrix
from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator
from dsbisect.run.settings import ExecutorKind, Limits, Placement, Settings
from dsbisect.run.sweep import SweepRequest, cases_of


def test_a_matrix_its_cases_and_its_file(tmp_path, monkeypatch):
    write_matrix(tmp_path, ["1.0.0", "1.1.0"])
    monkeypatch.chdir(tmp_path)
    cases, env, source = cases_of(SweepRequest())
    assert [c.name for c in cases] == ["toy"] and source.name == "matrix.yaml"
    assert [p.label for p in cases[0].points] == ["dsb-toy 1.0.0", "dsb-toy 1.1.0"]
    with pytest.raises(InputError, match="no case named 'nope'"):
        cases_of(SweepRequest(case=["nope"]))


def test_a_matrix_at_other_versions_keeps_its_file_and_moves_its_axis(tmp_path, monkeypatch):
    write_matrix(tmp_path, ["1.0.0", "1.1.0"])
    monkeypatch.chdir(tmp_path)
    request = SweepRequest(args=["matrix.yaml"], versions=["dsb-toy=1.2.0"], pin=["numpy<2"])
    assert request.narrowing
    cases, _, source = cases_of(request)
    assert source.name == "matrix.yaml"
    assert [(p.label, p.pins) for p in cases[0].points] == [("dsb-toy 1.2.0", ("numpy<2",))]


def test_a_command_line_at_versions_is_one_case_of_no_matrix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("pass\n")
    request = SweepRequest(args=["python", "x.py"], versions=["dsb-toy=1.0.0,1.1.0"], nproc=3,
                           accelerator=Accelerator.CPU)
    assert not request.narrowing
    (case,), _, source = cases_of(request)
    assert source is None and case.script.name == "x.py" and case.nproc == 3  # python x.py: a script's ranks
    assert [p.label for p in case.points] == ["dsb-toy 1.0.0", "dsb-toy 1.1.0"]


@pytest.mark.parametrize("request_, said", [
    (SweepRequest(args=["python", "x.py"]), "a command line needs --versions or --pin"),
    (SweepRequest(), "give a MATRIX file, or --versions PKG=V1,V2"),
    (SweepRequest(versions=["dsb-toy=1.0.0"]), "--versions and --pin run your own command: give it after --"),
])
def test_nothing_runnable_is_one_input_error(tmp_path, monkeypatch, request_, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=said):
        cases_of(request_)
    assert list(tmp_path.iterdir()) == []


def test_settings_shape_a_case_with_their_limits(tmp_path, monkeypatch):
    write_matrix(tmp_path, ["1.0.0"], timeout=90)
    monkeypatch.chdir(tmp_path)
    (case,), _, _ = cases_of(SweepRequest())
    shaped = Settings(limits=Limits(timeout=5.0, no_early_hang=True)).shape(case)
    assert (shaped.timeout, shaped.early_hang) == (5.0, False)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(InputError, match="--idle-timeout .*: expected a number of seconds greater than 0"):
            Limits(idle_timeout=bad).apply(case)


def test_placement_here_or_on_slurm():
    from dsbisect.run.local import LocalExecutor
    from dsbisect.run.slurm import SlurmExecutor

    assert Placement().executor_for() is LocalExecutor
    with pytest.raises(InputError, match="need --executor slurm"):
        Placement(partition="gpu").executor_for()
    slurm = Placement(executor=ExecutorKind.slurm, partition="gpu", slurm_arg=["--account=a"]).executor_for()
    assert slurm.func is SlurmExecutor
    options = slurm.keywords["options"]
    assert (options.partition, options.args, options.jobs) == ("gpu", ("--account=a",), 8)


def test_the_grid_title_runs_the_same_points_again(tmp_path, monkeypatch):
    """`run`'s title is a command line that re-runs what ran: every option that decides what runs
    (--case, --versions, --pin, --repeat, the limits that are part of a case) and the matrix as
    named from here; nothing of where things are kept."""
    from dsbisect.run.sweep import Swept, title

    (tmp_path / "sub").mkdir()
    write_matrix(tmp_path / "sub", ["1.0.0", "1.1.0"],
                 extra="  other:\n    script: toy_repro.py\n    axes:\n      dsb-toy: [\"1.0.0\"]\n")
    monkeypatch.chdir(tmp_path)
    request = SweepRequest(args=["sub/matrix.yaml"], case=["toy"], repeat=2)
    cases, _, source = cases_of(request)
    said = title(request, Swept((), tuple(cases), source), Limits(timeout=30, no_early_hang=True))
    assert said == "dsbisect run sub/matrix.yaml --case toy --repeat 2 --timeout 30 --no-early-hang"
    again = SweepRequest(args=["sub/matrix.yaml"], case=["toy"])  # the title's words, as the CLI parses them
    assert [c.key for c in cases_of(again)[0]] == [c.key for c in cases]
    narrowed = SweepRequest(args=["sub/matrix.yaml"], case=["toy"], versions=["dsb-toy=1.1.0"])
    assert title(narrowed, Swept((), tuple(cases), source)) == \
        "dsbisect run sub/matrix.yaml --case toy --versions dsb-toy=1.1.0"


def test_a_plain_python_line_runs_as_given_unless_nproc_asks_for_ranks(tmp_path, monkeypatch):
    """`-- python x.py` is one process and no launcher, as `git bisect run` runs a command (it
    ran as 2 ranks under the deepspeed launcher, about 40x slower); --nproc N asks for N ranks;
    --script keeps a case's 2 ranks. Said before anything runs."""
    from dsbisect.bisect.jobs import CaseChoice
    from dsbisect.run.matrix import how_it_runs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("pass\n")
    (plain,), _, _ = cases_of(SweepRequest(args=["python", "x.py"], versions=["dsb-toy=1.0.0"]))
    assert plain.nproc == 1 and how_it_runs(plain) == (
        "python x.py runs as given: one process, no launcher (as git bisect run would run it); --nproc N runs N "
        "ranks of it under the deepspeed launcher")
    (ranks,), _, _ = cases_of(SweepRequest(args=["python", "x.py"], versions=["dsb-toy=1.0.0"], nproc=2))
    assert ranks.nproc == 2 and how_it_runs(ranks).startswith("python x.py runs as 2 ranks (--nproc 2) under the "
                                                              "deepspeed launcher")
    case, _ = CaseChoice().resolve(["python", "x.py"])
    assert case.nproc == 1
    script, _ = CaseChoice(script=Path("x.py")).resolve(None)
    assert script.nproc == 2 and how_it_runs(script) == ""
