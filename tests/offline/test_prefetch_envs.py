"""`prefetch --good-env/--bad-env`: a wheelhouse holding what an environment bisection installs,
filled from a local index (never PyPI), then a real offline bisection from it alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toypkg
from conftest import write_matrix
from test_engine import RULE, _freeze


def _publish(index, folder: Path, prefix: str, dists: dict[str, dict[str, tuple[str, ...]]]) -> set[str]:
    """Toy wheels ``{dist: {version: requires}}`` (names without ``dsb-<prefix>-``) on ``index``."""
    names = set()
    for name, versions in dists.items():
        for version, requires in versions.items():
            full = f"dsb-{prefix}-{name}"
            wheel = toypkg.build_wheel(folder, version, "ok", dist=full, module=full.replace("-", "_"),
                                       requires=tuple(r.replace("@", f"dsb-{prefix}-") for r in requires))
            index.add(wheel)
            names.add(wheel.name)
    return names


def _wheel(prefix: str, name: str, version: str) -> str:
    return f"dsb_{prefix}_{name}-{version}-py3-none-any.whl"


def _prefetch(cli, tmp_path: Path, index, *extra: str):
    res = cli("prefetch", "--good-env", "good.txt", "--bad-env", "bad.txt", "--dest", "house",
              "--index-url", index.url, "--cache-dir", str(tmp_path / "pfcache"), *extra, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    return res


@pytest.mark.slow
def test_a_wheelhouse_for_two_environments_answers_the_bisection_offline(tmp_path, cli, simple_index):
    """c 1.2 brings the bug; c 1.1 needs a dependency neither environment pins (dep); a and new
    are innocent changes (changed, added); x is pinned alike in both."""
    dists = {"a": {"1.0": (), "2.0": ()}, "c": {"1.0": (), "1.1": ("@dep>=1",), "1.2": (), "1.3": ()},
             "dep": {"1.0": ()}, "new": {"1.0": ()}, "x": {"1.0": (), "5.0": ()},
             "far": {"1.0": ()}}
    published = _publish(simple_index, tmp_path / "published", "pv", dists)
    _freeze(tmp_path / "good.txt", "pv", {"a": "1.0", "c": "1.0", "x": "1.0"})
    _freeze(tmp_path / "bad.txt", "pv", {"a": "2.0", "c": "1.3", "new": "1.0", "x": "1.0"})
    (tmp_path / "check.py").write_text(RULE.format(rule="v('pv-c') >= (1, 2)"))
    # matrix.yaml for its settings only (the index has no setuptools for the build pins); its
    # case's dsb-toy is on no index: fetching the matrix's points would fail the prefetch
    matrix = write_matrix(tmp_path, ["1.0.0", "1.1.0"])
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))

    ends = {_wheel("pv", n, v) for n, v in (("a", "1.0"), ("a", "2.0"), ("c", "1.0"), ("c", "1.3"),
                                              ("new", "1.0"), ("x", "1.0"))}
    _prefetch(cli, tmp_path, simple_index)
    assert {f.name for f in (tmp_path / "house").iterdir()} == ends  # level 1: the union of the pins
    res = _prefetch(cli, tmp_path, simple_index, "--with-candidates")
    level2 = {_wheel("pv", "c", "1.1"), _wheel("pv", "dep", "1.0"), _wheel("pv", "c", "1.2")}
    house = {f.name for f in (tmp_path / "house").iterdir()}
    assert house == ends | level2 and house < published  # x 5.0 and far: in no trial, not fetched
    assert set(res.stdout.split()) >= level2  # the files added are listed
    simple_index.close()  # nothing from the index from here on

    # one rank, no launcher: what is tested is where the wheels come from
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", "--offline", "--find-links", "house",
              "--regress-on", "fail", "--nproc", "1", "--accelerator", "cpu", "--cache-dir", str(tmp_path / "cache"), "--store", str(tmp_path / "store"),
              "-q", "--format", "json", "--", "python", "check.py", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["env_diff"]["culprits"] == ["dsb-pv-c"] and out["verdict"] == "found"
    rel = next(r for r in out["releases"] if r["package"] == "dsb-pv-c")
    assert (rel["last_good"], rel["first_bad"], rel["verdict"]) == ("1.1", "1.2", "found")


def _bad_input_files(tmp_path: Path) -> None:
    _freeze(tmp_path / "good.txt", "pq", {"a": "1.0"})
    _freeze(tmp_path / "bad.txt", "pq", {"a": "2.0"})
    (tmp_path / "broken.txt").write_text("dsb-pq-a==1.0\nnot a requirement (at all\n")
    (tmp_path / "tool.txt").write_text("dsb-pq-a==1.0\ndsbisect==0.0.1\n")  # the tool only: held


@pytest.mark.parametrize("words, expected", [
    (["--good-env", "good.txt"], "give both --good-env and --bad-env"),
    (["--bad-env", "bad.txt"], "give both --good-env and --bad-env"),
    (["--hold", "torch"], "--hold needs --good-env and --bad-env"),
    (["--good-env", "good.txt", "--bad-env", "broken.txt"], "broken.txt:2"),
    (["--good-env", "gone.txt", "--bad-env", "bad.txt"], "gone.txt: no such file"),
    (["--good-env", "good.txt", "--bad-env", "good.txt"], "no difference"),
    (["--good-env", "good.txt", "--bad-env", "bad.txt", "--hold", "dsb-nowhere"], "--hold dsb-nowhere: the base"),
    (["--good-env", "tool.txt", "--bad-env", "good.txt"], "the only changes are of held packages (dsbisect)"),
    (["--good-env", "good.txt", "--bad-env", "bad.txt", "--offline"], "cannot run --offline itself"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, words, expected):
    _bad_input_files(tmp_path)
    res = cli("prefetch", *words, "--dest", "house", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "house").exists() and not (tmp_path / "cache").exists()


def test_a_snapshot_base_decides_what_is_held(tmp_path, cli):
    """--hold is checked against the target's base (its snapshot), not this machine's."""
    _bad_input_files(tmp_path)
    (tmp_path / "base.json").write_text(json.dumps({"format": 1, "python": "/target/python", "dists": []}))
    res = cli("prefetch", "--good-env", "good.txt", "--bad-env", "bad.txt", "--hold", "dsb-pq-a",
              "--base-snapshot", "base.json", "--dest", "house", cwd=tmp_path)
    assert res.exit_code == 2 and "the base environment (/target/python) has no dsb-pq-a" in res.stderr, res.output
    assert not (tmp_path / "house").exists()


def test_what_two_environments_need_level_1_and_level_2(tmp_path):
    """Both ends as the bisection installs them (held packages at the base's version); with
    candidates, the releases strictly between each bisectable change's versions, a downgrade
    too, each in the good pins, then the bad, then alone; added and removed changes have none."""
    from dsbisect.envdiff.environments import read_environment
    from dsbisect.envdiff.plan import changes_of, hold_against
    from dsbisect.core.model import IndexOptions
    from dsbisect.offline.prefetch import env_fetch

    wh = tmp_path / "wh"
    for name, versions in {"c": ("1.0", "1.1", "1.2rc1", "1.2", "1.3"), "d": ("1.0", "2.0", "3.0"),
                           "h": ("1.0", "2.0"), "new": ("1.0",), "old": ("1.0",)}.items():
        for v in versions:
            toypkg.build_wheel(wh, v, "ok", dist=f"dsb-pu-{name}", module=f"dsb_pu_{name}")
    good = read_environment(_freeze(tmp_path / "g.txt", "pu", {"c": "1.0", "d": "3.0", "h": "1.0", "old": "1.0"}))
    bad = read_environment(_freeze(tmp_path / "b.txt", "pu", {"c": "1.3", "d": "1.0", "h": "2.0", "new": "1.0"}))
    base = {"dsb-pu-h": "1.5"}
    holding = hold_against(good, bad, changes_of(good, bad), ("dsb-pu-h",), base.get, "the base")
    index = IndexOptions(offline=True, find_links=(str(wh),))
    only_ends = env_fetch(good, bad, holding, index, False)
    assert only_ends.ends == (("dsb-pu-c==1.0", "dsb-pu-d==3.0", "dsb-pu-h==1.5", "dsb-pu-old==1.0"),
                              ("dsb-pu-c==1.3", "dsb-pu-d==1.0", "dsb-pu-h==1.5", "dsb-pu-new==1.0"))
    assert only_ends.releases == ()
    fetch = env_fetch(good, bad, holding, index, True)
    assert [c.label for c in fetch.releases] == ["dsb-pu-c 1.1", "dsb-pu-c 1.2", "dsb-pu-d 2.0"]  # no rc, no h
    c11 = fetch.releases[0]
    assert c11.contexts == (("dsb-pu-d==3.0", "dsb-pu-h==1.5", "dsb-pu-old==1.0", "dsb-pu-c==1.1"),
                            ("dsb-pu-d==1.0", "dsb-pu-h==1.5", "dsb-pu-new==1.0", "dsb-pu-c==1.1"),
                            ("dsb-pu-h==1.5", "dsb-pu-c==1.1"))
