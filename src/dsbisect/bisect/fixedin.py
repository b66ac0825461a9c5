"""``bisect PACKAGE GOOD BAD --fixed-in``: once the first bad release is found, is it fixed since?

The package's latest release (or ``--fixed-in-upto VERSION``) is tested with everything else as
the bisection held it, as the end of a find-fix bisection from the first bad release: when it
passes, that bisection goes on to the first release that fixed it (and its commit, with
``--git-repo``); when it fails too, the answer is "still broken in X", which is what a maintainer
needs to hear (the Markdown says it in its first line).

A flag, not the default: it costs runs the user did not ask for (at least one, the latest
release; a few more when it is fixed), and a bisection bounded by an older BAD usually means the
user is looking at a past release on purpose.  An environment bisection runs it for each culprit
by default (``envdiff.remedy``): there, "what do I do today" is the question.
"""

from __future__ import annotations

from dataclasses import replace

from packaging.version import InvalidVersion, Version

from dsbisect.bisect.bisection import Bisection, plan
from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.mode import Mode
from dsbisect.core.model import Answer, IndexOptions
from dsbisect.envs.versions import listed
from dsbisect.records.results import Result
from dsbisect.run.runner import Runner


def check_upto(upto: str | None) -> None:
    """``--fixed-in-upto``: a version (checked before anything runs)."""
    if upto is None:
        return
    try:
        Version(upto)
    except InvalidVersion:
        raise InputError(f"--fixed-in-upto {upto!r} is not a version (e.g. 0.26.0)") from None


def with_fix(runner: Runner, index: IndexOptions, found: Result, upto: str | None = None) -> Result:
    """``found`` with ``fix`` (the find-fix bisection from its first bad release to ``upto`` or
    the latest release) or ``fix_note`` (why none ran)."""
    req = found.request
    if found.verdict is not Answer.FOUND or req.mode is not Mode.REGRESSION or not found.first_bad:
        return replace(found, fix_note="fixed in? not asked: the first bad release is not known")
    try:
        latest = upto or str(listed(req.package, index, req.pre)[-1])
    except DsbisectError as e:
        return replace(found, fix_note=f"fixed in? the latest release is not known: {e}")
    if Version(latest) <= Version(found.first_bad):
        which = "the bound given" if upto else "the latest release"
        return replace(found, fix_note=f"still broken: {req.package} {found.first_bad}, the first bad release, "
                                       f"is {which} ({latest}); nothing later to test")
    ask = replace(req, good=found.first_bad, bad=latest, mode=Mode.FIND_FIX, confidence=None)
    runner.progress("note", f"fixed in?: {req.package} {latest} (the {'bound' if upto else 'latest release'}), "
                            f"then the first release that passes after {found.first_bad}")
    try:
        planned = plan(ask, index)
    except DsbisectError as e:
        return replace(found, fix_note=f"fixed in? could not start: {e}")
    return replace(found, fix=Bisection(runner, index, ask).run(planned))


def fix_line(r: Result) -> str:
    """The answer in one line: ``fixed in 0.26.0 (commit abc1234567 subject): upgrade``, ``still
    broken in 0.27.1 (the latest release)``, or why it is not known; "" when not asked."""
    fix, pkg = r.fix, r.request.package
    if fix is None:
        return r.fix_note
    upto = fix.request.bad
    if fix.verdict is Answer.FOUND and fix.first_bad:
        c = fix.commit
        commit = f" (commit {c.first_bad[:10]} {c.subject})".replace(" )", ")") if c is not None and c.first_bad else ""
        return f"fixed in {pkg} {fix.first_bad}{commit}: upgrade (uv pip install '{pkg}>={fix.first_bad}')"
    if fix.verdict is Answer.NOT_REPRODUCED:
        runs = [i for s in fix.steps if s.label == upto for i in s.tally.run_ids]
        ran = f", run {' '.join(f'#{i}' for i in runs)}" if runs else ""
        return f"still broken in {pkg} {upto} (the newest release tested{ran})"
    return f"fixed in? not known: {fix.verdict.value}: {fix.message}"


def still_broken(r: Result) -> bool:
    """The newest release tested fails too (or the first bad is the newest): a maintainer's headline."""
    if r.fix is None:
        return r.fix_note.startswith("still broken")
    return r.fix.verdict is Answer.NOT_REPRODUCED
