"""What a release bisection's points are: its package at a release, or at one commit of its
clone, with the other packages held.

``Bisection`` makes every point it tests through a ``Points`` (``ReleasePoints`` unless told
otherwise: the case's pins and the ``--pin``s, less the moving package); ``mark`` keys its
marks the same way, so that a later bisection of the case reuses them, and an environment
bisection bisects a culprit's releases with a ``Points`` of its own (the environment held).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dsbisect.core.model import Case, GitSource, Point


class Points(Protocol):
    """How a release bisection turns a release, or a commit, into the point it runs."""

    def release(self, version: str) -> Point:
        """The point of the package's release ``version``."""

    def commit(self, source: GitSource, version: str) -> Point:
        """The point of ``source`` (a commit of the package's clone, or a tree made from one)
        on the way to release ``version``."""


def held(case: Case, pins: Iterable[str], moved: Iterable[str]) -> tuple[str, ...]:
    """The case's pins and ``pins`` (``--pin``), less the ``moved`` packages', once each."""
    out = {canonicalize_name(n) for n in moved}
    kept = [p for p in (*case.pins, *pins) if canonicalize_name(Requirement(p).name) not in out]
    return tuple(dict.fromkeys(kept))


@dataclass(frozen=True)
class ReleasePoints:
    """The release engine's points: ``package`` at each release or commit, ``pins`` held."""

    package: str
    pins: tuple[str, ...]

    @classmethod
    def of(cls, case: Case, package: str, pins: Iterable[str]) -> ReleasePoints:
        """Those of a bisection of ``package`` for ``case`` with the ``--pin``s ``pins``."""
        return cls(package, held(case, pins, [package]))

    def release(self, version: str) -> Point:
        return Point(versions=((self.package, version),), pins=self.pins)

    def commit(self, source: GitSource, version: str) -> Point:
        return Point(versions=((self.package, version),), pins=self.pins, source=source)
