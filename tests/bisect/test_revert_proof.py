"""The revert proof: the first bad commit reverted on top of the first bad release, and run.

Fast: the parsing of git's conflict list, the proof's verdict and wording, the key of a
reverted point, and the git mechanics on a real tiny clone (clean, conflicting, merge
commit, interrupted), each leaving the clone as it was.  Slow: real bisections of a toy
package's git history down to the commit and its proof (one rank, no launcher).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import toypkg
from conftest import commit, git, make_case, pyproject, write_matrix
from dsbisect.envs import gitrepo
from dsbisect.core.mode import Mode
from dsbisect.core.model import GitSource, Outcome, Point, digest
from dsbisect.records.proof import Proof, ProofVerdict, judge
from dsbisect.search.steps import Side

# ------------------------------------------------------------------ pure parts


@pytest.mark.parametrize("status, expected", [
    ("", ()),
    ("UU a.py\0", ("a.py",)),
    (" M ok.py\0UU b.py\0AA a.py\0", ("a.py", "b.py")),
    ("DU gone.py\0UD kept.py\0DD both.py\0AU x\0UA y\0", ("both.py", "gone.py", "kept.py", "x", "y")),
    ("R  new.py\0old.py\0UU c.py\0", ("c.py",)),  # a rename's second field is not an entry
    # the origin of a rename is a path, even one that reads like an entry ("UU real")
    ("R  UU weird\0UU real\0UU dir/with space.py\0", ("dir/with space.py",)),
    ("M  staged.py\0MM both.py\0?? untracked.py\0", ()),
])
def test_unmerged_paths_from_porcelain_status(status, expected):
    assert gitrepo.unmerged(status) == expected


@pytest.mark.parametrize("observed, expected", [
    ([(Side.OLD, Outcome.PASS), (Side.OLD, Outcome.PASS)], (ProofVerdict.PROVEN, Outcome.PASS, 2)),
    ([(Side.NEW, Outcome.HANG)], (ProofVerdict.NOT_SUFFICIENT, Outcome.HANG, 1)),
    ([(Side.OLD, Outcome.PASS), (Side.NEW, Outcome.HANG)], (ProofVerdict.NOT_SUFFICIENT, Outcome.HANG, 1)),
    ([(Side.OLD, Outcome.PASS), (Side.SKIP, Outcome.SKIP)], (ProofVerdict.PROVEN, Outcome.PASS, 1)),
    ([(Side.SKIP, Outcome.SKIP)], (ProofVerdict.UNTESTABLE, None, 0)),
    ([], (ProofVerdict.UNTESTABLE, None, 0)),
    ([(Side.OLD, Outcome.FAIL), (Side.OLD, Outcome.FAIL)], (ProofVerdict.PROVEN, Outcome.FAIL, 2)),  # a fix search
])
def test_the_proofs_verdict(observed, expected):
    assert judge(observed) == expected


H, T = "4f3a2b1c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a", "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("proof, text", [
    (Proof(H, "v0.12.4", T, ProofVerdict.PROVEN, outcome=Outcome.PASS, runs=2, agree=2),
     "reverting 4f3a2b1c9d on top of v0.12.4: PASS (2 of 2 runs) — the commit is the cause"),
    (Proof(H, "v0.12.4", T, ProofVerdict.NOT_SUFFICIENT, outcome=Outcome.HANG, runs=1, agree=1),
     "reverting 4f3a2b1c9d on top of v0.12.4: still HANG (1 of 1 run) — the commit is not sufficient"),
    (Proof(H, "v0.12.4", T, ProofVerdict.CONFLICT, conflicts=("a.py", "b.py")),
     "reverting 4f3a2b1c9d on top of v0.12.4: the revert does not apply cleanly (conflicts in a.py, b.py); not run"),
    (Proof(H, "v2", T, ProofVerdict.PROVEN, merge=True, outcome=Outcome.PASS, runs=2, agree=2),
     "reverting merge 4f3a2b1c9d (against its first parent) on top of v2: PASS (2 of 2 runs) — the commit is the cause"),
    (Proof(H, "v2", T, ProofVerdict.PROVEN, mode=Mode.FIND_FIX, outcome=Outcome.HANG, runs=2, agree=2),
     "reverting 4f3a2b1c9d on top of v2: HANG again (2 of 2 runs) — the commit is the fix"),
    (Proof(H, "v2", T, ProofVerdict.UNTESTABLE, detail="building dsb failed: SyntaxError"),
     "reverting 4f3a2b1c9d on top of v2: could not be tested: building dsb failed: SyntaxError"),
])
def test_the_proofs_line(proof, text):
    assert proof.describe() == text


def test_a_reverted_point_has_its_own_key_and_the_plain_commits_key_is_unchanged():
    plain = Point(versions=(("pkg", "1.1.0"),), source=GitSource("pkg", "/r", T))
    reverted = Point(versions=(("pkg", "1.1.0"),), source=GitSource("pkg", "/r", T, reverted=H, tree="f" * 40))
    other_tree = Point(versions=(("pkg", "1.1.0"),), source=GitSource("pkg", "", T, reverted=H, tree="e" * 40))
    assert plain.key == digest({"requirements": [], "source": T})  # as every store holds it
    assert reverted.key != plain.key
    assert reverted.key == other_tree.key  # the key is (commit, reverted); the tree is how to build it
    assert Point.from_json(reverted.to_json()) == Point(reverted.versions, source=GitSource(
        "pkg", "", T, reverted=H, tree="f" * 40))
    assert "reverted" not in json.dumps(plain.to_json())
    assert reverted.source.ident == f"{T}-revert-{H}" and plain.source.ident == T
    assert reverted.label == "pkg @0123456789-4f3a2b1c9d"


def _result(tmp_path, proof: Proof | None):
    from dsbisect.records.results import CommitResult, Request, Result
    from dsbisect.core.model import Answer

    req = Request(package="deepspeed", good="0.12.2", bad="0.12.4", case=make_case(tmp_path, name="train"),
                  git_repo=tmp_path)
    commit = CommitResult(T, H, "Fix the allreduce bucket (#4321)", (H,), 12, Answer.FOUND)
    return Result(req, ("0.12.2", "0.12.3", "0.12.4"), (), Answer.FOUND, "0.12.3", "0.12.4", commit=commit,
                  proof=proof)


@pytest.mark.parametrize("verdict, loud", [
    (ProofVerdict.PROVEN, False), (ProofVerdict.NOT_SUFFICIENT, True), (ProofVerdict.CONFLICT, True),
    (ProofVerdict.UNTESTABLE, True),
])
def test_the_proof_is_one_line_under_the_commit_and_loud_unless_proven(tmp_path, verdict, loud):
    import io

    from rich.console import Console

    from dsbisect.render import report

    proof = Proof(H, "v0.12.4", T, verdict, outcome=Outcome.HANG, runs=1, agree=1, conflicts=("a.py", "b.py"),
                  detail="rank 0 in all_reduce")
    result = _result(tmp_path, proof)
    lines = report.bisect_summary(result)
    at = lines.index(f"first bad commit: {H} Fix the allreduce bucket (#4321)")
    assert lines[at + 1] == proof.describe()
    md = report.bisect_markdown(result, "dsbisect bisect ...")
    assert (f"- **{proof.describe()}**" if loud else f"- {proof.describe()}\n") in md
    console = Console(width=200, record=True, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    console.print(report.bisect_renderable(result, "dsbisect bisect ...", piped=False))
    styled = console.export_text(styles=True)
    shown = next(ln for ln in styled.splitlines() if "on top of v0.12.4" in ln)
    assert ("\x1b[1;33m" in shown) is loud  # bold yellow: the proof did not prove the commit
    assert result.to_json()["verdict"] == "found" and result.exit_code == 0  # the answer stands
    assert result.to_json()["proof"]["verdict"] == verdict.value
    assert _result(tmp_path, None).to_json()["proof"] is None
    assert "reverting" not in "\n".join(report.bisect_summary(_result(tmp_path, None)))


# ------------------------------------------------------- git on a real clone

INIT = '__version__ = "{version}"\nfrom . import a, b\n\n\ndef step(dist):\n    a.check(dist)\n    b.check(dist)\n'
OK = "def check(dist):\n    pass\n"
BAD = 'def check(dist):\n    if dist.get_rank() == 0:\n        raise ValueError("dsb_toy: the loss went NaN in {m}")\n'


A, B, INIT_PY = "dsb_toy/a.py", "dsb_toy/b.py", "dsb_toy/__init__.py"


def _start(repo: Path) -> dict[str, str]:
    """v1.0.0 (both checks pass), then the version bump to 1.1.0; returns the hashes by name."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    h = {"v1.0.0": commit(repo, "release 1.0.0", {"pyproject.toml": pyproject("dsb-gittoy", "1.0.0", "dsb_toy"),
                                                   INIT_PY: INIT.format(version="1.0.0"), A: OK, B: OK,
                                                   "NOTES.md": "notes\n"})}
    git(repo, "tag", "v1.0.0")
    h["bump"] = commit(repo, "Bump to 1.1.0", {"pyproject.toml": pyproject("dsb-gittoy", "1.1.0", "dsb_toy"),
                                                INIT_PY: INIT.format(version="1.1.0")})
    return h


def history(repo: Path, kind: str) -> dict[str, str]:
    """A toy package's history from v1.0.0 to v1.1.0 in which commit "bug" makes rank 0 raise:
    ``clean`` (nothing after it touches a.py), ``twice`` (a later commit makes b.py raise too),
    ``conflict`` (a later commit edits the lines the bug added), ``merge`` (the bug comes in
    by a merge commit, "bug" on the first-parent chain)."""
    h = _start(repo)
    if kind == "merge":
        git(repo, "checkout", "-q", "-b", "feature")
        h["feature"] = commit(repo, "a: raise on NaN", {A: BAD.format(m="a")})
        git(repo, "checkout", "-q", "main")
        h["side"] = commit(repo, "Docs")
        git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'feature' (the bug)", "feature")
        h["bug"] = git(repo, "rev-parse", "HEAD").strip()
        git(repo, "branch", "-q", "-D", "feature")
    else:
        h["before"] = commit(repo, "Harmless change")
        h["bug"] = commit(repo, "a: raise on NaN (the bug)", {A: BAD.format(m="a")})
    if kind == "twice":
        h["again"] = commit(repo, "b: raise on NaN too", {B: BAD.format(m="b")})
    if kind == "conflict":
        h["again"] = commit(repo, "a: a clearer message", {A: BAD.format(m="a, at step 3")})
    h["after"] = commit(repo, "Another harmless change", {"NOTES.md": "Another harmless change\n"})
    git(repo, "tag", "-a", "-m", "release 1.1.0", "v1.1.0")
    # the user's clone is in use: an edit not committed, a file not tracked
    (repo / "NOTES.md").write_text("work in progress\n")
    (repo / "scratch.txt").write_text("mine\n")
    return h


def state(repo: Path) -> tuple[str, ...]:
    """Everything of the clone a proof must leave as it was."""
    return (git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--show-current"),
            git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
            git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
            git(repo, "diff"), git(repo, "diff", "--cached"), git(repo, "worktree", "list", "--porcelain"),
            (repo / "NOTES.md").read_text(), (repo / "scratch.txt").read_text())


@pytest.fixture
def scratch_tmp(tmp_path, monkeypatch):
    """TMPDIR for the scratch worktrees, to see that none is left."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


def _files_at(repo: Path, tree: str, path: str) -> str:
    return git(repo, "cat-file", "-p", f"{tree}:{path}")


@pytest.mark.parametrize("kind", ["clean", "twice", "merge"])
def test_a_clean_revert_gives_the_release_without_the_commit(tmp_path, scratch_tmp, kind):
    repo = tmp_path / "clone"
    h = history(repo, kind)
    before = state(repo)
    rev = gitrepo.revert_tree(repo, h["bug"], "v1.1.0")
    assert rev.clean and not rev.conflicts and not rev.error
    assert rev.merge is (kind == "merge")
    assert _files_at(repo, rev.tree, A) == OK  # the bug is gone ...
    assert _files_at(repo, rev.tree, B) == (BAD.format(m="b") if kind == "twice" else OK)
    assert 'version = "1.1.0"' in _files_at(repo, rev.tree, "pyproject.toml")  # ... from the release
    assert _files_at(repo, rev.tree, "NOTES.md") == "Another harmless change\n"
    assert state(repo) == before
    assert list(scratch_tmp.iterdir()) == []


def test_a_conflicting_revert_names_the_files(tmp_path, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "conflict")
    before = state(repo)
    rev = gitrepo.revert_tree(repo, h["bug"], "v1.1.0")
    assert not rev.clean and rev.conflicts == ("dsb_toy/a.py",) and rev.error == ""
    assert state(repo) == before
    assert list(scratch_tmp.iterdir()) == []


def test_a_revert_git_cannot_try_says_why(tmp_path, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "clean")
    before = state(repo)
    rev = gitrepo.revert_tree(repo, h["bug"], "0" * 40)  # no such commit to check out
    assert not rev.clean and not rev.conflicts and rev.error.startswith("git worktree add failed")
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []


def _slow_git(folder: Path, marker: Path) -> Path:
    """A ``git`` first on PATH that runs the real one, then, after a revert, signals and waits:
    the moment of a Ctrl-C with the scratch worktree half reverted."""
    folder.mkdir()
    wrapper = folder / "git"
    wrapper.write_text(f"""#!/bin/sh
{shutil.which("git")} "$@"
rc=$?
for a in "$@"; do
  if [ "$a" = revert ]; then touch {marker}; sleep 60; fi
done
exit $rc
""")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return folder


def _interrupt_at_revert(cmd: list[str], cwd: Path, env: dict[str, str], marker: Path) -> int:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no revert"
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def test_an_interrupted_revert_leaves_the_clone_as_it_was(tmp_path, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "conflict")  # interrupted with the conflict markers in the scratch worktree
    before = state(repo)
    marker = tmp_path / "reverting"
    slow = _slow_git(tmp_path / "bin", marker)
    env = dict(os.environ, PATH=f"{slow}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(scratch_tmp),
               PYTHONPATH=os.pathsep.join(sys.path))
    code = f"from dsbisect.envs import gitrepo; gitrepo.revert_tree({str(repo)!r}, {h['bug']!r}, 'v1.1.0')"
    rc = _interrupt_at_revert([sys.executable, "-c", code], tmp_path, env, marker)
    assert rc != 0
    assert state(repo) == before
    assert list(scratch_tmp.iterdir()) == []


# ------------------------------------------------------ real bisections (slow)


def _bisect(cli, tmp_path, cache_dir, repo, *extra, fmt=("--format", "json")):
    """Bisect the toy clone with --regress-on fail, one rank; (the arguments, the CLI's result).
    No toy here hangs: a long collective timeout keeps a loaded machine's slow store connect
    (DistNetworkError, a failure) from being taken for the bug.  The release wheels are the toy
    package's, the commits the clone's own code, so their failures differ in message and frames:
    --any-failure counts them alike (what is tested here is the proof, not the regression's
    identity, which tests/verdict/test_regression.py holds)."""
    house = tmp_path / "house"
    if not house.is_dir():
        toypkg.build_wheelhouse(house, {"1.0.0": "ok", "1.1.0": "raise"}, dist="dsb-gittoy")
    write_matrix(tmp_path, ["1.0.0"], package="dsb-gittoy", collective_timeout=30, nproc=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))
    args = ["bisect", "dsb-gittoy", "1.0.0", "1.1.0", "--case", "toy", "--git-repo", str(repo), "--offline",
            "--regress-on", "fail", "--any-failure", "--find-links", str(house), "--cache-dir", str(cache_dir),
            "-q", "--no-verify-commit-ends", *extra]
    return args, cli(*args, *fmt, cwd=tmp_path)


def _proof_step(out: dict) -> dict:
    (step,) = [s for s in out["steps"] if s["stage"] == "prove"]
    return step


def _run_ids(tmp_path) -> set[int]:
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        return {i for (i,) in con.execute("SELECT id FROM runs")}


@pytest.mark.slow
def test_a_clean_revert_proves_the_commit_and_survives_ctrl_c(tmp_path, cli, cache_dir, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "clean")
    before = state(repo)
    args, res = _bisect(cli, tmp_path, cache_dir, repo, fmt=("--format", "table", "-o", str(tmp_path / "r.md")))
    assert res.exit_code == 0, res.output
    said = f"reverting {h['bug'][:10]} on top of v1.1.0: PASS (2 of 2 runs) — the commit is the cause"
    lines = res.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"first bad commit: {h['bug']}"))
    assert lines[at + 1] == said  # one line, right under the commit
    assert f"\n- {said}\n" in (tmp_path / "r.md").read_text()
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []

    # Ctrl-C while the revert is under way: exit 130, the clone as it was, no scratch left;
    # the next run reuses every run, the proof's too.
    marker = tmp_path / "reverting"
    slow = _slow_git(tmp_path / "bin", marker)
    env = dict(os.environ, PATH=f"{slow}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(scratch_tmp),
               PYTHONPATH=os.pathsep.join(sys.path))
    rc = _interrupt_at_revert([sys.executable, "-m", "dsbisect", *args], tmp_path, env, marker)
    assert rc == 130
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []

    # The interrupted invocation had the slow git first on its PATH, and PATH reaches the ranks:
    # its probes ran again (a recorded run is reused only for the same inputs). What it recorded
    # is kept, and the next invocation reuses every run, the proof's too.
    recorded = _run_ids(tmp_path)
    res = cli(*args, "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert _run_ids(tmp_path) == recorded
    out = json.loads(res.stdout)
    assert out["verdict"] == "found" and out["commit"]["first_bad"] == h["bug"]
    onto = git(repo, "rev-parse", "v1.1.0^{commit}").strip()
    step = _proof_step(out)
    assert out["proof"] == {"commit": h["bug"], "onto": "v1.1.0", "onto_commit": onto, "merge": False,
                            "outcome": "pass", "runs": 2, "agree": 2, "verdict": "proven", "conflicts": [],
                            "detail": "", "run_ids": step["run_ids"]}
    assert (step["commit"], step["outcome"], step["verdict"], step["runs"]) == (onto, "pass", "good", 2)
    assert step["subject"] == 'Revert "a: raise on NaN (the bug)"'
    with sqlite3.connect(tmp_path / ".dsbisect" / "dsbisect.sqlite3") as con:
        points = {json.loads(p)["source"].get("reverted") for (i, p) in con.execute("SELECT id, point FROM runs")
                  if i in step["run_ids"]}
    assert points == {h["bug"]}  # a point of its own: the release's commit with the bug reverted
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_commit_that_is_not_sufficient_is_said_and_the_answer_stands(tmp_path, cli, cache_dir, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "twice")
    before = state(repo)
    args, res = _bisect(cli, tmp_path, cache_dir, repo)
    assert res.exit_code == 0, res.output  # the search's answer stands
    out = json.loads(res.stdout)
    assert out["verdict"] == "found" and out["commit"]["first_bad"] == h["bug"]
    proof = out["proof"]
    assert (proof["verdict"], proof["outcome"], proof["runs"], proof["agree"]) == ("not-sufficient", "fail", 1, 1)
    assert "ValueError" in proof["detail"]
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_conflicting_revert_is_named_and_nothing_runs(tmp_path, cli, cache_dir, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "conflict")
    before = state(repo)
    args, res = _bisect(cli, tmp_path, cache_dir, repo)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"]["first_bad"] == h["bug"]
    assert (out["proof"]["verdict"], out["proof"]["conflicts"], out["proof"]["runs"]) == (
        "conflict", ["dsb_toy/a.py"], 0)
    assert not [s for s in out["steps"] if s["stage"] == "prove"]
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_merge_commit_is_reverted_against_its_first_parent(tmp_path, cli, cache_dir, scratch_tmp):
    repo = tmp_path / "clone"
    h = history(repo, "merge")
    before = state(repo)
    args, res = _bisect(cli, tmp_path, cache_dir, repo, "--no-prove")
    assert json.loads(res.stdout)["proof"] is None  # --no-prove: no proof, no step
    args, res = _bisect(cli, tmp_path, cache_dir, repo)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"]["first_bad"] == h["bug"]
    assert (out["proof"]["verdict"], out["proof"]["merge"], out["proof"]["agree"]) == ("proven", True, 2)
    assert state(repo) == before and list(scratch_tmp.iterdir()) == []
