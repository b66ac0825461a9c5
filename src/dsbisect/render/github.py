"""``bisect --format github``: a bisection as a GitHub Actions step shows it.  Pure: the texts
and values; ``cli.github`` writes them where the runner reads them.

- one line for the log: ``dsbisect: regression: first bad 1a2b3c4d5e Fix the bucket (#1234), proven by revert``;
- annotations (``::error title=…::…``, ``::warning``, ``::notice``) for the run's page;
- the step summary (Markdown for ``$GITHUB_STEP_SUMMARY``): the answer first, then the report;
- the step outputs (``$GITHUB_OUTPUT``): ``verdict``, ``finding``, ``first_bad``, ``last_good``,
  ``pr``, ``pr_url``, ``issue_key``, ``issue_title``, ``range`` (what is left), ``exit_code``;
- the issue a maintainer acts on (``Issue``): its title, and a body that leads with the culprit,
  its pull request and author, the revert proof, the command that reproduces it in one line, and
  the chain of tested commits, with the stable key in a comment (``<!-- dsbisect regression dsbisect-… -->``)
  that the workflow looks for to update the issue of a regression found again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from dsbisect.core.model import Answer, Stage
from dsbisect.records.finding import Finding, classify, untested
from dsbisect.records.forge import Culprit
from dsbisect.records.proof import ProofVerdict
from dsbisect.records.results import Result
from dsbisect.render import report as rep
from dsbisect.render.report import clip_words

KEY_MARK = "dsbisect regression"  # the marker the workflow searches issues for (not "…-key:": masked as a secret)


@dataclass(frozen=True)
class Issue:
    key: str
    title: str
    body: str


@dataclass(frozen=True)
class Published:
    """Everything ``--format github`` gives: the log line, annotations, summary, outputs, issue."""

    line: str
    annotations: tuple[str, ...]
    summary: str
    outputs: tuple[tuple[str, str], ...]
    issue: Issue


def headline(result: Result, culprit: Culprit | None) -> str:
    """The answer in one line, without the ``dsbisect:`` prefix."""
    finding, c = classify(result), result.commit
    if culprit is not None:
        pr = f" (#{culprit.pr})" if culprit.pr is not None and f"#{culprit.pr}" not in culprit.subject else ""
        proof = _proof_words(result)
        word = result.request.mode.first_new
        return f"{finding.value}: {word} {culprit.short} {culprit.subject}{pr}{proof}"
    if finding is Finding.UNFINISHED and c is not None:
        return f"unfinished: the first bad commit is one of {len(c.maybe)} ({' '.join(h[:10] for h in c.maybe[:8])})"
    if finding is Finding.UNFINISHED and result.maybe:
        return f"unfinished: the first bad release is one of {len(result.maybe)} ({' '.join(result.maybe[:8])})"
    return f"{finding.value}: {result.message or result.verdict.value}"


def _proof_words(result: Result) -> str:
    p = result.proof
    if p is None:
        return ""
    return {ProofVerdict.PROVEN: ", proven by revert", ProofVerdict.NOT_SUFFICIENT: ", the revert is not sufficient",
            ProofVerdict.CONFLICT: ", the revert conflicts"}.get(p.verdict, ", the revert was not tested")


def annotations(result: Result, culprit: Culprit | None) -> tuple[str, ...]:
    """Workflow commands for the run's page: the answer (an error for a culprit, a warning when
    the machine or the budget stopped it, a notice otherwise), and a warning per untested point."""
    finding = classify(result)
    level = "error" if finding.files_issue else ("warning" if finding in (
        Finding.INFRA, Finding.UNFINISHED, Finding.ENVIRONMENT, Finding.UNTESTABLE) else "notice")
    out = [f"::{level} title=dsbisect {_escape(finding.value, True)}::{_escape(headline(result, culprit))}"]
    out += [f"::warning title=dsbisect untested::{_escape(u.describe())}" for u in untested(result)]
    return tuple(out)


def _escape(text: str, prop: bool = False) -> str:
    """A workflow command's data (or property) as the runner reads it: %, CR, LF (and , :) escaped."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def reproduce(result: Result, command: str) -> str:
    """One line that runs the decisive pair again (the last good and first bad commit) and the
    proof; for any other answer the bisection's own line."""
    c, req = result.commit, result.request
    if c is None or not c.first_bad or result.last_good:
        return command
    head, sep, tail = command.partition(" -- ")
    words = _without(shlex.split(head), BUDGET_AND_PLACE)
    if "--commits" in words:
        words[words.index("--commits") + 1] = f"{c.last_good[:12]}..{c.first_bad[:12]}"
    else:
        words += ["--commits", f"{c.last_good[:12]}..{c.first_bad[:12]}", "--git-repo", str(req.git_repo or ".")]
    return shlex.join(words) + (sep + tail if sep else "")


# What a maintainer's own machine has of its own: the CI's budget, store and cache are not the repro.
BUDGET_AND_PLACE = ("--max-runs", "--deadline", "--store", "--cache-dir", "--env-root", "--format", "--output", "-o")


def _without(words: list[str], options: tuple[str, ...]) -> list[str]:
    """``words`` without ``options`` and their values (``--opt V`` or ``--opt=V``)."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in options:
            skip = True
        elif not w.startswith("--") or w.split("=", 1)[0] not in options:
            out.append(w)
    return out


def issue(result: Result, culprit: Culprit | None, command: str, key: str) -> Issue:
    """The issue a maintainer acts on (a culprit, or the candidates an ambiguous answer leaves)."""
    req, c = result.request, result.commit
    what = result.regression.identity.describe() if result.regression and result.regression.identity else \
        f"{classify(result).value} of {req.case.name}"
    since = f" since {culprit.short}" + (f" (#{culprit.pr})" if culprit.pr is not None else "") if culprit else ""
    title = clip_words(f"[dsbisect] {req.package}: {what}{since}", 180)
    lines = [f"<!-- {KEY_MARK} {key} -->", f"**{req.package}: {headline(result, culprit)}**", ""]
    if culprit is not None:
        by = f" by {culprit.author}" if culprit.author else ""
        lines += [f"- culprit: {culprit.link()} — `{culprit.short}` {_md(culprit.subject)}{by}"]
    if c is not None:
        lines += [f"- last good commit: `{c.last_good}`"]
        if not c.first_bad and c.maybe:
            lines += [f"- first bad commit: one of {', '.join(f'`{h[:10]}`' for h in c.maybe)}"]
    lines += [f"- {_md(ln)}" for ln in _facts(result)]
    lines += ["", "Reproduce in one line:", "", "```bash", reproduce(result, command), "```", ""]
    lines += ["<details><summary>The bisection (every point tested)</summary>", "",
              rep.bisect_markdown(result, command), "</details>", "", f"Regression id `{key}` (the nightly comments here when "
              "it finds this regression again)"]
    return Issue(key, title, "\n".join(lines) + "\n")


def _facts(result: Result) -> list[str]:
    out = []
    if result.regression is not None and result.regression.describe():
        out.append(result.regression.describe())
    if result.proof is not None:
        out.append(result.proof.describe())
    out += [f"untested: {u.describe()}" for u in untested(result)]
    out += list(result.confidence and [x.describe() for x in result.confidence] or [])
    if result.message and result.verdict is not Answer.FOUND:
        out.append(result.message)
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def summary(result: Result, culprit: Culprit | None, command: str) -> str:
    """The step summary: the answer and its facts, then the whole report."""
    finding = classify(result)
    icon = {Finding.REGRESSION: "🔴", Finding.HANG: "🔴", Finding.UNFINISHED: "⏳", Finding.INFRA: "🟠",
            Finding.AMBIGUOUS: "🟡"}.get(finding, "⚪")
    lines = [f"## {icon} dsbisect: {_md(headline(result, culprit))}", ""]
    if culprit is not None:
        lines += [f"- culprit: {culprit.link()}" + (f" by {culprit.author}" if culprit.author else "")]
    lines += [f"- {_md(ln)}" for ln in _facts(result)]
    tested = sum(1 for s in result.steps if s.stage in (Stage.COMMIT, Stage.RELEASE))
    lines += [f"- {tested} points tested, {len(result.runs) or sum(len(s.tally.run_ids) for s in result.steps)} "
              "runs", "", rep.bisect_markdown(result, command)]
    return "\n".join(lines) + "\n"


def outputs(result: Result, culprit: Culprit | None, key: str, title: str) -> tuple[tuple[str, str], ...]:
    """The step's outputs, each one line."""
    c = result.commit
    left = " ".join(c.maybe) if c is not None and not c.first_bad else ""
    pairs = [("verdict", result.verdict.value), ("finding", classify(result).value),
             ("files_issue", "true" if classify(result).files_issue else "false"),
             ("first_bad", c.first_bad or "" if c else result.first_bad or ""),
             ("last_good", c.last_good if c else result.last_good or ""),
             ("range", left), ("pr", str(culprit.pr) if culprit and culprit.pr is not None else ""),
             ("pr_url", culprit.pr_url or "" if culprit else ""), ("author", culprit.author if culprit else ""),
             ("issue_key", key), ("issue_title", title), ("exit_code", str(result.exit_code)),
             ("line", headline(result, culprit))]
    return tuple((k, " ".join(v.split())) for k, v in pairs)


def publish(result: Result, culprit: Culprit | None, command: str, key: str) -> Published:
    found = issue(result, culprit, command, key)
    return Published(f"dsbisect: {headline(result, culprit)}", annotations(result, culprit),
                     summary(result, culprit, command), outputs(result, culprit, key, found.title), found)
