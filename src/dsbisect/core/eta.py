"""How long: a run's duration as every report shows it, the ticking clock of the progress line,
and the time a search or a matrix has left, from the rounds that ran so far.  No I/O.

One definition of a run's time: the seconds its record holds (from the launch to its verdict
recorded), shown by ``seconds_text`` wherever it is shown (the grid's ``HANG 16 s``, the
progress line's ``hang in 16 s``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def seconds_text(s: float) -> str:
    """``9.5 s``, ``62 s``, ``12 min``: a run's time, the same in the grid and in progress."""
    if not math.isfinite(s) or s < 0:
        return "? s"
    if s >= 600:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def clock(s: float) -> str:
    """``0:07``, ``1:42``, ``1:02:03``: the ticking clock of what is under way."""
    total = max(0, int(s)) if math.isfinite(s) else 0
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def time_left(rounds: Sequence[float], left: int) -> float | None:
    """Seconds that ``left`` more rounds take, at the median of the rounds that ran so far
    (their wall times; a round is a step of a search, or one finished point of a matrix).
    None when nothing ran yet, or nothing is left.  The median, not the mean: the first
    rounds build venvs and compile ops, the later ones reuse them (and one slow outlier, a
    hang that waited its timeout, does not double the figure)."""
    ran = sorted(r for r in rounds if math.isfinite(r) and r >= 0)
    if not ran or left <= 0:
        return None
    mid = len(ran) // 2
    median = ran[mid] if len(ran) % 2 else (ran[mid - 1] + ran[mid]) / 2
    return median * left


def pace(later: Sequence[float], launched: Sequence[float]) -> list[float]:
    """The rounds a search's time left is figured from: the wall times of the rounds after its
    ends, once there are some; until then, the ends' own run times (launch to verdict).  The ends'
    round also built both venvs and cached the base's bytecode, once: figured from its wall time,
    the first estimate ran high by all of that, times every step left."""
    return list(later) or list(launched)


def about(s: float | None) -> str:
    """``about 40 s``, ``about 7 min``, ``about 1 h 20 min`` ("" for None): a rough figure, said as one."""
    if s is None or not math.isfinite(s):
        return ""
    if s < 100:  # "about 1 min" would be 88 s said as 60
        return f"about {max(10, round(s / 10) * 10):.0f} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"about {minutes} min"
    h, m = divmod(minutes, 60)
    return f"about {h} h {m} min" if m else f"about {h} h"


def rounds_of(points: int, width: int) -> int:
    """How many rounds ``points`` take, ``width`` of them at once."""
    return -(-max(0, points) // max(1, width))
