"""pages: what report and show read from a store, on the committed seed-2 store (2×H200: a
release bisection of transformers, and one of deepspeed that found the fixing commit)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.render import pages

SEED2 = Path(__file__).parents[2] / "docs/results/stores/2026-11-30-h200x2-seed2.sqlite3"


@pytest.fixture
def store(tmp_path) -> Path:
    folder = tmp_path / "seed2"
    (folder / "runs").mkdir(parents=True)
    shutil.copy(SEED2, folder / "dsbisect.sqlite3")
    return folder


def test_the_report_of_a_store_its_runs_and_its_answers(store):
    said: list[str] = []
    before = (store / "dsbisect.sqlite3").read_bytes()
    found = pages.store_report(store, (), None, False, said.append)
    assert len({r.id for r in found.records}) == 13 and found.key is None and found.page == ""
    assert [a.heading for a in found.found] and len(found.found) == 2
    assert said == []  # every row of the index read
    assert (store / "dsbisect.sqlite3").read_bytes() == before  # read-only: a committed store stays as it is


def test_one_bisection_by_the_start_of_its_key_with_its_page(store):
    found = pages.store_report(store, (), "c36b", True, print)
    assert found.key == "c36b1d076da92350" and len(found.found) == 1
    everything = pages.store_report(store, (), None, False, print)
    assert {r.id for r in found.records} < {r.id for r in everything.records}
    assert found.page.startswith("<!doctype html>") and "bisection c36b1d076da92350" in found.page


def test_nothing_to_report_is_said(store, tmp_path):
    with pytest.raises(DsbisectError, match=f"no runs recorded in {store} for nosuch"):
        pages.store_report(store, ("nosuch",), None, False, print)
    with pytest.raises(InputError, match="--bisection ffff: no bisection with a key starting so"):
        pages.store_report(store, (), "ffff", False, print)
    with pytest.raises(InputError):
        pages.store_report(tmp_path / "none", (), None, False, print)
    assert not (tmp_path / "none").exists()


def test_one_run_for_the_terminal_and_as_a_page(store):
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(pages.run_text(store, 1, 5))
    assert console.export_text().startswith("run 1  ")
    page = pages.run_html(store, 1, 5)
    assert "dsbisect run 1" in page
    head = page[page.index("<header>"):page.index("</header>")]  # what a maintainer reads first
    assert "<dt>environment</dt><dd>python 3.12" in head and "H200" in head
    assert "<h2>The run</h2>" in page or 'id="hangs"' in page  # never "Other runs" alone on its page
    for missing in (0, 99, 2**63):
        with pytest.raises(InputError, match=f"no run {missing} in {store}"):
            pages.run_text(store, missing, 5)
