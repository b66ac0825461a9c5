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
STEP_X = 56
LEFT = 30  # each row's margin: the next row's first rung sits a step after this row's last
ROW = 8  # rungs a row holds: a row is 508 px, which a 640 px window shows whole
LABEL = 14  # characters of a rung's label drawn (the whole one is in its tooltip and the test order)
HEIGHT = 160
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
    """The ladder as inline SVG rows of at most ``ROW`` rungs (classes styled by the page's CSS):
    side by side where the page is wide, one under another where it is not (a 640 px window), so
    no rung is ever out of sight; the boundary drawn in the row of the first bad rung."""
    labels = [r.label for r in ladder.rungs]
    gap = _boundary_index(labels, ladder.boundary)
    rows = [range(k, min(k + ROW, len(ladder.rungs))) for k in range(0, max(len(ladder.rungs), 1), ROW)]
    return "<div class=\"ladder-rows\">" + "".join(_row(ladder, list(r), gap) for r in rows) + "</div>"


def _row(ladder: Ladder, indices: list[int], gap: int | None) -> str:
    width = LEFT * 2 + STEP_X * max(len(indices), 1)
    first = indices[0] if indices else 0
    parts = [f'<svg class="ladder" role="img" viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}" '
             f'aria-label="{esc(ladder.title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<line class="axis" x1="0" y1="{AXIS_Y}" x2="{width}" y2="{AXIS_Y}"/>']
    if gap is not None and gap in indices:
        parts += _boundary(gap - first, ladder.caveats, width)
    parts += [_rung(i - first, ladder.rungs[i]) for i in indices]
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


def _boundary(gap: int, caveats: tuple[str, ...], width: int) -> list[str]:
    x = _x(gap) - STEP_X / 2
    out = [f'<line class="boundary" x1="{x}" y1="18" x2="{x}" y2="{AXIS_Y + 14}"/>',
           f'<text class="boundary-label" x="{x}" y="14" text-anchor="middle">boundary</text>']
    for k, caveat in enumerate(caveats[:2]):
        y = 30 + 13 * k
        right = x + 9 + 6 * min(len(_short(caveat)), 24) <= width  # else the words go left of the line
        out.append(f'<g class="caveat"><title>{esc(caveat)}</title>'
                   f'<path d="M{x - 6} {y + 5} L{x + 6} {y + 5} L{x} {y - 6} Z"/>'
                   f'<text x="{x + 9 if right else x - 9}" y="{y + 4}" text-anchor="{"start" if right else "end"}">'
                   f'{esc(_short(caveat), 24)}</text></g>')
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
    label = f'<text class="rung-label" x="{x}" y="{AXIS_Y + 24}" text-anchor="end" ' \
            f'transform="rotate(-45 {x} {AXIS_Y + 24})">{esc(rung.label, LABEL)}</text>'
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
