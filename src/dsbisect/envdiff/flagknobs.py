"""Knobs that are options of the command line (``--ddp_find_unused_parameters=false``): a
transformers training script reads every ``TrainingArguments`` field as an option, so a workaround
users ship for it is often an option, not a variable or a config key.

A flag knob is set where the line has that option (its value replaced), else added at the end of
the line (an option of the script, after its last word).  The knobs' trials are made as a
bisection of two launch lines makes its trials (``settings.flag_words``): the line as given is the
good line, the line with every flag knob set is the bad one, and a trial applies some of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsbisect.core.errors import InputError
from dsbisect.envdiff.settings import Line, Where, is_option, parse_line

# Option values that turn a switch on, as transformers' HfArgumentParser reads a bool ("" is the bare switch).
ON = frozenset({"", "true", "True", "TRUE", "1", "yes", "y", "t"})


def options(line: Line) -> dict[str, str]:
    """Every option of the line, by name (the last place it is given wins)."""
    return {name: value for segment in line.segments for name, value in segment}


def line_kinds(words: Sequence[str]) -> set[str]:
    """What a command line says of the job, for the knobs' ``applies``: ``checkpointing`` where it
    turns transformers' gradient checkpointing on (``--gradient_checkpointing``)."""
    try:
        line = parse_line(words, "the command line")
    except InputError:
        return set()
    return {"checkpointing"} if options(line).get("--gradient_checkpointing") in ON else set()


def flag_lines(knobs, words: Sequence[str]) -> tuple[Line | None, Line | None, dict[str, str | None]]:
    """The line as given, the line with every flag knob set, and each flag's value now (None: absent);
    ``None, None, {}`` without a flag knob (the line is then not read as options).  Two flag knobs
    that give one option two values cannot be one line: an InputError."""
    knobs = [k for k in knobs if k.where is Where.FLAG]
    if not knobs:
        return None, None, {}
    good = parse_line(words, "the command line")
    now = options(good)
    chosen: dict[str, str] = {}
    for k in knobs:
        if chosen.get(k.name, k.value) != k.value:
            raise InputError(f"--knob flag:{k.name}: two knobs give this option two values; give one of them")
        chosen[k.name] = k.value
    return good, parse_line(set_options(words, chosen), "the command line"), {n: now.get(n) for n in chosen}


def set_options(words: Sequence[str], chosen: dict[str, str]) -> list[str]:
    """``words`` with each chosen option's value replaced where the line gives it, else added at the end."""
    out, left, i = [], dict(chosen), 0
    words = list(words)
    while i < len(words):
        w = words[i]
        name, eq, _ = w.partition("=")
        if name in left and is_option(w):
            value = left.pop(name)
            takes_next = not eq and i + 1 < len(words) and not is_option(words[i + 1])
            out += [name, value] if value else [name]
            i += 2 if takes_next else 1
            continue
        out.append(w)
        i += 1
    for name, value in left.items():
        out += [name, value] if value else [name]
    return out
