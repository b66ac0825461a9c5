"""The regression zoo's cheap case, end to end against real PyPI releases (offline).

``accelerate_tied_load_state`` (repro_scripts/zoo/): ``save_state``/``load_state`` of a model with
tied weights fails from accelerate 0.25.0 (PR #2120 made safetensors the default; issue #2807).
Its truth, established from the tracker and the release tags independently of dsbisect
(docs/results/zoo-truth-hf.json): last good 0.24.1, first bad 0.25.0.

The bisection runs over the 11 releases 0.22.0 .. 0.28.0 (all numpy-2 compatible), 1 rank under
torchrun on CPU, a few seconds a run.  tests/data/zoo-wheels/ holds what the dev venv (torch 2.13
CPU, numpy 2, deepspeed 0.19.8 in the base) lacks: those accelerate wheels, safetensors 0.8.0 and
huggingface-hub 0.24.7 (the last hub before hf-xet, so its dependencies are all in the base),
about 3.9 MB, fetched once with ``pip download --no-deps``.  With ``--offline`` the candidates
are the releases the wheelhouse holds, and nothing is read from an index.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import pytest

from conftest import offline

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                       reason="the wheelhouse's safetensors wheel is for Linux x86_64"),
]

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "data" / "zoo-wheels"
RELEASES = ["0.22.0", "0.23.0", "0.24.0", "0.24.1", "0.25.0", "0.26.0", "0.26.1",
            "0.27.0", "0.27.1", "0.27.2", "0.28.0"]

# Index settings of the machine the tests run on must not add packages to the wheelhouse's.
_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
              "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX",
              "UV_NO_INDEX", "UV_CONFIG_FILE", "DSBISECT_INDEX_URL", "DSBISECT_STORE")


def test_the_wheelhouse_holds_every_release_of_the_range():
    held = sorted(p.name.split("-")[1] for p in WHEELS.glob("accelerate-*.whl"))
    assert held == sorted(RELEASES)
    assert sum(p.stat().st_size for p in WHEELS.iterdir()) < 5_000_000


def test_accelerate_tied_load_state_names_0_25_0(cli, cache_dir, tmp_path, monkeypatch):
    for name in _INDEX_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    out = tmp_path / "bisect.json"
    res = cli("bisect", "accelerate", "0.22.0", "0.28.0",
              "--matrix", "repro_scripts/zoo/matrix.yaml", "--case", "accelerate_tied_load_state",
              "--regress-on", "fail", *offline(WHEELS, cache_dir), "--store", str(tmp_path / "store"),
              "--format", "json", "-o", str(out), "-q", cwd=ROOT)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["candidates"] == RELEASES
    assert (report["verdict"], report["last_good"], report["first_bad"]) == ("found", "0.24.1", "0.25.0"), res.output
    outcomes = {s["version"]: s["outcome"] for s in report["steps"]}
    assert outcomes["0.22.0"] == "pass" and outcomes["0.28.0"] == "fail"
    assert "skip" not in outcomes.values(), res.output
    assert "Error(s) in loading state_dict" in next(s["detail"] for s in report["steps"] if s["version"] == "0.25.0")
