"""Every cause of an environment bisection, in words: each cause's culprits, the check after it
(the bad environment with every cause so far reverted, run), and the verified last line.

``search.causes.find_causes`` finds the causes (pure); the engine bisects each cause's culprits
to a release as it does the first's (``EnvResult.releases`` holds them all, in cause order) and
runs each one's remedy with the *other* causes reverted (a pin cannot avoid a bug that a second
change brings on its own).  This module holds the ``Cause`` records the reports show
(``result.every_cause`` makes them from the search's answer and the engine's trials) and says
how the loop ended:

- ``passes``: "the bad environment with these 2 changes reverted passes (run 31)";
- ``untestable``: the bad environment with them reverted could not be tried (uv's reason), or it
  fails otherwise than the regression did -- "another failure", not searched further, since the
  trials judge by the regression's identity;
- ``budget``: ``MAX_CAUSES`` causes found and it still fails as the bad one did.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from dsbisect.core.model import Answer, Outcome
from dsbisect.core.outside import clip
from dsbisect.records.results import TrialRun
from dsbisect.envdiff.settings import change_json
from dsbisect.search.causes import End
from dsbisect.search.steps import Side

if typing.TYPE_CHECKING:
    from dsbisect.envdiff.environments import Change
    from dsbisect.records.results import Result

MAX_CAUSES = 4  # each cause costs a search, a release bisection and its remedy runs; say so past it


@dataclass(frozen=True)
class Cause:
    """One cause: a 1-minimal set of the changes left when it was searched for."""

    culprits: tuple[int, ...]
    required: tuple[int, ...]
    exact: bool
    verdict: Answer
    note: str
    check: TrialRun  # the bad environment with this and every earlier cause reverted


@dataclass(frozen=True)
class EveryCause:
    causes: tuple[Cause, ...]  # the first is the EnvResult's own culprits
    end: End
    total: int  # the number of changes
    ends: str = "environment"  # what the two ends are: environment, config, vars, command, settings

    @property
    def reverted(self) -> tuple[int, ...]:
        return tuple(sorted(i for c in self.causes for i in c.culprits))

    def check_line(self, k: int) -> str:
        """What the check after cause ``k`` (0-based) showed, in a line."""
        cause, reverted = self.causes[k], sorted(i for c in self.causes[:k + 1] for i in c.culprits)
        check = cause.check
        n = len(reverted)
        what = f"the bad {self.ends} with {'this change' if n == 1 else f'these {n} changes'} reverted"
        if n == self.total:
            what = f"the bad {self.ends} with all {n} changes reverted (the good {self.ends})"
        runs = _runs(check)
        if check.side is Side.OLD:
            did = "passes" if check.outcome is Outcome.PASS else f"behaves as the good one ({check.outcome.value})"
            return f"{what} {did} ({runs})"
        if check.side is Side.NEW:
            tail = f": stopped after {len(self.causes)} causes (the limit)" if k == len(self.causes) - 1 else \
                f"; searched again among the {self.total - n} changes left"
            return f"{what} still {_did(check.outcome)} as the bad one did, at the regression's identity ({runs}){tail}"
        if check.outcome in (Outcome.FAIL, Outcome.HANG):
            return (f"{what} {_did(check.outcome)} otherwise than the regression, another failure ({runs}: "
                    f"{clip(check.detail, 200)}): not searched further; bisect it on its own "
                    "(--signature, or --regress-on for its kind)")
        return f"{what} could not be tried ({runs}: {clip(check.detail, 200)}): no further cause can be told"

    @property
    def verified(self) -> str:
        """The last line: how the loop ended."""
        return self.check_line(len(self.causes) - 1)

    def to_json(self, changes: Sequence[Change], releases: Sequence[Result]) -> dict:
        names = {canonicalize_name(changes[i].name): k for k, c in enumerate(self.causes) for i in c.culprits}
        return {
            "end": self.end.value,
            "verified": self.verified,
            "reverted": [changes[i].name for i in self.reverted],
            "causes": [{"culprits": [changes[i].name for i in c.culprits],
                        "culprit_changes": [change_json(changes[i]) for i in c.culprits],
                        "required": [changes[i].name for i in c.required], "exact": c.exact,
                        "verdict": c.verdict.value, "note": c.note, "check": c.check.to_json(),
                        "check_line": self.check_line(k),
                        "releases": [x.request.package for x in releases
                                     if names.get(canonicalize_name(x.request.package)) == k]}
                       for k, c in enumerate(self.causes)],
        }


def others(every: EveryCause | None, changes, package: str) -> frozenset[int]:
    """The culprits of every cause but the one ``package`` belongs to (reverted while its remedy runs)."""
    if every is None or len(every.causes) < 2:
        return frozenset()
    mine = next((c for c in every.causes if any(canonicalize_name(changes[i].name) == canonicalize_name(package)
                                                  for i in c.culprits)), None)
    return frozenset(i for c in every.causes if c is not mine for i in c.culprits)


def _did(outcome: Outcome) -> str:
    return {Outcome.HANG: "hangs", Outcome.FAIL: "fails", Outcome.PASS: "passes"}.get(outcome, "was skipped")


def _runs(t: TrialRun) -> str:
    ids = ", ".join(str(i) for i in t.run_ids)
    return f"run{'s' if len(t.run_ids) > 1 else ''} {ids}" if ids else "no run"
