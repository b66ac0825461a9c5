"""``bisect --format github``: the log line, annotations, outputs and the issue of an answer
(pure: a result as a bisection records it), and what the CLI writes where the runner reads it."""

from __future__ import annotations

import pytest

from conftest import make_case
from dsbisect.cli.github import emit_github
from dsbisect.core.model import Answer, Outcome, RegressOn, Stage, Verdict
from dsbisect.records.finding import Finding, classify
from dsbisect.records.forge import Culprit
from dsbisect.records.proof import Proof, ProofVerdict
from dsbisect.records.results import CommitResult, Regression, Request, Result, Step, Tally
from dsbisect.records.migrate import failure
from dsbisect.render import github
from dsbisect.verdict.hangsig import HangSignature
from dsbisect.verdict.identity import learn
from workflow import read_outputs

G, X, B, H = "1" * 40, "2" * 40, "3" * 40, "4" * 40


def _step(label_hash: str, outcome: Outcome, verdict: Verdict, subject: str = "", stage=Stage.COMMIT, ids=(1,)):
    tally = Tally(outcome, ((outcome, len(ids)),), ids, 3.0, "exit 1" if outcome is Outcome.FAIL else "", False)
    return Step(stage, label_hash[:10], "2.0.0", label_hash, subject, verdict, (), tally)


def _result(tmp_path, verdict=Answer.FOUND, proof=True, kind=Outcome.FAIL) -> Result:
    req = Request("dsb-nightly", G, H, make_case(tmp_path, name="add"), git_repo=tmp_path)
    steps = (_step(G, Outcome.PASS, Verdict.GOOD, "Start"), _step(H, kind, Verdict.BAD, "Docs", ids=(2,)),
             _step(X, Outcome.SKIP, Verdict.SKIP, "Half a change", ids=(3,)),
             _step(B, kind, Verdict.BAD, "Speed up add (#101)", ids=(4,)))
    identity = (learn(kind, failure=failure("AssertionError: assert 5 == 4")) if kind is Outcome.FAIL
                else learn(kind, hang=HangSignature.from_text("timed out"), shown="timed out"))
    regression = Regression(RegressOn.FAIL if kind is Outcome.FAIL else RegressOn.HANG, identity, H[:10], "bad end",
                            RegressOn.AUTO)
    if verdict is Answer.UNFINISHED:
        commit = CommitResult(G, None, "", (X, B), 3, Answer.UNFINISHED)
        return Result(req, (G[:10], X[:10], B[:10], H[:10]), steps[:2], verdict, commit=commit,
                      message="the budget ran out (--max-runs 2: 2 runs made, the next step needs 1): …",
                      regression=regression)
    commit = CommitResult(X, B, "Speed up add (#101)", (B,), 3, verdict)
    p = Proof(B, H[:10], H, ProofVerdict.PROVEN, outcome=Outcome.PASS, runs=2, agree=2) if proof else None
    return Result(req, (G[:10], X[:10], B[:10], H[:10]), steps, verdict, commit=commit, proof=p, regression=regression)


CULPRIT = Culprit(B, "Speed up add (#101)", "Ada Lovelace", 101, "https://github.com/o/r/pull/101",
                  "https://github.com/o/r")
COMMAND = ("dsbisect bisect dsb-nightly --commits nightly-last-green..HEAD --git-repo . --max-runs 8 "
           "--store /ci/store --deadline 4h -- python -m pytest tests/test_add.py")


def test_a_culprit_is_one_line_an_error_annotation_and_outputs(tmp_path):
    result = _result(tmp_path)
    pub = github.publish(result, CULPRIT, COMMAND, "dsbisect-0123456789abcdef")
    assert pub.line == f"dsbisect: regression: first bad {B[:10]} Speed up add (#101), proven by revert"
    assert pub.annotations[0] == (f"::error title=dsbisect regression::regression: first bad {B[:10]} "
                                  "Speed up add (#101), proven by revert")
    assert pub.annotations[1].startswith(f"::warning title=dsbisect untested::{X[:10]}: ")
    out = dict(pub.outputs)
    assert (out["verdict"], out["finding"], out["files_issue"], out["first_bad"], out["last_good"], out["pr"],
            out["exit_code"]) == ("found", "regression", "true", B, X, "101", "0")
    assert all("\n" not in v for v in out.values())


def test_the_issue_leads_with_the_culprit_the_proof_and_a_one_line_repro(tmp_path):
    issue = github.issue(_result(tmp_path), CULPRIT, COMMAND, "dsbisect-0123456789abcdef")
    assert issue.title == f"[dsbisect] dsb-nightly: FAIL AssertionError: assert 5 == 4 since {B[:10]} (#101)"
    lines = issue.body.splitlines()
    assert lines[0] == "<!-- dsbisect regression dsbisect-0123456789abcdef -->"
    assert "[#101](https://github.com/o/r/pull/101)" in lines[3] and "by Ada Lovelace" in lines[3]
    assert f"- reverting {B[:10]} on top of {H[:10]}: PASS (2 of 2 runs) — the commit is the cause" in lines
    repro = issue.body.split("Reproduce in one line:")[1].split("```bash\n")[1].split("\n```")[0]
    assert repro == (f"dsbisect bisect dsb-nightly --commits {X[:12]}..{B[:12]} --git-repo . -- python -m pytest "
                     "tests/test_add.py")  # the decisive pair; not the CI's budget, store or deadline
    assert "<details>" in issue.body and "Speed up add" in issue.body


@pytest.mark.parametrize("verdict, kind, finding, files", [
    (Answer.FOUND, Outcome.FAIL, Finding.REGRESSION, True),
    (Answer.FOUND, Outcome.HANG, Finding.HANG, True),
    (Answer.AMBIGUOUS, Outcome.FAIL, Finding.AMBIGUOUS, True),
    (Answer.UNFINISHED, Outcome.FAIL, Finding.UNFINISHED, False),
])
def test_findings(tmp_path, verdict, kind, finding, files):
    result = _result(tmp_path, verdict, kind=kind)
    assert classify(result) is finding and finding.files_issue is files


def test_an_unfinished_search_says_what_is_left(tmp_path):
    result = _result(tmp_path, Answer.UNFINISHED)
    pub = github.publish(result, None, COMMAND, "dsbisect-0123456789abcdef")
    assert pub.line == f"dsbisect: unfinished: the first bad commit is one of 2 ({X[:10]} {B[:10]})"
    assert pub.annotations[0].startswith("::warning title=dsbisect unfinished::")
    assert dict(pub.outputs)["range"] == f"{X} {B}" and dict(pub.outputs)["exit_code"] == "75"


def test_annotation_data_is_escaped():
    assert github._escape("a%b\nc\rd") == "a%25b%0Ac%0Dd"
    assert github._escape("t: x, y", prop=True) == "t%3A x%2C y"


def test_the_cli_writes_the_summary_and_outputs_where_the_runner_reads_them(tmp_path, capsys):
    summary, output, body = tmp_path / "summary.md", tmp_path / "output", tmp_path / "issue.md"
    summary.write_text("earlier step\n")
    result = _result(tmp_path)
    emit_github(result, COMMAND, body, {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output),
                                        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r"})
    text = summary.read_text()
    assert text.startswith("earlier step\n## 🔴 dsbisect: regression: first bad")  # appended
    outs = read_outputs(output.read_text())
    assert outs["issue_body"] == str(body.resolve()) and outs["verdict"] == "found"
    assert outs["issue_key"] in body.read_text()
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("::error title=dsbisect regression::") and printed[-1].startswith("dsbisect: ")
