"""The nightly end to end: docs/ci/dsbisect-nightly.yml's own steps (docs/ci/nightly.sh) run on a
toy repository with a real history (tests/nightlytoy.py: a regression, a flaky test and a hang
in three commits), with the CI's variables set, job after job, the store carried between jobs
as the workflow's cache carries it.  GitHub is not reachable here: ``gh`` is a stand-in that
keeps issues as files; dsbisect, git, the venvs and the runs are real.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

import nightlytoy
from workflow import Workflow

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "ci" / "dsbisect-nightly.yml"
SCRIPT = ROOT / "docs" / "ci" / "nightly.sh"

FAKE_GH = '''#!{python}
"""A stand-in for the GitHub CLI's issue commands: issues are files in $FAKE_GH_DIR."""
import json, os, re, sys
from pathlib import Path

home = Path(os.environ["FAKE_GH_DIR"])
args = sys.argv[1:]
with open(home / "calls.log", "a") as log:
    log.write(json.dumps(args) + "\\n")

def value(flag):
    return args[args.index(flag) + 1]

issues = sorted(home.glob("issue-*.md"), key=lambda p: int(p.stem.split("-")[1]))
if args[:2] == ["issue", "list"]:
    key = re.match(r'"([^"]+)" in:body', value("--search"))[1]
    hit = next((p for p in issues if key in p.read_text()), None)
    print(hit.stem.split("-")[1] if hit else "")
elif args[:2] == ["issue", "create"]:
    n = len(issues) + 1
    (home / f"issue-{{n}}.md").write_text(value("--title") + "\\n" + Path(value("--body-file")).read_text())
    print(f"https://github.com/example/dsb-nightly/issues/{{n}}")
elif args[:2] == ["issue", "comment"]:
    with open(home / f"comments-{{args[2]}}.md", "a") as f:
        f.write(Path(value("--body-file")).read_text())
else:
    sys.exit(f"fake gh: {{args}} not known")
'''


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nightly")
    repo = folder / "repo"
    return repo, nightlytoy.make(repo)


def _harness(tmp_path: Path, repo: Path, cache_dir: Path, **inputs: str) -> tuple[Workflow, Path]:
    bin_dir, gh_dir = tmp_path / "bin", tmp_path / "gh"
    bin_dir.mkdir()
    gh_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH.format(python=sys.executable))
    (bin_dir / "gh").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "FAKE_GH_DIR": str(gh_dir), "DSBISECT_CACHE_DIR": str(cache_dir), "DSBISECT_PUSH": "1",
           "DSB_NIGHTLY_DRAWS": str(tmp_path / "draws"), "GITHUB_REPOSITORY": "example/dsb-nightly",
           "GITHUB_SERVER_URL": "https://github.com", "DSBISECT_HEARTBEAT": "0"}
    (tmp_path / "draws").mkdir()
    (tmp_path / "house").mkdir()  # offline: nothing to fetch (the base has setuptools and pytest)
    inputs["bisect-args"] = inputs.get("bisect-args", "--matrix dsbisect.yaml --case add --jobs 1") + \
        f" --offline --find-links {tmp_path / 'house'}"
    given = {"package": "dsb-nightly", "script": str(SCRIPT), "setup": "true", "deadline": ""} | inputs
    return Workflow(WORKFLOW, given, repo, tmp_path / "gh-runner", env), gh_dir


def _runs(store: Path) -> int:
    with sqlite3.connect(store / "dsbisect.sqlite3") as con:
        return con.execute("SELECT count(*) FROM runs").fetchone()[0]


def _checkout(repo: Path, ref: str) -> None:
    nightlytoy.git(repo, "checkout", "-q", "--detach", ref)


@pytest.mark.slow
def test_green_budget_resume_and_the_issue_opened_then_updated(tmp_path, toy, cache_dir):
    repo, h = toy
    suite = "PYTHONPATH=src python -m pytest -q -p no:cacheprovider tests/test_add.py"
    wf, gh = _harness(tmp_path, repo, cache_dir, suite=suite, **{"max-runs": "3"})

    # Night 0: the suite passes at the green commit: the tag moves there (and to origin), nothing else runs.
    _checkout(repo, h["green"])
    job = wf.run()
    assert not job.failed, [(s.name, s.outcome, s.stdout[-2000:]) for s in job.order]
    assert job.steps["suite"].outcome == "success" and job.steps["bisect"].outcome == "skipped"
    assert nightlytoy.git(repo, "ls-remote", "origin", "refs/tags/nightly-last-green").split()[0] == h["green"]

    # Night 1: HEAD fails; the budget (3 runs) ends the bisection: unfinished, the range so far.
    _checkout(repo, h["head"])
    job = wf.run()
    bisect = job.steps["bisect"]
    assert bisect.outcome == "success", bisect.stdout[-3000:]
    out = bisect.outputs
    assert (out["verdict"], out["finding"], out["files_issue"], out["exit_code"]) == (
        "unfinished", "unfinished", "false", "75")
    assert out["range"] and h["regression"] in out["range"].split()
    assert out["resumed"] == "false" and out["first_bad"] == ""
    assert "::warning title=dsbisect unfinished::unfinished: the first bad commit is one of" in bisect.stdout
    assert "## ⏳ dsbisect: unfinished" in bisect.summary and "the budget ran out (--max-runs 3" in bisect.summary
    assert job.failed and job.step("Fail the night when the suite failed").outcome == "failure"
    assert job.step("Open or update the issue").outcome == "skipped"
    (saved,) = (wf.home / "cache").iterdir()  # the store, kept by the cache step (night 0 kept none)
    assert (saved / "nightly-range").read_text().split() == [h["green"], h["head"]]
    assert _runs(saved) == 3

    # Night 2, another runner folder: the carried store goes on from where the budget stopped.
    wf.inputs["max-runs"] = "8"
    job = wf.run()
    bisect = job.steps["bisect"]
    out = bisect.outputs
    assert bisect.outcome == "success", bisect.stdout[-3000:]
    assert (out["verdict"], out["finding"], out["first_bad"], out["pr"], out["resumed"]) == (
        "found", "regression", h["regression"], "101", "true")
    assert out["pr_url"] == "https://github.com/example/dsb-nightly/pull/101" and out["author"] == "Ada Lovelace"
    assert out["line"].startswith(f"regression: first bad {h['regression'][:10]} Speed up add (#101), proven by revert")
    # the first night's three runs were reused: two more probes and the proof's two runs were new
    assert _runs(job.temp / "dsbisect-store") == 3 + 4
    body = Path(out["issue_body"]).read_text()
    assert f"<!-- dsbisect regression {out['issue_key']} -->" in body
    assert "reverting " + h["regression"][:10] in body and "the commit is the cause" in body
    assert f"--commits {h['regression'][:12]}" not in body  # the repro runs the last good and first bad
    assert "--max-runs" not in body.split("Reproduce in one line:")[1].split("```")[1]
    assert job.step("Open or update the issue").outcome == "success"
    assert [p.name for p in gh.glob("issue-*.md")] == ["issue-1.md"]
    assert (wf.home / "artifacts").glob("dsbisect-report-*/report.html")

    # Night 3: still red, found again from a fresh range (every run reused): the same issue gets a comment.
    job = wf.run()
    out = job.steps["bisect"].outputs
    assert out["first_bad"] == h["regression"] and out["resumed"] == "false"
    assert _runs(job.temp / "dsbisect-store") == 7  # nothing ran again
    assert [p.name for p in gh.glob("issue-*.md")] == ["issue-1.md"]
    assert out["issue_key"] in (gh / "comments-1.md").read_text()
    calls = [json.loads(ln)[:2] for ln in (gh / "calls.log").read_text().splitlines()]
    assert calls == [["issue", "list"], ["issue", "create"], ["issue", "list"], ["issue", "comment"]]


@pytest.mark.slow
def test_a_hang_is_the_regression_when_the_bad_end_hangs(tmp_path, toy, cache_dir):
    repo, h = toy
    _checkout(repo, h["head"])
    suite = "PYTHONPATH=src timeout 20 python -m pytest -q -p no:cacheprovider tests/test_settle.py"
    wf, gh = _harness(tmp_path, repo, cache_dir, suite=suite,
                      **{"bisect-args": "--matrix dsbisect.yaml --case settle --jobs 1"})
    job = wf.run()
    bisect = job.steps["bisect"]
    out = bisect.outputs
    assert bisect.outcome == "success", bisect.stdout[-3000:]
    assert (out["verdict"], out["finding"], out["first_bad"], out["pr"]) == ("found", "hang", h["hang"], "103")
    assert "HANG" in Path(out["issue_body"]).read_text()
    assert "the commit is the cause" in Path(out["issue_body"]).read_text()
    assert [p.name for p in gh.glob("issue-*.md")] == ["issue-1.md"]


@pytest.mark.slow
def test_a_flaky_regression_is_found_with_repeat(tmp_path, toy, cache_dir):
    repo, h = toy
    _checkout(repo, h["head"])
    suite = "PYTHONPATH=src python -m pytest -q -p no:cacheprovider tests/test_noisy.py"
    wf, gh = _harness(tmp_path, repo, cache_dir, suite=suite,
                      **{"bisect-args": "--matrix dsbisect.yaml --case noisy --jobs 1 --repeat 2"})
    job = wf.run()
    bisect = job.steps["bisect"]
    out = bisect.outputs
    assert job.steps["suite"].outcome == "failure"  # the counter's first draw fails
    assert bisect.outcome == "success", bisect.stdout[-3000:]
    assert (out["verdict"], out["finding"], out["first_bad"], out["pr"]) == ("found", "regression", h["flaky"], "102")
    assert "PASS (2 of 2 runs) — the commit is the cause" in Path(out["issue_body"]).read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a machine without CUDA GPUs is the point")
def test_a_machine_that_cannot_run_the_points_is_infra_not_a_regression(tmp_path, toy, cache_dir):
    repo, h = toy
    _checkout(repo, h["head"])
    suite = "PYTHONPATH=src python -m pytest -q -p no:cacheprovider tests/test_add.py"
    wf, gh = _harness(tmp_path, repo, cache_dir, suite=suite,
                      **{"bisect-args": "--matrix dsbisect.yaml --case add_on_gpus --jobs 1"})
    job = wf.run()
    bisect = job.steps["bisect"]
    out = bisect.outputs
    assert bisect.outcome == "success", bisect.stdout[-3000:]
    assert (out["verdict"], out["finding"], out["files_issue"], out["exit_code"]) == (
        "untestable", "infra", "false", "1")
    assert "::warning title=dsbisect infra::" in bisect.stdout
    assert "::warning title=dsbisect untested::" in bisect.stdout and "the machine's: too few GPUs (needs" in bisect.stdout
    assert job.step("Open or update the issue").outcome == "skipped" and not list(gh.glob("issue-*"))
    assert nightlytoy.git(repo, "rev-parse", "nightly-last-green") == h["green"]  # the tag stays


def test_a_green_night_forgets_an_unfinished_range(tmp_path, toy, cache_dir):
    """The cache a red night saved holds an unfinished range; a green night in between drops it
    (and saves the store again), so the next red night bisects from the new last green commit."""
    repo, h = toy
    _checkout(repo, h["green"])
    wf, gh = _harness(tmp_path, repo, cache_dir, suite="true")
    old = wf.home / "cache" / "dsbisect-dsb-nightly-999"
    old.mkdir(parents=True)
    (old / "nightly-range").write_text(f"{h['green']} {h['head']}\n")
    job = wf.run()
    assert not job.failed and job.steps["green"].outputs["store_changed"] == "true"
    assert job.step("Keep the store for the next job").outcome == "success"
    newest = max((wf.home / "cache").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert newest != old and not (newest / "nightly-range").exists()
    job = wf.run()  # green again, nothing to forget: the store is not saved again
    assert "store_changed" not in job.steps["green"].outputs
    assert job.step("Keep the store for the next job").outcome == "skipped"
