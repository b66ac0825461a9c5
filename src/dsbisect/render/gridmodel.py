"""The grid's model: a run's records as cells (the worst outcome at each point, shown by its
last such run), the grid of a ``run`` (case -> point -> cell), its variants (one script under
several launchers or inputs), and the PEP 440 order of points.  Pure: records in, values out;
``grid`` lays them out as tables.
"""

from __future__ import annotations

import math
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import PurePath

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsbisect.core.eta import seconds_text
from dsbisect.records.inputs import Inputs, differences, same_inputs
from dsbisect.core.model import Outcome, Point
from dsbisect.core.outside import safe
from dsbisect.records.run import Host, InputFile, RunFacts, RunRecord


STYLE = {Outcome.PASS: "bold green", Outcome.FAIL: "bold red", Outcome.HANG: "bold magenta", Outcome.SKIP: "yellow"}
ICON = {Outcome.PASS: "✅", Outcome.FAIL: "❌", Outcome.HANG: "⏳", Outcome.SKIP: "⏭️"}
RANK = {o: o.rank for o in Outcome}  # the one worst-outcome order (model.WORST_FIRST)
MAX_COLUMNS = 4  # a column axis with more values than this, and than the row axis, becomes the rows


@dataclass(frozen=True)
class Cell:
    """The runs of one (case, point): the worst outcome stands for them."""

    outcome: Outcome
    counts: tuple[tuple[Outcome, int], ...]
    seconds: float
    runs: tuple[RunRecord, ...]
    number: str = ""  # the case's matrix ``metric:``, as shown: ``loss@step5 1.5`` (render.gridnumbers)
    values: tuple[float, ...] = ()  # its value in each passing run that gave one
    unit: str = ""

    @property
    def shown(self) -> RunRecord:
        """The run that shows the cell's outcome (the last such): its id, reason and signature."""
        return next(r for r in reversed(self.runs) if r.outcome is self.outcome)

    @property
    def why(self) -> str:
        r = self.shown
        return safe(r.signature or r.reason or "")

    @property
    def head(self) -> str:
        """``HANG 62 s #2``; a skip has no time."""
        if self.outcome is Outcome.SKIP:
            return f"SKIP #{self.shown.id}"
        return f"{self.outcome.value.upper()} {run_time(self.shown.seconds or 0.0)} #{self.shown.id}"

    @property
    def tally(self) -> str:
        """``hang 2, pass 1`` when the point ran more than once, else ""."""
        if sum(n for _, n in self.counts) < 2:
            return ""
        return ", ".join(f"{o.value} {n}" for o, n in self.counts)

    @property
    def text(self) -> str:
        return self.head + (f" ({self.tally})" if self.tally else "") + (f" · {self.number}" if self.number else "")


@dataclass(frozen=True)
class Variant:
    """The runs of one case that ran the same thing: one case key (script, settings, command)
    and, at each point, the same inputs.  A case name with several variants (the same script
    under torchrun and accelerate, an edited script, earlier inputs) shows each as a table of
    its own, ``label`` naming what sets it apart."""

    label: str  # the case name, with what differs when the name has several variants
    name: str
    case_key: str
    differs: tuple[str, ...]  # "torchrun", "script 0da189e7", "earlier inputs (since: MY_FIX set)"; () alone
    run_ids: tuple[int, ...]  # every recorded run of it, in the order they ran
    earlier: bool = False  # runs made before this key's latest inputs at their points
    same_as: tuple[str, ...] = ()  # variants of other case names that hold these very runs (one case key)


@dataclass(frozen=True)
class Grid:
    cases: tuple[str, ...]  # the variants' labels
    rows: tuple[tuple[str, dict[str, Cell]], ...]  # point label -> variant label -> cell, in version order
    variants: tuple[Variant, ...] = ()
    runs: tuple[RunRecord, ...] = ()  # every run of the variants, those a later attempt stands for too

    @property
    def cells(self) -> list[Cell]:
        return [c for _, row in self.rows for c in row.values()]


def displayable(r: RunRecord) -> RunRecord:
    """``r`` with each field of the type the renderers expect: a record read from an odd or
    hand-edited row (``seconds`` "abc", a host's ``gpus`` a text) is shown as far as it goes, never
    a traceback.  (The store quarantines rows it cannot read at all; ``RunFacts`` and ``Evidence``
    keep a known key of another shape aside, in ``extra``.)"""
    def number(v, kind=float):
        return kind(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    return replace(
        r, case_name=_text(r.case_name), attempt=number(r.attempt, int) or 1, exit_code=number(r.exit_code, int),
        seconds=number(r.seconds), started=number(r.started) or 0.0, finished=number(r.finished),
        reason=_text(r.reason), signature=_text(r.signature), run_dir=r.run_dir if isinstance(r.run_dir, str) else None,
        facts=_shown_facts(r.facts).without_odd(_FACT_KEYS), evidence=r.evidence.without_odd(_EVIDENCE_KEYS),
        outcome=r.outcome if isinstance(r.outcome, Outcome) else None)


def _text(v) -> str:
    return v if isinstance(v, str) else "" if v is None else str(v)


def _shown_facts(f: RunFacts) -> RunFacts:
    """The facts with the values inside them of the types the renderers read: a list of files
    with another value among them shows its files, a host's GPUs that are not text are shown as text."""
    files = f.extra.get("inputs")
    if f.inputs is None and isinstance(files, list):
        f = replace(f, inputs=tuple(InputFile.from_json(i) for i in files if isinstance(i, Mapping)))
    return replace(
        f, gpus=tuple(_text(x) for x in f.gpus) if f.gpus is not None else None,
        command=tuple(_text(x) for x in f.command) if f.command is not None else None,
        host=_shown_host(f.host) if f.host is not None else None,
        versions={_text(k): _text(v) for k, v in f.versions.items()} if f.versions is not None else None)


def _shown_host(h: Host) -> Host:
    gpus = h.extra.get("gpus")
    shown = h.without_odd(frozenset(Host.SHAPES))
    return replace(shown, gpus=tuple(_text(g) for g in gpus)) if isinstance(gpus, list) else shown


# the keys whose value renderers read, left out when of another shape (the rest is shown as it is)
_FACT_KEYS = frozenset({"command", "inputs", "host", "versions", "shadowed", "gpus", "index", "python", "cuda", "nccl",
                        "nvcc"})
_EVIDENCE_KEYS = frozenset({"notes", "escaped", "manual", "note", "survivors"})


def cell(runs: list[RunRecord]) -> Cell:
    counts = Counter(r.outcome for r in runs)
    worst = min(counts, key=lambda o: RANK[o])
    ordered = tuple(sorted(counts.items(), key=lambda kv: RANK[kv[0]]))
    secs = sum(r.seconds or 0 for r in runs) / max(1, len(runs))
    return Cell(worst, ordered, secs, tuple(runs))


def grid(runs: list[RunRecord]) -> Grid:
    """Rows are points in version order, columns the cases' variants: every recorded run is in
    one of them (a later attempt of a point stands for the earlier ones in its cell)."""
    runs = [r for r in (displayable(r) for r in runs) if r.outcome is not None]
    found = variants(runs)
    table: dict[str, dict[str, list[RunRecord]]] = {}
    points: dict[str, Point] = {}
    for v, rs in found:
        for r in rs:
            table.setdefault(r.point.label, {}).setdefault(v.label, []).append(r)
            points.setdefault(r.point.label, r.point)
    seen = {label: i for i, label in enumerate(table)}
    order = sorted(table, key=lambda label: (point_key(points[label]), seen[label]))
    rows = tuple((label, {case: cell(_by_attempt(rs)) for case, rs in table[label].items()}) for label in order)
    shown = tuple(replace(v, same_as=tuple(w.label for w, _ in found if w.name != v.name
                                           and set(w.run_ids) & set(v.run_ids))) for v, _ in found)
    return Grid(tuple(v.label for v in shown), rows, shown, tuple(runs))


def named(runs: list[RunRecord], names: dict[str, tuple[str, ...]], asked: Iterable[str] = ()) -> list[RunRecord]:
    """``runs`` and, for each other name a case key was run under (``Store.case_names``; of
    ``asked`` only, when given), the key's runs again under that name: two cases of one script
    and settings share their runs, which are recorded under the name of the first to run."""
    wanted = set(asked)
    own = {(r.case_name, r.case_key) for r in runs}
    out = list(runs)
    for key, key_names in names.items():
        mine = [r for r in runs if r.case_key == key]
        for name in key_names:
            if (name, key) in own or not mine or (wanted and name not in wanted):
                continue
            out += [replace(r, case_name=name) for r in mine if r.case_name != name]
    return out


def variants(runs: list[RunRecord]) -> list[tuple[Variant, list[RunRecord]]]:
    """The runs by variant: by case name (in the order the names first ran), then case key, and
    within a key the runs of each point's latest inputs apart from those of earlier inputs."""
    by_key: dict[str, dict[str, list[RunRecord]]] = {}
    for r in runs:
        by_key.setdefault(r.case_name, {}).setdefault(r.case_key, []).append(r)
    out: list[tuple[Variant, list[RunRecord]]] = []
    for name, keys in by_key.items():
        parts = _key_labels(name, keys)
        for key, rs in keys.items():
            current, earlier, since = _split_inputs(rs)
            differs = parts[key]
            out.append((_variant(name, key, differs, current), current))
            if earlier:
                said = f"earlier inputs (since: {', '.join(since[:4])}{' …' if len(since) > 4 else ''})" \
                    if since else "earlier inputs"
                out.append((_variant(name, key, (*differs, said), earlier, True), earlier))
    return out


def _variant(name: str, key: str, differs: tuple[str, ...], runs: list[RunRecord], earlier: bool = False) -> Variant:
    label = f"{name} [{'; '.join(differs)}]" if differs else name
    return Variant(label, name, key, differs, tuple(r.id for r in runs), earlier)


def _split_inputs(runs: list[RunRecord]) -> tuple[list[RunRecord], list[RunRecord], list[str]]:
    """(the runs of each point's latest inputs, the runs of earlier inputs, what changed since);
    runs that record no inputs (marks by hand, runs of an older dsbisect) stay with the latest."""
    latest: dict[str, Inputs] = {}
    for r in runs:
        if _inputs_of(r) is not None:
            latest[r.point.label] = _inputs_of(r)
    current, earlier, since = [], [], []
    for r in runs:
        mine, now = _inputs_of(r), latest.get(r.point.label)
        if mine is not None and now is not None and not same_inputs(mine, now):
            earlier.append(r)
            since += [d for d in differences(mine, now) if d not in since]
        else:
            current.append(r)
    return current, earlier, since


def _key_labels(name: str, keys: dict[str, list[RunRecord]]) -> dict[str, tuple[str, ...]]:
    """What tells each case key of one case name from the others (nothing when it is the only one):
    the launcher or command line, else the script's digest, else the settings' key."""
    if len(keys) == 1:
        return {k: () for k in keys}
    last = {k: rs[-1] for k, rs in keys.items()}
    heads = {k: _launcher(r.facts.command) for k, r in last.items()}
    lines = {k: _command_line(r.facts.command) for k, r in last.items()}
    scripts = {k: _script_digest(name, r) for k, r in last.items()}
    command = heads if len(set(heads.values())) > 1 else lines
    out: dict[str, tuple[str, ...]] = {k: () for k in keys}
    for part in (command, scripts):
        if len(set(part.values())) > 1:
            out = {k: (*out[k], part[k]) if part[k] else out[k] for k in keys}
    labels = [out[k] for k in keys]
    return {k: out[k] if labels.count(out[k]) == 1 else (*out[k], f"settings {k[:8]}") for k in keys}


def _launcher(command: tuple[str, ...] | None) -> str:
    """The launcher of a recorded command line: ``torchrun``, ``accelerate launch``, ``python -m
    torch.distributed.run``, ``python x.py``; "script" for a run that records no command."""
    if not command:
        return "script"
    words = [str(w) for w in command]
    prog = PurePath(words[0]).name
    if prog.startswith("python") and len(words) > 2 and words[1] == "-m":
        return f"python -m {words[2]}"
    if prog.startswith("python") and len(words) > 1:
        return f"python {PurePath(words[1]).name}"
    if prog == "accelerate" and len(words) > 1:
        return f"accelerate {words[1]}"
    return prog


def _command_line(command: tuple[str, ...] | None) -> str:
    text = shlex.join(str(w) for w in command) if command else "script"
    return text if len(text) <= 60 else text[:59] + "…"


def _script_digest(name: str, r: RunRecord) -> str:
    """``script 0da189e7``: the digest of the case's script as the run recorded it ("" unknown)."""
    for item in r.facts.inputs or ():
        if PurePath(item.path or "").stem == name and item.sha256:
            return f"script {item.sha256[:8]}"
    ran = _inputs_of(r)
    for path, sha in ran.files if ran is not None else ():
        if PurePath(path).stem == name:
            return f"script {sha[:8]}"
    return ""


def _by_attempt(runs: list[RunRecord]) -> list[RunRecord]:
    """Runs of one (variant, point): a later SKIP or re-run replaces earlier attempts of the same number."""
    by_attempt: dict[int, RunRecord] = {}
    for r in runs:
        by_attempt[r.attempt] = r
    return [by_attempt[a] for a in sorted(by_attempt)]


def _inputs_of(run: RunRecord) -> Inputs | None:
    """What a run records it ran (None: it records nothing)."""
    return run.facts.ran


def point_values(p: Point) -> dict[str, str]:
    """The point's value of each axis: a version, or ``@commit`` for a package built from git."""
    out = {}
    for n, v in p.versions:
        out[n] = f"@{p.source.short}" if p.source and canonicalize_name(n) == canonicalize_name(p.source.package) else v
    return out


def version_key(value: str) -> tuple:
    """PEP 440 order; then commits and other text, by text; "—" (no value) last."""
    try:
        return (0, Version(value), "")
    except InvalidVersion:
        return (2 if value == "—" else 1, Version("0"), value)


def point_key(p: Point) -> tuple:
    """A point's place in PEP 440 order of its axes' values."""
    return tuple((canonicalize_name(n), version_key(v)) for n, v in point_values(p).items())


def run_time(s: float) -> str:
    """A run's time as a cell shows it."""
    return seconds_text(s)  # one definition of a run's time shown, progress's too
