"""prefetch checks, then creates (issue 36: an option-like ref in --commits was refused, but
after --dest was made): every --commits end is resolved in the clone before the wheelhouse
or the cache exists."""

from __future__ import annotations

import pytest

from conftest import git


@pytest.mark.parametrize("commits, words", [
    ("--output=x..v1", "'--output=x' is not a commit name"),
    ("v1..-n", "'-n' is not a commit name"),
    ("nope..v1", "has no commit 'nope'"),
    ("v1..", "expected OLD..NEW"),
    ("..v1", "expected OLD..NEW"),
])
def test_a_bad_commit_range_creates_nothing(tmp_path, cli, commits, words):
    clone = tmp_path / "clone"
    clone.mkdir()
    git(clone, "init", "-q")
    git(clone, "commit", "-q", "--allow-empty", "-m", "a")
    git(clone, "tag", "v1")
    res = cli("prefetch", "--no-cases", "--git-repo", str(clone), "--commits", commits, "--dest", "wh",
              "--cache-dir", "cache", cwd=tmp_path)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "wh").exists() and not (tmp_path / "cache").exists()
