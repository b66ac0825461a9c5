"""jobs: what ``dsbisect bisect`` asks for, checked in the order the user reads the errors, before
the report file, the store or the cache is touched; ``versions``'s GOOD without BAD."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsbisect.bisect.jobs import (
    BisectRequest,
    CaseChoice,
    EnvPair,
    Invocation,
    SearchChoice,
    release_request,
    releases,
)
from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator
from dsbisect.envdiff.jobs import env_request
from dsbisect.run.settings import ExecutorKind, Placement, Settings, Sources


@pytest.mark.parametrize("request_, typed, said", [
    (BisectRequest(good="1", search=SearchChoice(confidence=1.0)), (), "--confidence 1: give a probability between"),
    (BisectRequest(good="1", search=SearchChoice(confidence=0.9, repeat=2)), (), "--confidence and --repeat"),
    (BisectRequest(good="auto", search=SearchChoice(confidence=0.9)), (), "--confidence needs a GOOD release"),
    (BisectRequest(pair=EnvPair(good_env=Path("a")), search=SearchChoice(confidence=0.9)), (),
     "--confidence is for PACKAGE GOOD BAD"),
    (BisectRequest(pair=EnvPair(bad_env="b")), (), "--bad-env needs --good-env"),
    (BisectRequest(pair=EnvPair(hold=["torch"])), (), "--hold needs --good-env"),
    (BisectRequest(package="x", command=["python", "t.py"], pair=EnvPair(Path("a"), Path("b"))),
     ("x", "--good-env", "a", "--bad-env", "b", "--", "python", "t.py"), "not both"),
])
def test_what_is_checked_before_the_report_file(request_, typed, said):
    with pytest.raises(InputError, match=said):
        request_.check(Invocation((), typed))


def test_two_environments_then_their_command_are_not_package_good_bad():
    request = BisectRequest(package="python", good="t.py", pair=EnvPair(Path("a"), Path("b")))
    request.check(Invocation((), ("--good-env", "a", "--bad-env", "b", "--", "python", "t.py")))
    assert request.words == ["python", "t.py"]


def test_what_to_run_is_one_of_a_case_a_script_or_a_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="give one of --case, --script or -- COMMAND"):
        CaseChoice(case="c", script=Path("s.py")).resolve(None)
    with pytest.raises(InputError, match="give --case NAME, --script FILE or -- COMMAND: what to run"):
        CaseChoice().resolve(None)
    (tmp_path / "s.py").write_text("pass\n")
    case, _ = CaseChoice(script=Path("s.py"), nproc=3, accelerator=Accelerator.CPU).resolve(None)
    assert (case.name, case.nproc, case.accelerator) == ("s", 3, Accelerator.CPU)


def test_a_release_request_is_checked_whole_and_keeps_its_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text("pass\n")
    what = CaseChoice(script=Path("s.py"), pin=["numpy<2"])
    with pytest.raises(InputError, match="give PACKAGE GOOD BAD"):
        release_request(BisectRequest(package="x", what=what), Invocation(), Settings())
    with pytest.raises(InputError, match="--signature needs some text"):
        release_request(BisectRequest("x", "1", "2", what=what, search=SearchChoice(signature=" ")),
                        Invocation(), Settings())
    with pytest.raises(InputError, match="need --executor slurm"):
        release_request(BisectRequest("x", "1", "2", what=what), Invocation(), Settings(placement=Placement(jobs=2, partition="p")))
    checked = release_request(BisectRequest("x", "1", "2", what=what), Invocation(("x", "1", "2")),
                              Settings(placement=Placement(executor=ExecutorKind.slurm)))
    assert (checked.request.pins, checked.request.argv) == (("numpy<2",), ("x", "1", "2"))
    assert checked.executor is not None
    assert list(tmp_path.iterdir()) == [tmp_path / "s.py"]  # nothing created


def test_two_environments_pin_everything(tmp_path):
    request = BisectRequest(pair=EnvPair(tmp_path / "a", tmp_path / "b"), pre=True)
    with pytest.raises(InputError, match="--pin, --pre and --include-yanked are for PACKAGE GOOD BAD"):
        env_request(request, Invocation(), Settings())


def test_versions_needs_both_ends_or_neither(tmp_path):
    (tmp_path / "wh").mkdir()
    with pytest.raises(InputError, match="give both GOOD and BAD, or neither"):
        releases("x", None, "2", Sources(offline=True, find_links=[tmp_path / "wh"]), False)
