"""What a grid row says of its point: each package's version once, and short.

A point names the packages it moves (``versions``) and holds the rest as pins.  Where a package
moves at some points of a case and is only pinned at others (the trials of an environment
bisection: every trial pins the whole environment and moves a few changes), its pinned version
is its value on that axis, so no row says ``a==1.0`` among its pins and ``a —`` on the axis.
A case whose points differ in more packages than a table has room for (an environment's
trials) labels each row by what it holds apart from the point that ran first (an environment
bisection's good end; its versions said once under the table), a few of them and a count.

Pure: points in, labels out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from dsbisect.core.model import Point

MANY = 3  # moving axes beyond which rows are labelled by how they differ
SHOWN = 3  # of those differences, at most this many named in a label
NONE = "—"


def pinned(pin: str) -> tuple[str, str] | None:
    """(canonical name, version) of an exact pin (``a==1.0``), else None."""
    try:
        req = Requirement(pin)
    except InvalidRequirement:
        return None
    spec = list(req.specifier)
    if req.url or req.marker or len(spec) != 1 or spec[0].operator not in ("==", "==="):
        return None
    return canonicalize_name(req.name), spec[0].version


def axis_names(points: Sequence[Point]) -> dict[str, str]:
    """The packages some point of the case moves: canonical name -> the name as first given."""
    out: dict[str, str] = {}
    for p in points:
        for n, _ in p.versions:
            out.setdefault(canonicalize_name(n), n)
    return out


def from_pins(values: dict[str, str], p: Point, axes: dict[str, str]) -> dict[str, str]:
    """``values`` (the point's moved versions) with the pinned version of each other axis."""
    have = {canonicalize_name(n) for n in values}
    out = dict(values)
    for pin in p.pins:
        found = pinned(pin)
        if found and found[0] in axes and found[0] not in have:
            out[axes[found[0]]] = found[1]
    return out


def on_an_axis(pin: str, axes: dict[str, str]) -> bool:
    found = pinned(pin)
    return found is not None and found[0] in axes


REFERENCE = "the first point run"


@dataclass(frozen=True)
class Apart:
    """Rows labelled by how each point differs from a reference point of the case."""

    labels: tuple[str, ...]  # one per point, in the points' order; unique
    reference: tuple[str, ...]  # "a 1.0": the reference point's version of each moving axis


def apart(values: Sequence[dict[str, str]], moving: Sequence[str], reference: int = 0) -> Apart:
    """Each point's label: its versions that differ from the reference point's (``values[reference]``:
    the point that ran first, an environment bisection's good end), at most ``SHOWN`` named, then a
    count; the reference point is ``REFERENCE``."""
    ref = values[reference]
    labels = []
    for v in values:
        diff = [f"{a} {v.get(a, NONE)}" for a in moving if v.get(a, NONE) != ref.get(a, NONE)]
        more = f" and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
        labels.append(", ".join(diff[:SHOWN]) + more if diff else REFERENCE)
    seen, k, numbered = Counter(labels), Counter(), []
    for label in labels:  # two points whose named differences agree: told apart by a number
        k[label] += 1
        numbered.append(f"{label} ({k[label]})" if seen[label] > 1 else label)
    return Apart(tuple(numbered), tuple(f"{a} {ref.get(a, NONE)}" for a in moving))
