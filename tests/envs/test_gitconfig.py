"""Git on a user's clone runs none of the programs its configuration names (issue 36: the revert
proof ran the clone's filter drivers, 43 calls, and core.fsmonitor; only hooks were off).

A real clone whose configuration (its own, the user's global one, the environment) names a
program at every place git may run one: each writes a line to a marker file when it runs.
Every git operation dsbisect does on a clone leaves the marker empty, and still gives the
right answer (the revert's tree is the release without the commit).
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import git
from dsbisect.envs import builds, gitconfig, gitrepo


def _program(folder: Path, name: str, marker: Path, tail: str = "") -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {marker}\n{tail}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A clone (c1 base, c2 the culprit, c3 after it, tag v1.1.0 at c3) whose config names a
    marker-writing program as a filter, diff, merge driver, fsmonitor, hook, credential helper
    and ssh command; a global config with a filter of its own; GIT_EXTERNAL_DIFF and GIT_DIR-like
    variables in the environment."""
    repo, bin_, home = tmp_path / "clone", tmp_path / "bin", tmp_path / "home"
    for d in (repo, bin_, home):
        d.mkdir()
    marker = tmp_path / "RAN"
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    (repo / "b.dat").write_text("data\n")
    (repo / "c.bin").write_text("bin\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c1")
    git(repo, "tag", "v1.0.0")
    (repo / "a.txt").write_text((repo / "a.txt").read_text().replace("line 5\n", "line 5 culprit\n"))
    git(repo, "commit", "-q", "-am", "c2 the culprit")
    culprit = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.txt").write_text((repo / "a.txt").read_text().replace("line 30\n", "line 30 later\n"))
    (repo / ".gitattributes").write_text("*.txt filter=evil diff=evil merge=evil\n*.dat filter=evil2\n"
                                         "*.bin filter=glob\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c3")
    git(repo, "tag", "-a", "-m", "release", "v1.1.0")
    progs = {n: _program(bin_, n, marker, tail) for n, tail in (
        ("smudge", "cat\n"), ("clean", "cat\n"), ("process", "exit 1\n"), ("textconv", "cat \"$1\"\n"),
        ("merge", "exit 1\n"), ("fsmonitor", "exit 1\n"), ("hook", ""), ("cred", ""), ("ssh", "exit 1\n"),
        ("gpg", "exit 1\n"), ("extdiff", ""), ("glob", "cat\n"))}
    for key, value in (("filter.evil.smudge", progs["smudge"]), ("filter.evil.clean", progs["clean"]),
                       ("filter.evil.required", "true"), ("filter.evil2.process", progs["process"]),
                       ("filter.evil2.required", "true"), ("diff.evil.textconv", progs["textconv"]),
                       ("merge.evil.driver", f"{progs['merge']} %A %O %B"), ("core.fsmonitor", progs["fsmonitor"]),
                       ("credential.helper", f"!{progs['cred']}"), ("core.sshCommand", progs["ssh"]),
                       ("gpg.program", progs["gpg"]), ("log.showSignature", "true"),
                       ("core.hooksPath", bin_ / "hooks"), ("submodule.recurse", "true")):
        git(repo, "config", key, str(value))
    (bin_ / "hooks").mkdir()
    for hook in ("post-checkout", "pre-commit", "prepare-commit-msg", "reference-transaction", "post-index-change"):
        _program(bin_ / "hooks", hook, marker)
        _program(repo / ".git" / "hooks", hook, marker)
    (home / ".gitconfig").write_text(f"[filter \"glob\"]\n\tsmudge = {progs['glob']}\n\trequired = true\n"
                                     "[safe]\n\tdirectory = *\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(progs["extdiff"]))
    monkeypatch.setenv("GIT_SSH_COMMAND", str(progs["ssh"]))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hooksPath'='" + str(bin_ / "hooks") + "'")
    gitconfig._quiet.cache_clear()
    marker.unlink(missing_ok=True)
    return repo, culprit, marker


def _ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def test_reading_a_clone_runs_none_of_its_programs(hostile):
    repo, culprit, marker = hostile
    assert gitrepo.check_repo(repo) == repo.resolve()
    assert gitrepo.tag_for(repo, "pkg", "1.1.0") == "v1.1.0"
    chain = gitrepo.commits_between(repo, "v1.0.0", "v1.1.0")
    assert [c.subject for c in chain] == ["c2 the culprit", "c3"]
    assert gitrepo.commit(repo, culprit).describe.startswith("v1.0.0")
    assert gitrepo.is_ancestor(repo, "v1.0.0", "v1.1.0")
    assert gitrepo.git(repo, "log", "-p", "-1", culprit, keep=gitrepo.proc.DATA).ok  # textconv, external diff
    assert gitrepo.git(repo, "status", "--porcelain").ok  # fsmonitor, index refresh
    assert _ran(marker) == ""


def test_the_revert_proof_runs_none_of_the_clones_programs_and_is_right(hostile):
    """A revert that must merge a.txt (changed again after the culprit): the merge driver, the
    filters on checkout, the hooks of the scratch worktree: none runs; the tree is the release
    without the culprit's line."""
    repo, culprit, marker = hostile
    onto = gitrepo.resolve(repo, "v1.1.0")
    rev = gitrepo.revert_tree(repo, culprit, onto)
    assert rev.clean, rev
    assert _ran(marker) == ""
    text = gitrepo.git(repo, "cat-file", "-p", f"{rev.tree}:a.txt").stdout
    assert "culprit" not in text and "line 30 later" in text
    assert gitrepo.worktrees(repo) == (str(repo.resolve()),)


def test_exporting_a_commit_to_build_runs_no_filter(hostile, tmp_path):
    repo, culprit, marker = hostile
    builds.export_commit(repo, gitrepo.resolve(repo, "v1.1.0"), tmp_path / "out", ())
    assert (tmp_path / "out" / "a.txt").read_text().count("\n") == 40
    assert _ran(marker) == ""


def test_the_clone_as_a_user_runs_it_does_run_them(hostile):
    """The control: plain git in that clone runs the programs (so the tests above can fail)."""
    repo, culprit, marker = hostile
    os.environ.pop("GIT_CONFIG_PARAMETERS", None)
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD", "a.txt", "c.bin"],
                          capture_output=True).stdout
    assert tarfile.open(fileobj=io.BytesIO(data)).getnames() == ["a.txt", "c.bin"]
    subprocess.run(["git", "-C", str(repo), "log", "-p", "-1"], capture_output=True)
    ran = _ran(marker)
    assert "smudge" in ran and "glob" in ran and "textconv" in ran, ran


def test_the_quiet_options_name_every_driver_found(hostile):
    repo, _, _ = hostile
    args = " ".join(gitconfig.quiet_args(repo))
    for expected in ("filter.evil.smudge=", "filter.evil.required=false", "filter.evil2.process=",
                     "filter.glob.smudge=", "diff.evil.textconv=cat", "merge.evil.driver=git merge-file",
                     "core.hooksPath=/dev/null", "core.fsmonitor=false", "protocol.allow=never", "credential.helper="):
        assert expected in args, expected
    env = gitconfig.environment()
    assert "GIT_EXTERNAL_DIFF" not in env and "GIT_CONFIG_PARAMETERS" not in env and env["GIT_TERMINAL_PROMPT"] == "0"
