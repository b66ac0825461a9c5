"""A bisection as a ladder: every candidate on one axis, the tested ones coloured by outcome
and numbered in the order they were tested, the boundary, and the caveats where they lie.

Pure: frozen dataclasses in, an inline SVG string out (``svg``).  Every word that came from a
run or a record is redacted and HTML-escaped here (``esc``); each tested point links to its
run's section of the page (``#run-<id>``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from dsbisect.core.outside import clip, safe
from dsbisect.core.paths import unlocal

OUTCOMES = ("pass", "fail", "hang", "skip")
STEP_X = 64
LEFT = 44
HEIGHT = 150
AXIS_Y = 70


@dataclass(frozen=True)
class Tested:
    order: int  # 1 = tested first
    outcome: str  # pass, fail, hang, skip
    verdict: str  # good, bad, skip
    run_ids: tuple[int, ...]
    manual: bool  # a result marked by hand (dsbisect mark), not run
    detail: str


@dataclass(frozen=True)
class Rung:
    label: str  # a version, a short hash, a trial's name
    tested: Tested | None = None
    subject: str = ""  # a commit's subject


@dataclass(frozen=True)
class Ladder:
    title: str
    stage: str  # release, commit, env
    rungs: tuple[Rung, ...]  # in axis order (oldest first)
    boundary: tuple[str, str] | None  # (last good, first bad) labels, as the answer gives them
    caveats: tuple[str, ...]  # what lies between the boundary's ends untested (yanked, not in the wheelhouse)
    verdict: str
    note: str


def esc(text: object, limit: int | None = None) -> str:
    """Outside text as inert HTML: secrets masked, control characters shown, paths shown as a
    published report shows them (``paths.unlocal``), markup escaped;
    cut to ``limit`` characters only after the masking (a cut secret no longer looks like one)."""
    shown = unlocal(safe("" if text is None else str(text)))  # a published page: no local folder layout
    if limit is not None:
        shown = clip(shown, limit)
    return html.escape(shown, quote=True)


def mark(t: Tested) -> str:
    """The class a tested point is drawn with: its outcome, or 'marked' for a result given by hand."""
    return "marked" if t.manual else (t.outcome if t.outcome in OUTCOMES else "skip")


def svg(ladder: Ladder) -> str:
    """The ladder as one inline SVG (classes styled by the page's CSS)."""
    n = max(len(ladder.rungs), 1)
    width = LEFT * 2 + STEP_X * n
    parts = [f'<svg class="ladder" role="img" viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}" '
             f'aria-label="{esc(ladder.title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<line class="axis" x1="{LEFT}" y1="{AXIS_Y}" x2="{width - LEFT}" y2="{AXIS_Y}"/>']
    labels = [r.label for r in ladder.rungs]
    gap = _boundary_index(labels, ladder.boundary)
    if gap is not None:
        parts += _boundary(gap, ladder.caveats)
    for i, rung in enumerate(ladder.rungs):
        parts.append(_rung(i, rung))
    parts.append("</svg>")
    return "".join(parts)


def _x(i: int) -> float:
    return LEFT + STEP_X * i + STEP_X / 2


def _boundary_index(labels: list[str], boundary: tuple[str, str] | None) -> int | None:
    """The index of the first bad rung when the last good one lies just before it."""
    if boundary is None:
        return None
    good, bad = boundary
    if good in labels and bad in labels:
        i, j = labels.index(good), labels.index(bad)
        return max(i, j) if abs(i - j) == 1 else None
    return None


def _boundary(gap: int, caveats: tuple[str, ...]) -> list[str]:
    x = _x(gap) - STEP_X / 2
    out = [f'<line class="boundary" x1="{x}" y1="18" x2="{x}" y2="{AXIS_Y + 14}"/>',
           f'<text class="boundary-label" x="{x}" y="14" text-anchor="middle">boundary</text>']
    for k, caveat in enumerate(caveats[:2]):
        y = 30 + 13 * k
        out.append(f'<g class="caveat"><title>{esc(caveat)}</title>'
                   f'<path d="M{x - 6} {y + 5} L{x + 6} {y + 5} L{x} {y - 6} Z"/>'
                   f'<text x="{x + 9}" y="{y + 4}">{esc(_short(caveat), 40)}</text></g>')
    return out


def _short(caveat: str) -> str:
    """'4.1.1 (yanked) lies between …' -> '4.1.1 (yanked)'; 'the index has 2.0 … wheelhouse lacks' -> 'not in the wheelhouse: 2.0'."""
    if "(yanked)" in caveat:
        return caveat.split(" lie", 1)[0]
    if "wheelhouse" in caveat and caveat.startswith("the index has "):
        return "not in the wheelhouse: " + caveat.removeprefix("the index has ").split(" between", 1)[0]
    return caveat


def _rung(i: int, rung: Rung) -> str:
    x = _x(i)
    label = f'<text class="rung-label" x="{x}" y="{AXIS_Y + 26}" text-anchor="end" ' \
            f'transform="rotate(-35 {x} {AXIS_Y + 26})">{esc(rung.label, 22)}</text>'
    t = rung.tested
    if t is None:
        return f'<g class="rung untested"><title>{esc(rung.label)}: not tested</title>' \
               f'<circle cx="{x}" cy="{AXIS_Y}" r="5"/>{label}</g>'
    tip = f"{rung.label} {rung.subject} — test {t.order}: {t.outcome.upper()}" + \
        (" (marked by hand)" if t.manual else "") + (f", {t.verdict}" if t.verdict else "") + \
        (f" — {t.detail}" if t.detail else "")
    body = (f'<circle class="point {mark(t)}" cx="{x}" cy="{AXIS_Y}" r="11"/>'
            f'<text class="order" x="{x}" y="{AXIS_Y + 4}" text-anchor="middle">{t.order}</text>'
            f'<text class="outcome-word" x="{x}" y="{AXIS_Y - 18}" text-anchor="middle">{esc(mark(t).upper())}</text>')
    inner = f'<title>{esc(tip, 400)}</title>{body}{label}'
    if t.run_ids:
        return f'<a class="rung tested" href="#run-{t.run_ids[0]}" data-label="{esc(rung.label)}">{inner}</a>'
    return f'<g class="rung tested" data-label="{esc(rung.label)}">{inner}</g>'


def tested_order(ladder: Ladder) -> list[str]:
    """The tested labels in the order they were tested."""
    tested = [(r.tested.order, r.label) for r in ladder.rungs if r.tested is not None]
    return [label for _, label in sorted(tested)]
