"""The numbers a run printed, read from its text: one parser per format, text in, ``Reading``s out.

- a user's pattern (``compile_pattern``): a regular expression with a named group ``value``
  and, optionally, ``step``;
- JSON lines (the file whose path dsbisect passes in ``DSBISECT_METRICS``): one object a line,
  either ``{"name": ..., "value": ..., "step": ..., "unit": ..., "rank": ...}`` or a flat record
  ``{"step": 10, "loss": 2.3, ...}`` whose every numeric key is a reading;
- the dicts the Hugging Face Trainer prints (``{'loss': 2.1, 'grad_norm': ..., 'epoch': 0.5}``;
  recent releases print the floats as strings, ``{'loss': '2.119', ...}``); they carry no step
  (a step for them needs the JSON-lines file, or a pattern on another line);
- DeepSpeed's lines: the throughput timer (three forms: ``epoch=E/micro_step=M/global_step=G,
  RunningAvgSamplesPerSec=...`` from 0.8.0, ``E/S, RunningAvgSamplesPerSec=...`` in 0.7,
  ``E/S, SamplesPerSec=...`` before), the engine's ``step=N, skipped=K, lr=[...]``, the pipeline
  engine's ``steps: N loss: L iter time (s): T samples/sec: X`` and ``wall_clock_breakdown``'s
  ``time (ms) | forward: ...``;
- accelerate's example scripts' ``epoch N: {'accuracy': ..., 'f1': ...}``.

A line may start with a launcher's rank prefix (``[rank3]:``, ``[default3]:``, mpirun's
``[1,3]<stdout>:``), which gives the reading's rank.  Text from outside is inert: a name that is
not a plain identifier is dropped, a line longer than ``MAX_LINE`` is passed over, a literal is
read with ``ast.literal_eval`` (never evaluated) and at most ``MAX_READINGS`` readings come back.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator

from dsbisect.core.errors import InputError
from dsbisect.core.metric import NAME, Reading, Source

MAX_LINE = 16_384
MAX_LITERAL = 8_192
MAX_READINGS = 200_000
NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_NUMBER = re.compile(rf"^\s*({NUM})\s*$", re.I)
_UNIT = re.compile(r"^[A-Za-z/%_]{0,16}$")
_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)(\d{1,6})\]:"  # torch's [rank3]:, torchrun --tee's [default3]:
                     r"|\[\d+,(?:mpirank:)?(\d{1,6})(?:,[^\]]*)?\]<std(?:out|err)>:)")  # mpirun --tag-output

# The Trainer's keys that have a unit.
_HF_UNITS = (("_runtime", "s"), ("_samples_per_second", "samples/s"), ("_steps_per_second", "steps/s"))


def lines(text: str) -> Iterator[tuple[int | None, str]]:
    """(rank from the line's prefix, the rest) of each line of ``text`` (``\\r`` ends a line too:
    tqdm redraws its bar with it), passing over lines longer than ``MAX_LINE``."""
    for line in re.split(r"[\r\n]+", text):
        if not line or len(line) > MAX_LINE:
            continue
        m = _PREFIX.match(line)
        if m is None:
            yield None, line
        else:
            yield int(m.group(1) or m.group(2)), line[m.end():]


def number(value: object) -> float | None:
    """A reading's value: an int or float (not a bool), or a string that is one number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and (m := _NUMBER.match(value)):
        return float(m.group(1))
    return None


def _cap(found: list[Reading]) -> tuple[Reading, ...]:
    return tuple(found[:MAX_READINGS])


# ------------------------------------------------------------------ the user's pattern


def compile_pattern(text: str) -> re.Pattern:
    """The user's ``--metric-pattern``: a regular expression with a named group ``value`` (and
    optionally ``step``); an ``InputError`` (one line) when it is not one."""
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise InputError(f"--metric-pattern {text!r} is not a regular expression: {e}") from None
    if "value" not in pattern.groupindex:
        raise InputError(f"--metric-pattern {text!r} has no group named value: write (?P<value>...) "
                         "around the number")
    return pattern


def pattern_readings(text: str, pattern: re.Pattern, name: str, unit: str = "",
                     rank: int | None = None) -> tuple[Reading, ...]:
    """A reading called ``name`` for each match of ``pattern`` (every match on every line) whose
    ``value`` group is a number; ``step`` from the group of that name when it is an integer."""
    found = []
    for line_rank, line in lines(text):
        for m in pattern.finditer(line):
            value = number(m.group("value"))
            if value is None:
                continue
            step = m.groupdict().get("step")
            step = int(step) if step is not None and step.isdigit() else None
            found.append(Reading(name, value, unit, _rank(rank, line_rank), step, Source.PATTERN))
    return _cap(found)


def _rank(given: int | None, from_line: int | None) -> int | None:
    return given if given is not None else from_line


# ------------------------------------------------------------------ JSON lines


def jsonl_readings(text: str, rank: int | None = None) -> tuple[Reading, ...]:
    """The readings of a JSON-lines file; lines that are not a JSON object are passed over."""
    found: list[Reading] = []
    for line_rank, line in lines(text):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            found += _record(record, _rank(_int(record.get("rank")), _rank(rank, line_rank)))
    return _cap(found)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _record(record: dict, rank: int | None) -> list[Reading]:
    step = _int(record.get("step"))
    if "name" in record and "value" in record:
        name, value, unit = record["name"], number(record["value"]), record.get("unit", "")
        ok = isinstance(name, str) and NAME.match(name) and value is not None
        unit = unit if isinstance(unit, str) and _UNIT.match(unit) else ""
        return [Reading(name, value, unit, rank, step, Source.JSONL)] if ok else []
    return [Reading(k, v, "", rank, step, Source.JSONL) for k, raw in record.items()
            if k not in ("step", "rank") and isinstance(k, str) and NAME.match(k)
            and not isinstance(raw, str) and (v := number(raw)) is not None]


# ------------------------------------------------------------------ printed Python dicts


def literal_dict(text: str) -> dict | None:
    """A printed Python dict (``{'loss': 2.1, ...}``), read with ``ast.literal_eval`` and a size
    bound; None when ``text`` is not one."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > MAX_LITERAL:
        return None
    try:
        found = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def _dict_readings(d: dict, rank: int | None, source: Source, units=()) -> list[Reading]:
    """A reading per numeric entry; an integer ``step`` entry is the step of the others."""
    step, out = _int(d.get("step")), []
    for key, raw in d.items():
        value = number(raw)
        if isinstance(key, str) and key != "step" and NAME.match(key) and value is not None:
            unit = next((u for suffix, u in units if key.endswith(suffix)), "")
            out.append(Reading(key, value, unit, rank, step, source))
    return out


def hf_trainer_readings(text: str, rank: int | None = None) -> tuple[Reading, ...]:
    """The Trainer's logged dicts: a reading per numeric entry, ``*_runtime`` in s,
    ``*_samples_per_second`` in samples/s; no step unless the dict has one (the PyTorch Trainer
    prints none; the TensorFlow one did)."""
    found: list[Reading] = []
    for line_rank, line in lines(text):
        at = line.find("{'")  # after a progress bar's remains, when tqdm did not end it
        if at >= 0 and (d := literal_dict(line[at:])) is not None:
            found += _dict_readings(d, _rank(rank, line_rank), Source.HF_TRAINER, _HF_UNITS)
    return _cap(found)


_ACCELERATE = re.compile(r"^\s*epoch (\d+):\s*(\{.*\})\s*$")


def accelerate_readings(text: str, rank: int | None = None) -> tuple[Reading, ...]:
    """accelerate's example scripts' ``epoch N: {'accuracy': ..., 'f1': ...}`` (no step)."""
    found: list[Reading] = []
    for line_rank, line in lines(text):
        if (m := _ACCELERATE.match(line)) and (d := literal_dict(m.group(2))) is not None:
            found += _dict_readings(d, _rank(rank, line_rank), Source.ACCELERATE)
    return _cap(found)


# ------------------------------------------------------------------ DeepSpeed


_DS_WHERE = re.compile(r"(?:epoch=(\d+)/micro_step=\d+/global_step=(\d+)|(?<![\w/=.])\d+/(\d+)), "
                       r"(?=(?:RunningAvg)?SamplesPerSec=)")
_DS_PAIR = re.compile(rf"\b(\w+)=({NUM})(?:GB)?(?=,|\s|$)", re.I)
# The timer's key -> the readings it gives.  ``samples_per_sec`` is the running average in every
# release (before 0.7 the only figure, ``SamplesPerSec``, was that average), so that a bisection
# across the change of format compares one quantity.
_DS_TIMER = {"RunningAvgSamplesPerSec": (("samples_per_sec", "samples/s"),
                                        ("running_avg_samples_per_sec", "samples/s")),
             "SamplesPerSec": (("samples_per_sec", "samples/s"),),
             "CurrSamplesPerSec": (("curr_samples_per_sec", "samples/s"),),
             "MemAllocated": (("mem_allocated", "GiB"),),  # DeepSpeed divides by 1024**3
             "MaxMemAllocated": (("max_mem_allocated", "GiB"),)}
_DS_PROGRESS = re.compile(rf"\bstep=(\d+), skipped=(\d+), lr=\[({NUM})", re.I)
_DS_PIPE = re.compile(rf"\bsteps: (\d+) loss: ({NUM}) .*?iter time \(s\): ({NUM}) samples/sec: ({NUM})", re.I)
_DS_TIMES = re.compile(rf"\| ([\w.-]{{1,58}}): ({NUM})(?= \||\s*$)", re.I)
_DS_RANK = re.compile(r"\[Rank (\d{1,6})\]")


def deepspeed_readings(text: str, rank: int | None = None) -> tuple[Reading, ...]:
    """DeepSpeed's throughput-timer, progress, pipeline and wall-clock-breakdown lines."""
    found: list[Reading] = []
    for line_rank, line in lines(text):
        m = _DS_RANK.search(line)
        who = _rank(rank, line_rank if line_rank is not None else int(m.group(1)) if m else None)
        found += _ds_line(line, who)
    return _cap(found)


def _ds_line(line: str, rank: int | None) -> list[Reading]:
    def r(name: str, value: str, unit: str = "", step: int | None = None) -> Reading:
        return Reading(name, float(value), unit, rank, step, Source.DEEPSPEED)

    if m := _DS_WHERE.search(line):
        step = int(m.group(2) or m.group(3))
        return [r(name, value, unit, step) for key, value in _DS_PAIR.findall(line[m.end():])
                for name, unit in _DS_TIMER.get(key, ())]
    if m := _DS_PROGRESS.search(line):
        step = int(m.group(1))
        return [r("skipped_steps", m.group(2), "", step), r("lr", m.group(3), "", step)]
    if m := _DS_PIPE.search(line):
        step = int(m.group(1))
        return [r("loss", m.group(2), "", step), r("iter_time", m.group(3), "s", step),
                r("pipe_samples_per_sec", m.group(4), "samples/s", step)]
    if (at := line.find("time (ms) |")) >= 0:
        return [r(f"time_{key}", value, "ms") for key, value in _DS_TIMES.findall(line[at:])]
    return []


def readings(text: str, rank: int | None = None) -> tuple[Reading, ...]:
    """Every reading of the formats the ecosystem prints (Trainer, DeepSpeed, accelerate), in
    that order: what a rank's or a launcher's log gives with no pattern from the user."""
    return _cap([*hf_trainer_readings(text, rank), *deepspeed_readings(text, rank),
                 *accelerate_readings(text, rank)])
