"""``dsbisect diff`` and ``dsbisect prefetch`` take every ENV ``bisect --good-env`` takes:
``SPEC@DATE`` (resolved against a local PEP 691 index whose files carry PEP 700 upload times)
and ``git:REV:PATH`` (a file as it was in a commit), not only files; bad input is one line,
exit 2, nothing created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import requirements_history, write_matrix
from test_sources import dated_index  # noqa: F401  (the fixture: dsb-hd-a and dsb-hd-b released on dates)


def _repo(tmp_path: Path) -> Path:
    return requirements_history(tmp_path, "dsb-hg-a==1.0\ndsb-hg-b==1.0\n", "dsb-hg-a==2.0\ndsb-hg-b==1.0\n")


def _changes(stdout: str) -> dict[str, tuple[str | None, str | None]]:
    out = json.loads(stdout)
    return {c["name"]: (c["good"]["version"], c["bad"]["version"]) for c in out["changes"]}


def test_diff_reads_a_file_as_it_was_in_a_commit(tmp_path, cli):
    repo = _repo(tmp_path)
    res = cli("diff", "git:HEAD~1:requirements.txt", "requirements.txt", "--format", "json", cwd=repo)
    assert res.exit_code == 0, res.output
    assert _changes(res.stdout) == {"dsb-hg-a": ("1.0", "2.0")}


@pytest.mark.slow
def test_diff_resolves_two_dates(tmp_path, cli, dated_index):  # noqa: F811
    (tmp_path / "requirements.in").write_text("dsb-hd-a\ndsb-hd-b\n")
    res = cli("diff", "requirements.in@2026-07-01", "requirements.in@2026-10-15", "--index-url", dated_index.url,
              "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert _changes(res.stdout) == {"dsb-hd-a": ("1.0", "1.2"), "dsb-hd-b": ("1.0", "2.0")}
    assert list(tmp_path.iterdir()) == [tmp_path / "requirements.in"]  # nothing written beside it


@pytest.mark.slow
def test_prefetch_fetches_what_two_dates_resolve_to(tmp_path, cli, dated_index):  # noqa: F811
    (tmp_path / "requirements.in").write_text("dsb-hd-a\ndsb-hd-b\n")
    matrix = write_matrix(tmp_path, ["1.0.0"])  # for its settings only: no build pins the index lacks
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))
    res = cli("prefetch", "--good-env", "requirements.in@2026-07-01", "--bad-env", "requirements.in@2026-10-15",
              "--dest", "house", "--index-url", dated_index.url, "--cache-dir", str(tmp_path / "pfcache"),
              cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert sorted(f.name for f in (tmp_path / "house").iterdir()) == [
        "dsb_hd_a-1.0-py3-none-any.whl", "dsb_hd_a-1.2-py3-none-any.whl",
        "dsb_hd_b-1.0-py3-none-any.whl", "dsb_hd_b-2.0-py3-none-any.whl"]


BAD = [
    ("requirements.in@2099-01-01", "is in the future"),
    ("requirements.in@2026-05-01", "dsb-hd-a: nothing that fits was uploaded by then"),  # before any release
    ("git:nosuch:requirements.txt", "has no commit 'nosuch'"),
    ("git:HEAD~1:missing.txt", "missing.txt is not in commit HEAD~1"),
]


def _bad_place(tmp_path: Path) -> Path:
    repo = _repo(tmp_path)
    (repo / "requirements.in").write_text("dsb-hd-a\n")
    return repo


def _nothing_created(repo: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in repo.iterdir() if p.name != ".git") == ["requirements.in", "requirements.txt"]
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
@pytest.mark.parametrize("env, words", BAD)
def test_bad_env_for_diff_is_one_line_exit_2(tmp_path, cli, dated_index, env, words):  # noqa: F811
    repo = _bad_place(tmp_path)
    res = cli("diff", env, "requirements.txt", "--index-url", dated_index.url, cwd=repo)
    assert res.exit_code == 2, res.output
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    _nothing_created(repo, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("env, words", BAD)
def test_bad_env_for_prefetch_is_one_line_exit_2(tmp_path, cli, dated_index, env, words):  # noqa: F811
    repo = _bad_place(tmp_path)
    res = cli("prefetch", "--good-env", env, "--bad-env", "requirements.txt", "--dest", "house",
              "--index-url", dated_index.url, "--cache-dir", str(tmp_path / "cache"), cwd=repo)
    assert res.exit_code == 2, res.output
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    _nothing_created(repo, tmp_path)
