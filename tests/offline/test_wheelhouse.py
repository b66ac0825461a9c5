"""wheelhouse: what ``dsbisect prefetch`` is asked to fetch, checked before anything is downloaded
or created; bad input is one InputError."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_matrix
from dsbisect.core.errors import InputError
from dsbisect.core.model import IndexOptions
from dsbisect.offline.wheelhouse import PrefetchRequest, environments, matrix_of, plan
from dsbisect.run.settings import Sources


@pytest.mark.parametrize("request_, sources, said", [
    (PrefetchRequest(case=["toy"], cases_too=False), Sources(), "--case names cases to fetch"),
    (PrefetchRequest(hold=["torch"]), Sources(), "--hold needs --good-env and --bad-env"),
    (PrefetchRequest(good_env=Path("good.txt")), Sources(), "give both --good-env and --bad-env"),
    (PrefetchRequest(versions=["dsb-toy=1.0.0"], cases_too=False, tool=True), Sources(),
     "--versions changes the cases' points"),
    (PrefetchRequest(), Sources(offline=True), "it cannot run --offline itself"),
    (PrefetchRequest(dest=Path("matrix.yaml/wh")), Sources(), "--dest matrix.yaml/wh: .*matrix.yaml is a file"),
    (PrefetchRequest(git_repo=Path("clone")), Sources(), "--git-repo and --commits OLD..NEW go together"),
])
def test_bad_input_is_one_error_and_nothing_is_made(tmp_path, monkeypatch, request_, sources, said):
    write_matrix(tmp_path, ["1.0.0"])
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(InputError, match=said):
        plan(request_, sources)
    assert sorted(tmp_path.iterdir()) == before


def test_without_cases_the_matrix_is_read_only_when_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert matrix_of(PrefetchRequest(cases_too=False), cases_too=False) is None
    assert environments(PrefetchRequest(), IndexOptions()) is None
    write_matrix(tmp_path, ["1.0.0"])
    assert [c.name for c in matrix_of(PrefetchRequest(cases_too=False), cases_too=False).cases] == ["toy"]
