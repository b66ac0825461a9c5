"""Hang forensics end to end: a plain hang (a rank asleep, no collective), with py-spy and
with py-spy refused (the faulthandler hook must still give every rank's stack)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import toypkg
from conftest import cli_json, live_pids, offline, write_matrix

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sleep_house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("sleep-wheels"), {"1.0.0": "sleep"}, dist="dsb-sleep")


def _run(cli, tmp_path, house, cache_dir, *extra):
    write_matrix(tmp_path, ["1.0.0"], package="dsb-sleep", collective_timeout=5)
    report, _ = cli_json(cli, "run", "matrix.yaml", *offline(house, cache_dir), *extra, cwd=tmp_path)
    (run,) = report["runs"]
    return run


def _gone(pids) -> bool:
    return not live_pids(pids)


def test_plain_hang_gets_every_ranks_stack(tmp_path, cli, sleep_house, cache_dir):
    run = _run(cli, tmp_path, sleep_house, cache_dir)
    assert run["outcome"] == "hang"
    # Ended by the 5 s collective timeout (gloo's own line), not by the 90 s wall timeout.
    assert "Timed out waiting 5000ms" in run["reason"], run["reason"]
    stacks = Path(run["run_dir"]) / "stacks"
    rank1 = [p.read_text() for p in stacks.glob("pyspy.rank1.*.txt")]
    assert any("step (dsb_toy/__init__.py" in t for t in rank1), rank1  # asleep in the toy, no collective
    assert any("barrier" in p.read_text() for p in stacks.glob("pyspy.rank0.*.txt"))
    assert "rank 0 in barrier" in run["signature"] and "rank 1 not in a collective" in run["signature"]
    assert _gone(run["evidence"]["pids"])


def test_without_ptrace_the_faulthandler_hook_gives_the_stacks(tmp_path, cli, sleep_house, cache_dir, monkeypatch):
    refused = tmp_path / "py-spy"
    refused.write_text("#!/bin/sh\necho 'Error: Permission Denied: try running as root or with CAP_SYS_PTRACE' >&2\nexit 1\n")
    refused.chmod(refused.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("DSBISECT_PYSPY", str(refused))
    run = _run(cli, tmp_path, sleep_house, cache_dir, "--rerun")
    assert run["outcome"] == "hang"
    assert any("py-spy could not read rank" in n and "faulthandler" in n for n in run["evidence"]["notes"])
    stacks = Path(run["run_dir"]) / "stacks"
    assert not list(stacks.glob("pyspy.*"))
    dumps = {p.name.split(".")[0]: p.read_text() for p in stacks.glob("rank*.pid*.txt")}
    assert set(dumps) == {"rank0", "rank1"}
    assert "dsb_toy/__init__.py" in dumps["rank1"] and " in step" in dumps["rank1"]  # asleep in the toy
    assert "rank 1" in run["signature"] and "__init__.py:step" in run["signature"]
    assert _gone(run["evidence"]["pids"])
