"""The numbers of a finished run, read from its folder (issue 38): what dsbisect measured, what
the script wrote to the file ``DSBISECT_METRICS`` names, and what its output printed in the
forms the ecosystem prints (the Trainer's dicts, DeepSpeed's throughput lines, accelerate's
``epoch N:`` lines; ``verdict.readings`` has the parsers).

``collect`` is what a run's record keeps (``evidence.readings``); ``pattern`` reads a user's
``--metric-pattern`` from a recorded run's logs when a bisection asks (a pattern is the
bisection's, not the run's: the record keeps none, and a run recorded before the pattern was
given is read as well as a new one).  Output is read from the ranks' own logs where the run has
them (the rank from each log's name), else from the launcher's log (the rank from each line's
prefix, where it has one); at most ``TEXT_LIMIT`` bytes of a file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from dsbisect.core.files import read_small_text
from dsbisect.core.metric import Reading, Source
from dsbisect.core.rundir import RunDir, rank_of_log
from dsbisect.records.readings import Kept, kept
from dsbisect.verdict import readings as parse

__all__ = ["TEXT_LIMIT", "collect", "measured", "pattern"]

TEXT_LIMIT = 64 << 20
_PEAKS = (("peak_rss", "B"), ("peak_gpu_mem", "B"), ("peak_gpu_reserved", "B"))


def _text(path: Path) -> str:
    try:
        return read_small_text(path, TEXT_LIMIT, errors="replace")
    except OSError:
        return ""


def outputs(run: RunDir) -> list[tuple[int | None, str]]:
    """(rank, text) of the output the run's numbers are read from: each rank's log where the run
    has logs named by rank, else the launcher's."""
    ranked = [(rank, path) for path in run.rank_logs() if (rank := rank_of_log(path)) is not None]
    if ranked:
        return [(rank, _text(path)) for rank, path in ranked]
    return [(None, _text(run.launcher_log))]


def measured(run: RunDir, seconds: float | None) -> list[Reading]:
    """What dsbisect measured: the run's wall time, and each rank's peaks and step times (the
    start-up hook's ``measured/`` files)."""
    found = [Reading("wall_time", round(seconds, 3), "s", None, None, Source.MEASURED)] if seconds else []
    for rank, path in run.measured_files():
        try:
            d = json.loads(_text(path))
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        for name, unit in _PEAKS:
            value = parse.number(d.get(name))
            if value is not None:
                found.append(Reading(name, value, unit, rank, None, Source.MEASURED))
        times = d.get("step_times") if isinstance(d.get("step_times"), list) else []
        for pair in times:
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int):
                value = parse.number(pair[1])
                if value is not None:
                    found.append(Reading("step_time", value, "s", rank, pair[0], Source.MEASURED))
    return found


def collect(run: RunDir, seconds: float | None) -> Kept:
    """Every number of the run, as its record keeps them."""
    found = measured(run, seconds)
    if run.metrics.is_file():
        found += parse.jsonl_readings(_text(run.metrics))
    for rank, text in outputs(run):
        found += parse.readings(text, rank)
    return kept(found)


def pattern(run: RunDir, regex: re.Pattern, name: str) -> tuple[Reading, ...]:
    """The readings called ``name`` that ``regex`` (``verdict.readings.compile_pattern``'s) finds
    in the run's output."""
    return tuple(r for rank, text in outputs(run) for r in parse.pattern_readings(text, regex, name, rank=rank))
