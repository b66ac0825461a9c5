"""``dsbisect bisect PACKAGE --commits OLD..NEW --git-repo CLONE [-- COMMAND]``: the request
checked (the range, the case, the budget) before the store or the cache is touched, then the
search of the commits run (``commits.CommitBisection``).
"""

from __future__ import annotations

import dataclasses

from dsbisect.bisect.budget import Budget, Meter
from dsbisect.bisect.jobs import BisectRequest, Checked, Invocation, manual_executor
from dsbisect.bisect.span import Span, check_span
from dsbisect.core.errors import InputError
from dsbisect.core.model import IndexOptions
from dsbisect.records.results import Request, Result
from dsbisect.run import matrix
from dsbisect.run.settings import Frontend, Settings, open_session


@dataclasses.dataclass(frozen=True)
class CommitJob:
    """A search of commits, checked: the request (its good and bad the ends' hashes), the range,
    the budget, and the case's venv defaults and executor."""

    checked: Checked[Request]
    span: Span
    budget: Budget


def words_before_dashes(request: BisectRequest, invocation: Invocation) -> tuple[list[str], list[str]]:
    """The positional words before ``--`` (Click fills PACKAGE GOOD BAD with whatever comes
    first, the command's words too) and the command after it."""
    words, after = request.words, list(invocation.after_dashes)
    return (words[:len(words) - len(after)] if after else words), after


def commit_job(request: BisectRequest, invocation: Invocation, settings: Settings) -> CommitJob:
    """Every check of a ``--commits`` search, in the order a user reads the errors (an
    InputError each): the words, what is not for commits, the range, the case, the budget."""
    before, command = words_before_dashes(request, invocation)
    if len(before) != 1:
        raise InputError("with --commits give PACKAGE only (the distribution the clone builds, e.g. deepspeed); "
                         "the range is --commits OLD..NEW")
    s, span_given = request.search, request.span
    if s.confirm > 1:
        raise InputError("--confirm is for releases; with --commits use --repeat N or --confidence P")
    if not s.verify_commit_ends:
        raise InputError("--no-verify-commit-ends: a --commits search always tests both ends first")
    if request.pre or request.include_yanked:
        raise InputError("--pre and --include-yanked choose releases; --commits searches commits")
    package = before[0]
    span = check_span(span_given, s.git_repo)
    budget = span_given.budget()
    case, env_defaults = request.what.resolve(command or None)
    case = settings.shape(case)
    executor = settings.placement.executor_for()
    s.check_signature()
    req = Request(package=package, good=span.old.hash, bad=span.new.hash, case=case,
                  pins=matrix.check_pins(list(request.what.pin or []), package), regress_on=s.regress_on,
                  mode=s.mode, repeat=s.repeat, signature=s.signature, git_repo=span.repo,
                  prove=s.prove, argv=invocation.argv, any_failure=s.any_failure, confidence=s.confidence)
    return CommitJob(Checked(req, env_defaults, executor), span, budget)


def shadowing(req: Request, span: Span) -> str:
    """Why the command may import the clone's own files instead of the commit under test ("" when
    nothing says so): it runs at the clone's root, where a flat layout keeps the package
    (``deepspeed/``); ``python -m …`` and a script there put that folder first on ``sys.path``."""
    name = req.package.lower().replace("-", "_")
    at_root = [p for p in (req.case.cwd, req.case.script.parent if req.case.script.is_file() else None)
               if p is not None and p.resolve() == span.repo]
    if not at_root or not (span.repo / name / "__init__.py").is_file():
        return ""
    return (f"the command runs at the root of {span.repo}, which holds {name}/: `python -m …` or a script there "
            f"imports that folder (your checkout) instead of the commit under test; run it from another folder "
            f"(e.g. cd tests), or with python -P (3.11+)")


def bisect_commits(request: BisectRequest, invocation: Invocation, settings: Settings,
                   frontend: Frontend) -> tuple[Result, IndexOptions]:
    """`bisect PACKAGE --commits OLD..NEW`: everything checked, then the search; its result and
    the index settings it read."""
    from dsbisect.bisect.commits import CommitBisection

    job = commit_job(request, invocation, settings)
    req, executor = job.checked.request, job.checked.executor
    index = settings.sources.resolve()
    env_options = settings.venvs.options(job.checked.env_defaults)
    meter = Meter(job.budget)  # the budget counts from here: the checks took no run
    ui = frontend.display(0)
    if request.manual:
        executor = manual_executor(settings, frontend, ui)
    runner = open_session(settings, env_options, index, ui, executor=executor)
    req = dataclasses.replace(req, width=len(runner.slots(req.case)))
    span = job.span
    shadow = shadowing(req, span)
    if shadow:
        frontend.say(f"note: {shadow}")
    frontend.say(f"{span.between} commit{'s' if span.between != 1 else ''} after {span.old.short} ({span.old_ref}) "
                 f"up to {span.new.short} ({span.new_ref}), first-parent"
                 + (f"; budget: {job.budget.describe()}" if job.budget.given else ""))
    with ui.running():
        return CommitBisection(runner, req, span, meter).run(), index
