"""What ``dsbisect report`` and ``dsbisect show`` read from a store, ready to print: the runs (of
some cases, or of one bisection) with the bisections' answers and, when asked, the HTML page
(ladders, rank views, flight-recorder dumps); one run as the terminal or a page shows it.

The store is opened read-only: a shared or committed store reports as well as one's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import RenderableType

from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.records.run import RunRecord
from dsbisect.render.answers import Answered, answered
from dsbisect.render.grid import named
from dsbisect.run.upkeep import read_store
from dsbisect.store.store import Store

MAX_ID = 2**63 - 1  # SQLite's largest integer: a larger run id names no run


@dataclass(frozen=True)
class StoreReport:
    """A store's runs as ``report`` shows them, the bisections' answers above them, the key of
    the one bisection asked for (None: all), and the HTML page ("" when not asked)."""

    records: tuple[RunRecord, ...]
    found: tuple[Answered, ...]
    key: str | None
    page: str


def store_report(store: Path, cases: Sequence[str], bisection: str | None, html: bool,
                 say: Callable[[str], None]) -> StoreReport:
    """The report of ``store``: the runs of ``cases`` (all when empty) or of the bisection whose
    key starts with ``bisection``; rows of the index that could not be read are said; a
    DsbisectError when no run is left to show."""
    the_store = read_store(store)
    records = [r for r in named(the_store.runs(list(cases) or None), the_store.case_names(), cases)
               if not cases or r.case_name in cases]
    for note in the_store.notes:  # rows of the index that could not be read, named
        say(note)
    key = _bisection_key(the_store, bisection)
    if key is not None:
        from dsbisect.render.htmlsource import bisection_runs

        records = bisection_runs(the_store, key, records)
    if not records:
        raise DsbisectError(f"no runs recorded in {store}" + (f" for {', '.join(cases)}" if cases else "")
                            + (f" for bisection {key}" if key else ""))
    page = _store_html(the_store, records, key, tuple(cases)) if html else ""
    found = answered([b for b in the_store.bisections() if key is None or b.key == key], cases)
    return StoreReport(tuple(records), tuple(found), key, page)


def _bisection_key(store: Store, prefix: str | None) -> str | None:
    if prefix is None:
        return None
    from dsbisect.render.htmlsource import find_bisection

    return find_bisection(store, prefix)


def _store_html(store: Store, records: list[RunRecord], key: str | None, cases: tuple[str, ...]) -> str:
    from dsbisect.render.htmlreport import render
    from dsbisect.render.htmlsource import store_page

    title = "dsbisect report" + (f" · bisection {key}" if key else "")
    return render(store_page(store, records, key, title=title, cases=cases))


def _run(store: Store, run_id: int, path: Path) -> RunRecord:
    record = store.run(run_id) if 0 < run_id <= MAX_ID else None
    if record is None:
        raise InputError(f"no run {run_id} in {path}")
    return record


def run_html(store: Path, run_id: int, lines: int) -> str:
    """``show --format html``: one run as a self-contained page (``lines`` of each log)."""
    from dsbisect.render.htmlreport import render
    from dsbisect.render.htmlsource import one_run_page

    the_store = read_store(store)
    return render(one_run_page(_run(the_store, run_id, store), the_store.dir, lines))


def run_text(store: Path, run_id: int, lines: int) -> RenderableType:
    """``show``: one run for the terminal: outcome, environment, hang signature, stacks, log tails."""
    from dsbisect.render.show import render_run

    return render_run(_run(read_store(store), run_id, store), lines)
