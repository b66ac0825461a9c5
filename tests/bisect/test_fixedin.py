"""``bisect PACKAGE GOOD BAD --fixed-in``: after the first bad release, is it fixed since?

A toy package of its own (dsb-fx, the repro's ``dsb_toy`` module): 1.2.0 breaks it (rank 0
raises), 1.4.0 fixes it.  Real wheels, real venvs, one rank without a launcher: what is tested
is the search after the answer, which needs no second rank.
"""

from __future__ import annotations

import json

import pytest

import toypkg
from conftest import offline, write_matrix

RELEASES = {"1.0.0": "ok", "1.1.0": "ok", "1.2.0": "raise", "1.3.0": "raise", "1.4.0": "ok", "1.5.0": "ok"}


@pytest.fixture(scope="module")
def fx_wheels(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("fx"), RELEASES, dist="dsb-fx")


def _bisect(cli, tmp_path, wheels, cache_dir, *words, fmt="json"):
    write_matrix(tmp_path, list(RELEASES), package="dsb-fx", nproc=1)
    return cli("bisect", "dsb-fx", *words, "--case", "toy", *offline(wheels, cache_dir), "-q",
               "--store", str(tmp_path / "store"), "--format", fmt, cwd=tmp_path)


@pytest.mark.slow
def test_fixed_in_the_first_release_that_passes_after_the_first_bad(tmp_path, cli, fx_wheels, cache_dir):
    res = _bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.3.0", "--fixed-in")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["last_good"], out["first_bad"]) == ("1.1.0", "1.2.0")
    fix = out["fix"]
    assert (fix["mode"], fix["good"], fix["bad"]) == ("find-fix", "1.2.0", "1.5.0")  # up to the latest release
    assert (fix["verdict"], fix["last_good"], fix["first_bad"]) == ("found", "1.3.0", "1.4.0")
    outcome = {s["version"]: s["outcome"] for s in fix["steps"]}
    assert outcome["1.5.0"] == "pass" and outcome["1.4.0"] == "pass" and outcome["1.3.0"] == "fail"
    md = _bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.3.0", "--fixed-in", fmt="markdown")
    assert md.stdout.splitlines()[0] == "**fixed in dsb-fx 1.4.0: upgrade (uv pip install 'dsb-fx>=1.4.0')**"
    text = _bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.3.0", "--fixed-in", fmt="table")
    assert text.stdout.lstrip().startswith("fixed in dsb-fx 1.4.0: upgrade"), text.stdout


@pytest.mark.slow
def test_still_broken_up_to_the_bound_is_the_markdown_first_line(tmp_path, cli, fx_wheels, cache_dir):
    res = _bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.2.0", "--fixed-in", "--fixed-in-upto", "1.3.0",
                  fmt="markdown")
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first.startswith("**Still broken in dsb-fx 1.3.0 (the newest release tested, run #"), first
    out = json.loads(_bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.2.0", "--fixed-in",
                             "--fixed-in-upto", "1.3.0").stdout)
    assert out["fix"]["verdict"] == "not-reproduced" and out["fix"]["bad"] == "1.3.0"
    assert {s["version"]: s["outcome"] for s in out["fix"]["steps"]}["1.3.0"] == "fail"
    same = json.loads(_bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.2.0", "--fixed-in",
                              "--fixed-in-upto", "1.2.0").stdout)
    assert same["fix"] is None and same["fix_note"].startswith("still broken: dsb-fx 1.2.0, the first bad release")
    plain = json.loads(_bisect(cli, tmp_path, fx_wheels, cache_dir, "1.0.0", "1.2.0").stdout)
    assert "fix" not in plain  # not asked: no key, no runs


@pytest.mark.parametrize("words, expected", [
    (["1.0.0", "1.3.0", "--fixed-in", "--find-fix"], "--fixed-in is for PACKAGE GOOD BAD, not with --find-fix"),
    (["1.0.0", "1.3.0", "--fixed-in-upto", "1.5.0"], "--fixed-in-upto goes with --fixed-in"),
    (["1.0.0", "1.3.0", "--fixed-in", "--fixed-in-upto", "soon"], "--fixed-in-upto 'soon' is not a version"),
])
def test_bad_fixed_in_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, words, expected):
    write_matrix(tmp_path, list(RELEASES), package="dsb-fx", nproc=1)
    res = cli("bisect", "dsb-fx", *words, "--case", "toy", "--offline", "--find-links", str(tmp_path),
              "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()
