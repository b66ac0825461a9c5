"""``dsbisect mark``, ``log`` and ``replay``: a result obtained elsewhere planned (the case made as
``bisect`` makes it), checked against the store's bisections and the index, and recorded; a
bisection's log read from the store; a log's marks recorded once each.

Everything a command names is checked before anything is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dsbisect.bisect import marks
from dsbisect.bisect.jobs import CaseChoice
from dsbisect.bisect.marks import LogLine, Planned
from dsbisect.core.errors import InputError
from dsbisect.core.model import Verdict
from dsbisect.core.files import read_small_text
from dsbisect.run import matrix
from dsbisect.run.session import make_shared
from dsbisect.run.settings import Limits, Nodes, Sources
from dsbisect.run.upkeep import read_store
from dsbisect.store.store import DB, Store, check_store_path, store_dir


@dataclass(frozen=True)
class MarkRequest:
    """``dsbisect mark VERDICT POINT... [-- COMMAND]``: what the point did, the point(s) as
    PACKAGE==VERSION words, the case, a commit (resolved in ``git_repo``) and a note."""

    verdict: Verdict
    args: Sequence[str] | None = None
    what: CaseChoice = field(default_factory=CaseChoice)
    commit: str | None = None
    git_repo: Path | None = None
    note: str | None = None


def plan_mark(request: MarkRequest, limits: Limits, nodes: Nodes) -> Planned:
    """What a mark's command line (or a replayed line) names: the case, as bisect makes it, and
    the points; nothing recorded."""
    from dsbisect.envs import facts

    items, command = marks.split_args(list(request.args or []))
    versions = marks.parse_items(items)
    if request.git_repo and not request.commit:
        raise InputError("--git-repo resolves a --commit: give --commit HASH too")
    case, _ = request.what.resolve(command or None)
    case = nodes.apply(limits.apply(case))
    if case.gpu_overrides:  # keyed as this machine's runs of the case are
        case = case.for_gpu(next(iter(facts.gpus()), None))
    source = marks.commit_source(versions[0][0], request.commit, request.git_repo) if request.commit else None
    points = marks.points_for(case, versions, matrix.check_pins(list(request.what.pin or [])), source)
    return Planned(case, tuple(points), Verdict(request.verdict), " ".join((request.note or "").split()))


def check_marked(plan: Planned, store: Path, released: bool) -> None:
    """Before anything is recorded: every marked version is one that the case's bisections in the
    store test, and (``released``: not a commit) a release the index knows, when it can tell."""
    from dsbisect.envs import versions

    folder = store_dir(store)
    st = Store(folder, readonly=True) if (folder / DB).is_file() else None
    for point in plan.points:
        for name, version in point.versions:
            ranges = marks.bisected_ranges(st, plan.case.name, name) if st is not None else []
            why = marks.out_of_range(name, version, plan.case.name, ranges)
            if not why and not ranges and released:
                why = marks.not_released(name, version, versions.release_list(name, Sources().resolve()))
            if why:
                raise InputError(why)


def marks_store(store: Path, say: Callable[[str], None]) -> Store:
    """The store marks are recorded in (made, and shared with the group, if need be); its notes said."""
    folder = check_store_path(store)
    make_shared(folder)
    the_store = Store(folder)
    for n in the_store.notes:
        say(n)
    return the_store


def mark(request: MarkRequest, store: Path, limits: Limits, nodes: Nodes, say: Callable[[str], None]) -> None:
    """Record the mark ``request`` names, one run per point, each said as it is recorded."""
    plan = plan_mark(request, limits, nodes)
    check_marked(plan, store, released=request.commit is None)
    the_store = marks_store(store, say)
    for point in plan.points:
        r = marks.record(the_store, plan.case, point, plan.mark, plan.note)
        say(f"run {r.id}: {plan.case.name} · {point.label} marked {plan.mark.value} by hand")


def log(store: Path, key: str | None) -> str:
    """The log of the bisection whose key starts with ``key`` (default: the last one): one
    ``dsbisect mark`` line per run it used."""
    the_store = read_store(store)
    return marks.log_text(the_store, marks.find_bisection(the_store, key))


def replay(file: Path, store: Path, plan_line: Callable[[LogLine], Planned], say: Callable[[str], None]) -> None:
    """Record every mark of the log ``file`` (``plan_line``: a line planned as ``mark`` plans its
    command line; every line planned before anything is recorded); marks the store holds already
    are not doubled."""
    try:
        text = read_small_text(file)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{file}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    plans = [(line, plan_line(line)) for line in marks.parse_log(text, str(file))]  # all checked first
    the_store = marks_store(store, say)
    there = marks.already(the_store, [(line.number, p) for line, p in plans])
    made = 0
    for line, plan in plans:
        for i, point in enumerate(plan.points):
            if (line.number, i) not in there:
                marks.record(the_store, plan.case, point, plan.mark, plan.note or line.comment,
                             extra={"replayed": f"{file.name}:{line.number}"})
                made += 1
    say(f"{made} mark(s) recorded in {the_store.dir}" + (f"; {len(there)} already there" if there else ""))
