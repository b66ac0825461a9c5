"""Tags and commit ranges of a real (tiny) git repository, linear and with a release branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git
from dsbisect.envs import gitrepo
from dsbisect.core.errors import InputError


def _commit(repo: Path, msg: str) -> str:
    (repo / "f.txt").write_text(msg)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path):
    """main: c1 - c2 - c3 - c4 (tag v1.1.0); release branch off c1: r1 (tag v1.0.0)."""
    git(tmp_path, "init", "-q", "-b", "main")
    c = {1: _commit(tmp_path, "c1")}
    git(tmp_path, "checkout", "-q", "-b", "release")
    c["r1"] = _commit(tmp_path, "r1 (release only)")
    git(tmp_path, "tag", "v1.0.0")
    git(tmp_path, "checkout", "-q", "main")
    for i in (2, 3, 4):
        c[i] = _commit(tmp_path, f"c{i}")
    git(tmp_path, "tag", "-a", "-m", "release", "v1.1.0")
    return tmp_path, c


def test_tags_and_first_parent_range(repo):
    path, c = repo
    assert gitrepo.tag_for(path, "pkg", "1.1.0") == "v1.1.0"
    assert [x.subject for x in gitrepo.commits_between(path, c[1], "v1.1.0")] == ["c2", "c3", "c4"]
    assert gitrepo.commit(path, "v1.1.0").hash == c[4]


def test_release_branch_bisects_from_the_merge_base(repo):
    path, c = repo
    assert not gitrepo.is_ancestor(path, "v1.0.0", "v1.1.0")
    assert gitrepo.is_ancestor(path, c[1], "v1.1.0")
    assert gitrepo.merge_base(path, "v1.0.0", "v1.1.0") == c[1]


def test_missing_tag_is_bad_input(repo):
    path, _ = repo
    with pytest.raises(InputError, match="no tag for pkg 9.9"):
        gitrepo.tag_for(path, "pkg", "9.9")
