"""Wheelhouses for machines without a network: resolved against the target's base, only what it lacks."""

from __future__ import annotations

import json

import pytest

import toypkg
from conftest import make_case
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import EnvBuildError, InputError
from dsbisect.core.model import EnvOptions, IndexOptions, Point
from dsbisect.offline.prefetch import Prefetcher, Target, load_snapshot, points_to_fetch, snapshot


@pytest.fixture
def house(tmp_path):
    path = toypkg.build_wheelhouse(tmp_path / "house", {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "ok", "1.3.0": "ok"},
                                   dist="dsb-pf")
    return IndexOptions(offline=True, find_links=(str(path),))


def test_points_and_the_candidates_between_them(tmp_path, house):
    from dataclasses import replace

    case = replace(make_case(tmp_path), points=(Point((("dsb-pf", "1.0.0"),), pins=("x<2",)),
                                                Point((("dsb-pf", "1.2.0"),), pins=("x<2",))))
    assert [p.label for p in points_to_fetch([case], house, False)] == ["dsb-pf 1.0.0", "dsb-pf 1.2.0"]
    within = points_to_fetch([case], house, True)
    assert sorted(p.label for p in within) == ["dsb-pf 1.0.0", "dsb-pf 1.1.0", "dsb-pf 1.2.0"]
    assert all(p.pins == ("x<2",) for p in within)


@pytest.mark.slow
def test_only_what_the_target_base_lacks_is_fetched(tmp_path, house):
    snap = tmp_path / "base.json"
    snap.write_text(json.dumps(snapshot(None)))
    target = Target(snapshot=load_snapshot(snap))
    filelock = next(d["version"] for d in target.snapshot["dists"] if d["name"].lower() == "filelock")
    mgr = EnvManager(tmp_path / "cache", EnvOptions(build_pins=()), house)
    pf = Prefetcher(mgr, tmp_path / "dest", target)
    try:
        # filelock is in the base at that version: nothing to fetch for it; the toy is new.
        pf.point(Point((("dsb-pf", "1.1.0"),), pins=(f"filelock=={filelock}",)))
        assert pf.added == ["dsb_pf-1.1.0-py3-none-any.whl"]
        pf.point(Point((("dsb-pf", "1.1.0"),)))
        assert pf.added == ["dsb_pf-1.1.0-py3-none-any.whl"]  # already there
        with pytest.raises(EnvBuildError):
            pf.point(Point((("dsb-pf", "9.9.9"),)))
    finally:
        pf.close()
    assert pf.size() == (tmp_path / "dest" / "dsb_pf-1.1.0-py3-none-any.whl").stat().st_size


def test_a_snapshot_that_is_not_one_is_bad_input(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="not a dsbisect base snapshot"):
        load_snapshot(bad)
    with pytest.raises(InputError, match="cannot read it"):
        load_snapshot(tmp_path / "missing.json")


def test_a_manylinux_target_also_takes_older_wheels():
    from dsbisect.offline.prefetch import compatible_platforms

    tags = compatible_platforms(("manylinux_2_28_x86_64",))
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64"} <= set(tags)
    assert compatible_platforms(("win_amd64",)) == ["win_amd64"]
