"""``bisect --commits OLD..NEW``: bad input (one line, exit 2, nothing created), the budget's
arithmetic on a clock the test drives, and the range left when a search stops early.  The real
searches are tests/bisect/test_nightly.py's (through the workflow) and the one below (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nightlytoy
from dsbisect.bisect.budget import Budget, BudgetSpent, Meter, duration_text, parse_duration
from dsbisect.bisect.budget import narrowed
from dsbisect.core.errors import InputError
from dsbisect.core.model import UNFINISHED_EXIT, Answer
from dsbisect.search.steps import Side


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    repo = tmp_path_factory.mktemp("commits") / "repo"
    return repo, nightlytoy.make(repo)


def _nothing_created(folder: Path) -> None:
    assert not (folder / "store").exists() and not (folder / "cache").exists()


BAD_INPUT = [
    (["--commits", "HEAD..HEAD", "--git-repo", "{repo}"], "no commits between HEAD and HEAD"),
    (["--commits", "nightly-last-green..no-such-ref", "--git-repo", "{repo}"], "has no commit 'no-such-ref'"),
    (["--commits", "nightly-last-green..HEAD"], "--commits needs --git-repo CLONE"),
    (["--commits", "HEAD..nightly-last-green", "--git-repo", "{repo}"], "nightly-last-green comes before HEAD; give the good (older) end first"),
    (["--commits", "nightly-last-green...HEAD", "--git-repo", "{repo}"], "give OLD..NEW (two dots)"),
    (["--commits", "..HEAD", "--git-repo", "{repo}"], "give the good end before the dots"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{tmp}/nowhere"], "no such folder"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{tmp}"], "not a git repository"),
    (["--max-runs", "3", "--good-env", "a.txt", "--bad-env", "b.txt"], "not of two environments"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{repo}", "--deadline", "soon"],
     "give a duration such as 5h"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{repo}", "--confirm", "3"], "--confirm is for releases"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{repo}", "--good-env", "a.txt", "--bad-env", "b.txt"],
     "give either --commits OLD..NEW or --good-env"),
    (["--commits", "nightly-last-green..HEAD", "--git-repo", "{repo}", "--format", "github", "--good-env", "a.txt",
      "--bad-env", "b.txt"], "give either --commits OLD..NEW or --good-env"),
]


@pytest.mark.parametrize("words, expected", BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, toy, words, expected):
    repo, _ = toy
    nightlytoy.git(repo, "checkout", "-q", "main")
    args = [w.format(repo=repo, tmp=tmp_path) for w in words]
    res = cli("bisect", "dsb-nightly", *args, "--matrix", str(repo / "dsbisect.yaml"), "--case", "add",
              "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    _nothing_created(tmp_path)


def test_a_dirty_work_tree_is_refused_with_the_files_named(tmp_path, cli, toy):
    repo, _ = toy
    nightlytoy.git(repo, "checkout", "-q", "main")
    (repo / "src/dsb_nightly/add.py").write_text("def add(a, b):\n    return 4\n")
    (repo / "untracked.txt").write_text("an untracked file is no change\n")
    try:
        res = cli("bisect", "dsb-nightly", "--commits", "nightly-last-green..HEAD", "--git-repo", ".",
                  "--case", "add", "--matrix", "dsbisect.yaml", "--store", str(tmp_path / "store"),
                  "--cache-dir", str(tmp_path / "cache"), "--", "python", "-m", "pytest", cwd=repo)
    finally:
        nightlytoy.git(repo, "checkout", "-q", "--", ".")
        (repo / "untracked.txt").unlink()
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert "has uncommitted changes (src/dsb_nightly/add.py): commit or stash them first" in line
    _nothing_created(tmp_path)


def test_words_before_the_dashes_are_package_only(tmp_path, cli, toy):
    repo, _ = toy
    res = cli("bisect", "dsb-nightly", "1.0", "--commits", "nightly-last-green..HEAD", "--git-repo", str(repo),
              "--store", str(tmp_path / "store"), "--", "python", "-m", "pytest", cwd=tmp_path)
    assert res.exit_code == 2 and "with --commits give PACKAGE only" in res.stderr
    _nothing_created(tmp_path)


@pytest.mark.parametrize("text, seconds", [("5h", 18000), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                           ("3600", 3600), ("1.5h", 5400), (" 2h ", 7200), ("1d", 86400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(duration_text(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5x", "h", "-1h", "0", "5h-", "1h 30"])
def test_what_is_no_duration(text):
    with pytest.raises(InputError):
        parse_duration(text)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeRun:
    """What Meter reads of a run record: its id, when it started, its seconds, marks, outcome."""

    def __init__(self, id: int, started: float, seconds: float, manual=None, outcome="pass"):
        self.id, self.started, self.seconds, self.manual, self.outcome = id, started, seconds, manual, outcome


def test_max_runs_counts_only_the_runs_this_invocation_made():
    meter = Meter(Budget(max_runs=3), clock=Clock(), since=1000.0)
    meter.count([FakeRun(1, 999.0, 5.0), FakeRun(2, 999.5, 5.0)])  # reused: recorded by an earlier job
    meter.check(3)
    meter.count([FakeRun(3, 1001.0, 5.0), FakeRun(4, 1002.0, 5.0), FakeRun(4, 1002.0, 5.0)])  # one id once
    assert meter.made == 2
    meter.check(1)
    with pytest.raises(BudgetSpent, match=r"--max-runs 3: 2 runs made, the next step needs 2"):
        meter.check(2)
    meter.check(0)  # a step that only reuses recorded runs costs nothing


def test_the_deadline_leaves_room_for_the_slowest_run():
    clock = Clock()
    meter = Meter(Budget(deadline=600.0), clock=clock, since=0.0)
    clock.now += 400
    meter.check(1)  # nothing ran yet: no run to measure
    meter.count([FakeRun(1, 1.0, 150.0), FakeRun(2, 2.0, 90.0)])
    meter.check(1)  # 400 s + the slowest 150 s fit in 600
    clock.now += 60
    with pytest.raises(BudgetSpent, match=r"--deadline 10m: 7m40s spent, the slowest run took 2m30s"):
        meter.check(1)


@pytest.mark.parametrize("sides, n, expected", [
    ({}, 8, (0, (1, 2, 3, 4, 5, 6, 7))),  # nothing tested: the whole range
    ({0: Side.OLD, 7: Side.NEW}, 8, (0, (1, 2, 3, 4, 5, 6, 7))),
    ({0: Side.OLD, 7: Side.NEW, 4: Side.NEW}, 8, (0, (1, 2, 3, 4))),
    ({0: Side.OLD, 7: Side.NEW, 4: Side.NEW, 2: Side.OLD}, 8, (2, (3, 4))),
    ({0: Side.OLD, 7: Side.NEW, 4: Side.NEW, 2: Side.OLD, 3: Side.SKIP}, 8, (2, (3, 4))),  # a skip stays a candidate
    ({0: Side.OLD, 7: Side.NEW, 5: Side.OLD, 6: Side.OLD}, 8, (6, (7,))),
])
def test_the_range_left_when_a_search_stops(sides, n, expected):
    assert narrowed(sides, n) == expected


def test_unfinished_has_an_exit_code_of_its_own():
    assert Answer.UNFINISHED.exit_code == UNFINISHED_EXIT == 75
    assert {a.exit_code for a in Answer if a is not Answer.UNFINISHED} == {0, 1}


@pytest.mark.slow
def test_the_json_of_a_commit_search_and_its_resume(tmp_path, cli, toy, cache_dir):
    """--format json keeps every key; an unfinished search's JSON names what is left, and the
    same command with the same store reuses every run and goes on."""
    repo, h = toy
    nightlytoy.git(repo, "checkout", "-q", "main")
    (tmp_path / "house").mkdir()
    args = ["bisect", "dsb-nightly", "--commits", "nightly-last-green..HEAD", "--git-repo", ".", "--matrix",
            "dsbisect.yaml", "--case", "add", "--offline", "--find-links", str(tmp_path / "house"), "--jobs", "1",
            "--store", str(tmp_path / "store"), "--cache-dir", str(cache_dir), "-q", "--format", "json"]
    res = cli(*args, "--max-runs", "2", cwd=repo)
    assert res.exit_code == UNFINISHED_EXIT, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "unfinished" and out["commit"]["verdict"] == "unfinished"
    assert (out["good"], out["bad"]) == (h["green"], h["head"])
    assert out["commit"]["first_bad"] is None and len(out["commit"]["maybe"]) == 7
    assert "the budget ran out (--max-runs 2: 2 runs made" in out["message"]
    assert res.stderr.strip().splitlines()[-1].startswith("unfinished: the budget ran out")
    res = cli(*args, "--no-prove", cwd=repo)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["commit"]["first_bad"] == h["regression"] and out["commit"]["commits_in_range"] == 7
    assert out["candidates"][0] == h["green"][:10] and out["proof"] is None
    assert [s["run_ids"] for s in out["steps"][:2]] == [[1], [2]]  # the ends: the first job's runs


def test_a_flat_layout_at_the_clones_root_is_named_before_the_search(tmp_path):
    """python -m at the root of a clone that keeps the package there (DeepSpeed's deepspeed/)
    imports the checkout, not the commit under test: said before anything runs."""
    from dsbisect.bisect.commitjob import shadowing
    from dsbisect.bisect.span import Span
    from dsbisect.envs.gitrepo import Commit
    from dsbisect.records.results import Request
    from conftest import make_case
    import dataclasses

    repo = tmp_path / "clone"
    (repo / "dsb_flat").mkdir(parents=True)
    (repo / "dsb_flat" / "__init__.py").write_text("")
    span = Span(repo.resolve(), "a", "b", (Commit("a" * 40, "x"), Commit("b" * 40, "y")))
    case = make_case(tmp_path, name="t")
    at_root = Request("dsb-flat", "a" * 40, "b" * 40, dataclasses.replace(case, cwd=repo))
    assert "which holds dsb_flat/" in shadowing(at_root, span) and "python -P" in shadowing(at_root, span)
    below = Request("dsb-flat", "a" * 40, "b" * 40, dataclasses.replace(case, cwd=repo / "dsb_flat"))
    assert shadowing(below, span) == ""  # run from a sub-folder: the package is not on sys.path
    other = Request("dsb-other", "a" * 40, "b" * 40, dataclasses.replace(case, cwd=repo))
    assert shadowing(other, span) == ""  # a src layout, or another package


def test_a_good_end_off_the_line_starts_from_the_merge_base(tmp_path):
    """A release branch's commit as the good end: the first-parent chain from the merge base,
    which the search tests rather than assumes (the span says so)."""
    from dsbisect.bisect.span import CommitSpan, check_span

    repo = tmp_path / "r"
    repo.mkdir()
    nightlytoy.git(repo, "init", "-q", "-b", "main")
    base = nightlytoy.commit(repo, "base")
    c1 = nightlytoy.commit(repo, "on main 1")
    nightlytoy.git(repo, "checkout", "-q", "-b", "release", base)
    rel = nightlytoy.commit(repo, "on the release branch")
    nightlytoy.git(repo, "checkout", "-q", "main")
    c2 = nightlytoy.commit(repo, "on main 2")
    span = check_span(CommitSpan(f"{rel[:12]}..main"), repo)
    assert [c.hash for c in span.chain] == [base, c1, c2] and span.between == 2
    assert span.note == f"{rel[:12]} is not an ancestor of main: the commits searched are the first-parent ones " \
                        f"from their merge base {base[:10]}"
    assert span.new.describe  # the bad end is described for its points' version
    assert check_span(CommitSpan(f"{base}.."), repo).new.hash == c2  # OLD.. is OLD..HEAD


@pytest.mark.slow
def test_a_flaky_commit_is_found_with_confidence(tmp_path, cli, toy, cache_dir, monkeypatch):
    """--confidence over commits: the flaky commit (its test fails every other run), with the
    probability the search reached and the revert proof."""
    repo, h = toy
    nightlytoy.git(repo, "checkout", "-q", "main")
    (tmp_path / "house").mkdir()
    (tmp_path / "draws").mkdir()
    monkeypatch.setenv("DSB_NIGHTLY_DRAWS", str(tmp_path / "draws"))
    res = cli("bisect", "dsb-nightly", "--commits", "nightly-last-green..HEAD", "--git-repo", ".", "--matrix",
              "dsbisect.yaml", "--case", "noisy", "--offline", "--find-links", str(tmp_path / "house"), "--jobs", "1",
              "--store", str(tmp_path / "store"), "--cache-dir", str(cache_dir), "-q", "--format", "json",
              "--confidence", "0.9", cwd=repo)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "found" and out["commit"]["first_bad"] == h["flaky"]
    conf = out["confidence"]["commit"]
    assert conf["status"] == "sure" and conf["probability"] >= 0.9 and conf["first_bad"] == h["flaky"][:10]
    assert out["regression"]["identity"].startswith("FAIL FAILED tests/test_noisy.py::test_noisy - RuntimeError: noisy")
    assert out["proof"]["verdict"] == "proven"
