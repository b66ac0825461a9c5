"""What to do today about a culprit an environment bisection found, each answer run.

For a culprit whose first bad release is known, with every other package held at the bad
environment (the user's, as it is):

- **the pin that avoids it**: the culprit at its last good release.  Run as a release
  bisection of the two adjacent releases in that context (both ends run): it holds when the
  last good release passes there and the first bad one fails;
- **is it already fixed?**: the culprit's latest release in that context.  A find-fix
  bisection from the bad environment's release to the latest: its ends say whether the latest
  passes, its search which release fixed it.  When the bad environment already has the latest,
  that is the answer ("still broken in the latest release"), with no run.

The fix search is the default, not a flag: the user of an environment bisection asks "what do
I do", and an upgrade is the first answer when one exists; it costs two runs when the latest
is still bad, a few more when it is not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from dsbisect.bisect.bisection import Bisection, Plan, plan
from dsbisect.bisect.points import Points
from dsbisect.core.errors import DsbisectError
from dsbisect.core.mode import Mode
from dsbisect.core.model import Answer, IndexOptions
from dsbisect.records.results import Confounder, Request, Result
from dsbisect.envs.versions import listed
from dsbisect.run.runner import Runner


@dataclass(frozen=True)
class Remedy:
    """The remedies of one culprit, as run (``pin``/``fix``: the bisections that ran them)."""

    package: str
    last_good: str
    first_bad: str
    bad_version: str                # the culprit's release in the bad environment
    pin: Result | None = None       # last good vs first bad, others at the bad environment
    latest: str | None = None
    fix: Result | None = None       # find-fix from bad_version to latest (None: bad_version is the latest)
    note: str = ""                  # why a remedy could not be run
    moved: tuple[Confounder, ...] = ()  # pins uv had to move for a release of the culprit (what it drags along)
    others: tuple[str, ...] = ()    # the other causes' changes, reverted while this one's remedy ran

    @property
    def pin_holds(self) -> bool:
        return self.pin is not None and self.pin.verdict is Answer.FOUND

    @property
    def fixed_in(self) -> str | None:
        """The first release that passes in the bad environment (None: not fixed, or not known)."""
        return self.fix.first_bad if self.fix is not None and self.fix.verdict is Answer.FOUND else None

    @property
    def still_bad(self) -> bool:
        """The latest release fails in the bad environment (run, or the bad environment has it)."""
        if self.latest is None:
            return False
        return self.fix is None or self.fix.verdict is Answer.NOT_REPRODUCED

    def _drags(self, version: str | None) -> str:
        moved = [m for x in self.moved if x.version == version for m in x.moved]
        return f"; it moves {', '.join(moved)}" if moved else ""

    @property
    def _changed(self) -> str:
        if not self.others:
            return "only this changed"
        return f"this changed and the other cause{'s' if len(self.others) > 1 else ''} reverted ({', '.join(self.others)})"

    def lines(self) -> tuple[str, ...]:
        """The remedy in words, each a line a user can act on (pasteable pins first)."""
        out = []
        pin = f"{self.package}=={self.last_good}"
        if self.pin_holds:
            out.append(f"pin: {pin}   (uv pip install '{pin}'; the bad environment with {self._changed} "
                       f"passed: run {_run_of(self.pin, self.last_good)}{self._drags(self.last_good)})")
        elif self.pin is not None:
            out.append(f"pin {pin} does not avoid it alone: {self.pin.message or self.pin.verdict.value}")
        if self.fixed_in:
            out.append(f"fixed in {self.package} {self.fixed_in}: upgrade   (uv pip install "
                       f"'{self.package}>={self.fixed_in}'; passed: run {_run_of(self.fix, self.fixed_in)}"
                       f"{self._drags(self.fixed_in)})")
        elif self.still_bad:
            where = "the bad environment's own" if self.fix is None else f"run {_run_of(self.fix, self.bad_version, self.latest)}"
            out.append(f"still broken in the latest release, {self.package} {self.latest} ({where})")
        elif self.fix is not None:
            out.append(f"fixed in a later release? not known: {self.fix.verdict.value}: {self.fix.message}")
        if self.note:
            out.append(self.note)
        return tuple(out)

    def to_json(self) -> dict:
        return {"package": self.package, "last_good": self.last_good, "first_bad": self.first_bad,
                "bad_version": self.bad_version, "pin": f"{self.package}=={self.last_good}",
                "pin_holds": self.pin_holds, "latest": self.latest, "fixed_in": self.fixed_in,
                "still_bad": self.still_bad, "lines": list(self.lines()),
                "pin_bisection": self.pin.to_json() if self.pin else None,
                "fix_bisection": self.fix.to_json() if self.fix else None, "note": self.note,
                "moved": [x.to_json() for x in self.moved], "others_reverted": list(self.others)}


def _run_of(result: Result, *versions: str) -> str:
    """The run ids of the steps at ``versions`` (the last one that has any), as ``#12``."""
    for version in reversed(versions):
        ids = [i for s in result.steps if s.label == version for i in s.tally.run_ids]
        if ids:
            return " ".join(f"#{i}" for i in ids)
    return "?"


MakePoints = Callable[[str, Plan, tuple[str, ...]], tuple[Points, list[Confounder]]]


def remedy(runner: Runner, index: IndexOptions, found: Result, bad_pins: tuple[str, ...],
           bad_version: str, points: MakePoints, others: tuple[str, ...] = ()) -> Remedy:
    """The remedies of the culprit ``found`` names (a release bisection that answered), every
    other package at ``bad_pins`` (the bad environment's, the culprit's own left out here);
    ``points`` makes a release's point with the pins uv must move for it moved (and says which);
    ``others``: the other causes' changes, already reverted in ``bad_pins`` (for the words)."""
    name = found.request.package
    context = tuple(p for p in bad_pins if canonicalize_name(Requirement(p).name) != canonicalize_name(name))
    base = Request(package=name, good=found.last_good, bad=found.first_bad, case=found.request.case,
                   pins=context, regress_on=found.request.regress_on, mode=Mode.REGRESSION,
                   repeat=found.request.repeat, signature=found.request.signature, width=found.request.width,
                   any_failure=found.request.any_failure)
    pin, moved = _bisect(runner, index, base, points)
    out = Remedy(name, found.last_good, found.first_bad, bad_version, pin, moved=tuple(moved), others=others)
    try:
        latest = str(listed(name, index)[-1])
    except DsbisectError as e:
        return replace(out, note=f"latest release unknown: {e}")
    if Version(latest) <= Version(bad_version):
        return replace(out, latest=latest)
    fix, more = _bisect(runner, index, replace(base, good=bad_version, bad=latest, mode=Mode.FIND_FIX), points)
    return replace(out, latest=latest, fix=fix, moved=(*out.moved, *more))


def _bisect(runner: Runner, index: IndexOptions, req: Request, points: MakePoints) -> tuple[Result, list[Confounder]]:
    planned = plan(req, index)
    made, moved = points(req.package, planned, req.pins)
    return Bisection(runner, index, req, made).run(planned), moved
