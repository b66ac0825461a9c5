"""Ranges without both ends, and what lies between that was not tested (real index over http)."""

from __future__ import annotations

import json

import pytest

import toypkg
from conftest import cli_json, write_matrix

pytestmark = pytest.mark.slow


def _publish(index, tmp_path, dist: str, releases: dict[str, str], yanked: tuple[str, ...] = ()) -> None:
    for version, behaviour in releases.items():
        index.add(toypkg.build_wheel(tmp_path / "w", version, behaviour, dist=dist),
                  yanked="broken upload" if version in yanked else "")


def _bisect(cli, tmp_path, cache_dir, index, dist, good, bad, *extra):
    # one rank: what these tests check is the range, and "ok"/"raise" need no second rank
    write_matrix(tmp_path, ["6.0.0"], package=dist, collective_timeout=5, nproc=1)
    return cli_json(cli, "bisect", dist, good, bad, "--case", "toy", "--regress-on", "fail", "--index-url",
                    index.url, "--cache-dir", str(cache_dir), *extra, cwd=tmp_path)


def test_latest_and_auto_find_their_ends(tmp_path, cli, cache_dir, simple_index):
    releases = {f"6.{i}.0": ("raise" if i >= 6 else "ok") for i in range(8)}
    _publish(simple_index, tmp_path, "dsb-auto", releases)
    out, res = _bisect(cli, tmp_path, cache_dir, simple_index, "dsb-auto", "auto", "latest")
    assert "latest release of dsb-auto: 6.7.0" in res.stderr
    assert (out["bad"], out["last_good"], out["first_bad"]) == ("6.7.0", "6.5.0", "6.6.0")
    # 6.7.0 bad, then 1, 2 back: 6.6.0 bad, 6.4.0 good.
    assert out["good_end"] == "good end found by walking back from 6.7.0: 6.7.0 → 6.6.0 → 6.4.0 (2 steps)"
    tested = [s["version"] for s in out["steps"]]
    assert tested[:3] == ["6.7.0", "6.6.0", "6.4.0"]
    runs = {i for s in out["steps"] for i in s["run_ids"]}
    assert len(runs) == len(set(tested)) == 4  # each release ran once: the walk's runs were reused


def test_a_yanked_release_between_the_answers_ends_is_named_and_can_be_tested(tmp_path, cli, cache_dir,
                                                                               simple_index):
    _publish(simple_index, tmp_path, "dsb-yank", {"7.0.0": "ok", "7.1.0": "ok", "7.2.0": "raise", "7.3.0": "raise"},
             yanked=("7.2.0",))
    out, _ = _bisect(cli, tmp_path, cache_dir, simple_index, "dsb-yank", "7.0.0", "7.3.0")
    assert (out["last_good"], out["first_bad"]) == ("7.1.0", "7.3.0") and "7.2.0" not in out["candidates"]
    assert out["caveats"] == ["7.2.0 (yanked) lies between 7.1.0 and 7.3.0 and was not tested; "
                              "--include-yanked tests it"]
    out, _ = _bisect(cli, tmp_path, cache_dir, simple_index, "dsb-yank", "7.0.0", "7.3.0", "--include-yanked")
    assert (out["last_good"], out["first_bad"], out["caveats"]) == ("7.1.0", "7.2.0", [])


@pytest.mark.parametrize("source", ["UV_INDEX_URL", "PIP_INDEX_URL", "uv.toml"])
def test_the_index_settings_reach_listing_and_installs_alike(tmp_path, cli, cache_dir, simple_index, monkeypatch,
                                                            source):
    """Set without --index-url, the same index lists the releases and installs them."""
    _publish(simple_index, tmp_path, "dsb-where", {"8.0.0": "ok", "8.1.0": "ok"})
    if source == "uv.toml":
        (tmp_path / "uv.toml").write_text(f'index-url = "{simple_index.url}"\n')
    else:
        monkeypatch.setenv(source, simple_index.url)
    res = cli("versions", "dsb-where", cwd=tmp_path)
    assert res.exit_code == 0 and res.stdout.split() == ["8.0.0", "8.1.0"], res.output
    (tmp_path / "check.sh").write_text("#!/bin/sh\npython -c 'import dsb_toy, sys; sys.exit(0 if dsb_toy.__version__ == \"8.1.0\" else 3)'\n")
    (tmp_path / "check.sh").chmod(0o755)
    res = cli("run", "--versions", "dsb-where=8.1.0", "--accelerator", "cpu", "--cache-dir", str(cache_dir),
              "--format", "json", "--", "./check.sh", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    assert run["outcome"] == "pass", run["reason"]
    assert simple_index.url in run["environment"]["index"] and source.split(".")[0] in run["environment"]["index"]
