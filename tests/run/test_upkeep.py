"""upkeep: a store read without writing it, a lost index rebuilt, the venv cache listed and pruned;
bad input is one InputError and changes nothing."""

from __future__ import annotations

import math

import pytest

from dsbisect.core.errors import InputError
from dsbisect.core.model import Outcome, Point
from dsbisect.run.upkeep import cached_envs, prune_envs, read_store, repair_store
from dsbisect.store.store import DB, Store


def test_a_store_is_read_as_it_is_and_a_missing_one_is_bad_input(tmp_path):
    with pytest.raises(InputError):
        read_store(tmp_path / "none")
    assert not (tmp_path / "none").exists()
    st = Store(tmp_path / "st")
    rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), "env", 1)
    st.finish_run(rid, Outcome.PASS, 0, 1.0)
    st.close()
    before = (tmp_path / "st" / DB).read_bytes()
    assert [r.id for r in read_store(tmp_path / "st").runs(None)] == [rid]
    assert (tmp_path / "st" / DB).read_bytes() == before


def test_a_lost_index_is_rebuilt_from_the_run_folders(tmp_path):
    st = Store(tmp_path / "st")
    rid = st.start_run("toy", "k", Point(versions=(("dsb-toy", "1.0.0"),)), "env", 1)
    st.finish_run(rid, Outcome.FAIL, 1, 1.0)
    st.close()
    for p in (tmp_path / "st").glob(f"{DB}*"):
        p.unlink()
    said = repair_store(tmp_path / "st")
    assert not any("moved" in s for s in said)  # there was no database to move aside
    assert [r.outcome for r in read_store(tmp_path / "st").runs(None)] == [Outcome.FAIL]


@pytest.mark.parametrize("everything, days, said", [
    (False, None, "say which venvs: --all, or --older-than DAYS"),
    (True, 3.0, "say which venvs"),
    (False, math.nan, "--older-than nan: expected a number of days"),
    (True, None, "no venv cache in"),
])
def test_prune_says_what_it_needs(tmp_path, everything, days, said):
    with pytest.raises(InputError, match=said):
        prune_envs(tmp_path / "cache", everything, days)
    assert not (tmp_path / "cache").exists()


def test_an_empty_cache_lists_nothing_and_prunes_nothing(tmp_path):
    (tmp_path / "cache" / "envs").mkdir(parents=True)
    assert cached_envs(tmp_path / "cache") == []
    pruned = prune_envs(tmp_path / "cache", True, None)
    assert (pruned.removed, pruned.busy) == ((), ())
