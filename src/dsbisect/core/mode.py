"""What a bisection looks for (``Mode``) and where its search puts a point (``Side``): every word
that depends on the mode, and its mapping between verdicts and sides, in one place.  No I/O.
"""

from __future__ import annotations

import enum

from dsbisect.core.model import Verdict

__all__ = ["Mode", "Side"]


class Side(enum.Enum):
    """Where a search puts a point: with the old end, with the new end, or nowhere (untestable)."""

    OLD = "old"
    NEW = "new"
    SKIP = "skip"

    @property
    def other(self) -> Side:
        """The other end (SKIP stays SKIP)."""
        return {Side.OLD: Side.NEW, Side.NEW: Side.OLD}.get(self, Side.SKIP)


class Mode(enum.Enum):
    """What a bisection looks for, and every word that depends on it.

    A search runs from an *old* end to a *new* one.  Looking for a regression, the old end is
    good and the new one bad; looking for a fix (``--find-fix``), the old end is broken (bad) and
    the new one fixed (good).  The mode maps verdicts to sides and sides to their names; the
    *defining* end is the one whose failure is the regression (the bad end; the broken one)."""

    REGRESSION = "regression"  # the first bad release after a good one
    FIND_FIX = "find-fix"  # the first good release after a bad one

    @classmethod
    def of(cls, find_fix: bool) -> Mode:
        """The mode of the ``--find-fix`` flag (and of a record's ``find_fix`` key)."""
        return cls.FIND_FIX if find_fix else cls.REGRESSION

    @property
    def find_fix(self) -> bool:
        """The ``find_fix`` value of a key or a recorded request."""
        return self is Mode.FIND_FIX

    @property
    def flipped(self) -> Mode:
        """The other mode: a search run from the new end back to the old (a downgrade's)."""
        return Mode.REGRESSION if self is Mode.FIND_FIX else Mode.FIND_FIX

    # --------------------------------------------------------------- the sides

    def side(self, v: Verdict) -> Side:
        """The side of the search a verdict puts a point on (looking for a fix, BAD is the old side)."""
        if v is Verdict.SKIP:
            return Side.SKIP
        return Side.NEW if v is self.verdict(Side.NEW) else Side.OLD

    def verdict(self, side: Side) -> Verdict:
        """The verdict of a point on ``side`` (GOOD or BAD; SKIP for SKIP)."""
        if side is Side.SKIP:
            return Verdict.SKIP
        return Verdict.BAD if (side is Side.NEW) is (self is Mode.REGRESSION) else Verdict.GOOD

    @property
    def defining(self) -> Side:
        """The end whose failure is the regression: the bad (new) end; the broken (old) one."""
        return Side.NEW if self is Mode.REGRESSION else Side.OLD

    # ---------------------------------------------------------------- the words

    def end(self, side: Side) -> str:
        """An end's name: good / bad; broken / fixed."""
        if self is Mode.REGRESSION:
            return "good" if side is Side.OLD else "bad"
        return "broken" if side is Side.OLD else "fixed"

    @property
    def old(self) -> str:
        return self.end(Side.OLD)

    @property
    def new(self) -> str:
        return self.end(Side.NEW)

    @property
    def last_old(self) -> str:
        """The answer's old point: last good / last broken."""
        return f"last {self.old}"

    @property
    def first_new(self) -> str:
        """The answer's new point: first bad / first fixed."""
        return f"first {self.new}"

    @property
    def defining_end(self) -> str:
        """bad end / broken end: where the regression is learned from."""
        return f"{self.end(self.defining)} end"

    @property
    def change(self) -> str:
        """What the new end brought: the regression / the fix."""
        return "regression" if self is Mode.REGRESSION else "fix"

    def misbehaved(self, end: Side, label: str, shown: str) -> str:
        """Why a search stops when ``end`` (labelled ``label``) did not behave as declared;
        ``shown``: what it did ("passed", "hung", "passed 3 of 3 runs")."""
        name = self.end(end)
        if end is self.defining:
            why = ("the regression does not reproduce here" if self is Mode.REGRESSION
                   else "the bug does not reproduce there; check the range")
            return f"{label} (the {name} end) {shown}: {why}"
        if self is Mode.FIND_FIX:
            return f"{label} (the {name} end) {shown}: the fix is not visible here"
        return f"{label} (the {name} end) also {shown}; widen the range"
