"""Environment bisection (bisect --good-env/--bad-env): the change, then its release, on toy packages.

Every test resolves real toy wheels with real dependency metadata through real uv (offline, a
wheelhouse per test: uv treats find-links files as immutable, so each test has dists of its own
names) and runs a 1-rank script without a launcher: what is tested is the search over
environments, which needs no second rank.  The script is the "bug": it fails when the versions
it finds meet a rule, as a regression in those releases would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import offline

import toypkg

RULE = """\
import importlib.metadata as md, sys
def v(name):
    try:
        return tuple(int(x) for x in md.version("dsb-" + name).split("."))
    except md.PackageNotFoundError:
        return None
bad = {rule}
print("bad" if bad else "fine", flush=True)
sys.exit(1 if bad else 0)
"""


def _wheels(folder: Path, prefix: str, dists: dict[str, dict[str, tuple[str, ...]]]) -> Path:
    """A wheelhouse: ``{dist: {version: requires}}``, names given without ``dsb-<prefix>-``."""
    for name, versions in dists.items():
        for version, requires in versions.items():
            full = f"dsb-{prefix}-{name}"
            toypkg.build_wheel(folder, version, "ok", dist=full, module=full.replace("-", "_"),
                               requires=tuple(r.replace("@", f"dsb-{prefix}-") for r in requires))
    return folder


def _freeze(path: Path, prefix: str, pins: dict[str, str]) -> Path:
    path.write_text("".join(f"dsb-{prefix}-{n}=={v}\n" for n, v in sorted(pins.items())))
    return path


def _setup(tmp_path: Path, prefix: str, dists, good: dict, bad: dict, rule: str) -> list[str]:
    wh = _wheels(tmp_path / "wh", prefix, dists)
    _freeze(tmp_path / "good.txt", prefix, good)
    _freeze(tmp_path / "bad.txt", prefix, bad)
    (tmp_path / "check.py").write_text(RULE.format(rule=rule.replace("v('", f"v('{prefix}-")))
    return ["--script", "check.py", "--nproc", "1", "--accelerator", "cpu", "--regress-on", "fail",
            *offline(wh)]


def _bisect(cli, tmp_path, cache_dir, args, *extra, code=0):
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", *args, "--cache-dir", str(cache_dir),
              "--store", str(tmp_path / "store"), "-q", "--format", "json", *extra, cwd=tmp_path)
    assert res.exit_code == code, res.output
    return json.loads(res.stdout), res


def _level2(out: dict, name: str) -> dict:
    return next(r for r in out["releases"] if r["package"].endswith(name))


@pytest.mark.slow
def test_one_culprit_among_eight_changes_then_its_release(tmp_path, cli, cache_dir):
    """8 changes (6 changed, one added, one removed); the bug comes with c 1.2."""
    same = {"1.0": (), "2.0": ()}
    dists = {"a": same, "b": same, "d": same, "e": same, "f": same, "old": {"1.0": ()}, "new": {"1.0": ()},
             "c": {v: () for v in ("1.0", "1.1", "1.2", "1.3", "1.4")}}
    good = {"a": "1.0", "b": "1.0", "c": "1.0", "d": "1.0", "e": "1.0", "f": "1.0", "old": "1.0"}
    bad = {"a": "2.0", "b": "2.0", "c": "1.4", "d": "2.0", "e": "2.0", "f": "2.0", "new": "1.0"}
    args = _setup(tmp_path, "ea", dists, good, bad, "v('c') >= (1, 2)")
    out, res = _bisect(cli, tmp_path, cache_dir, args)
    diff = out["env_diff"]
    kinds = {c["name"]: c["kind"] for c in diff["changes"]}
    assert len(kinds) == 8 and kinds["dsb-ea-new"] == "added" and kinds["dsb-ea-old"] == "removed"
    assert diff["culprits"] == ["dsb-ea-c"] and diff["exact"] and out["verdict"] == "found"
    assert [e["outcome"] for e in diff["ends"]] == ["pass", "fail"]
    assert len(diff["trials"]) <= 6  # ceil(log2 8) + 2, and the check that the bad env without it passes
    rel = _level2(out, "c")
    assert (rel["last_good"], rel["first_bad"], rel["verdict"]) == ("1.1", "1.2", "found")
    # the other packages were held at the good environment's versions during level 2
    assert "dsb-ea-a==1.0" in rel["pins"] and "dsb-ea-old==1.0" in rel["pins"]
    assert list(out)[:8] == ["kind", "good_env", "bad_env", "case", "regress_on", "hold", "verdict", "message"]
    assert list(out)[8:] == ["env_diff", "releases", "not_bisected", "confounders", "steps", "remedy", "every_cause"]
    assert set(diff) >= {"changes", "ends", "trials", "culprits", "exact", "note", "units", "notes"}
    assert set(diff["trials"][0]) == {"applied", "side", "label", "outcome", "run_ids", "detail"}
    ran = {i for s in out["steps"] for i in s["run_ids"]}
    again, _ = _bisect(cli, tmp_path, cache_dir, args)  # a second invocation reuses every run
    assert again["env_diff"]["culprits"] == ["dsb-ea-c"] and {i for s in again["steps"] for i in s["run_ids"]} == ran


@pytest.mark.slow
def test_an_interaction_names_both_changes_and_bisects_each(tmp_path, cli, cache_dir):
    """The bug needs a >= 2.0 and b >= 3.0 together; x, y, z are innocent."""
    dists = {"a": {v: () for v in ("1.0", "1.5", "2.0", "2.1")}, "b": {v: () for v in ("2.0", "2.5", "3.0", "3.1")},
             "x": {"1.0": (), "1.1": ()}, "y": {"1.0": (), "1.1": ()}, "z": {"1.0": (), "1.1": ()}}
    good = {"a": "1.0", "b": "2.0", "x": "1.0", "y": "1.0", "z": "1.0"}
    bad = {"a": "2.1", "b": "3.1", "x": "1.1", "y": "1.1", "z": "1.1"}
    args = _setup(tmp_path, "eb", dists, good, bad, "v('a') >= (2, 0) and v('b') >= (3, 0)")
    out, res = _bisect(cli, tmp_path, cache_dir, args)
    diff = out["env_diff"]
    assert diff["culprits"] == ["dsb-eb-a", "dsb-eb-b"] and diff["exact"]
    a, b = _level2(out, "a"), _level2(out, "b")
    assert (a["last_good"], a["first_bad"]) == ("1.5", "2.0") and "dsb-eb-b==3.1" in a["pins"]
    assert (b["last_good"], b["first_bad"]) == ("2.5", "3.0") and "dsb-eb-a==2.1" in b["pins"]


@pytest.mark.slow
def test_a_change_uv_cannot_apply_alone(tmp_path, cli, cache_dir):
    """a 2.0 requires c >= 2.0 (both changed): a alone cannot be installed.  The bug is a's from
    1.5, whose release needs d >= 2.0 (d changed too, innocent): level 2 moves d and says so."""
    dists = {"a": {"1.0": (), "1.5": ("@d>=2.0",), "2.0": ("@c>=2.0",)}, "c": {"1.0": (), "2.0": ()},
             "d": {"1.0": (), "2.0": ()}, "x": {"1.0": (), "1.1": ()}}
    good = {"a": "1.0", "c": "1.0", "d": "1.0", "x": "1.0"}
    bad = {"a": "2.0", "c": "2.0", "d": "2.0", "x": "1.1"}
    args = _setup(tmp_path, "ec", dists, good, bad, "v('a') >= (1, 5)")
    out, res = _bisect(cli, tmp_path, cache_dir, args)
    diff = out["env_diff"]
    assert diff["units"] == [[0, 1]]  # a and c: tied by a 2.0's requirement, tried together
    assert diff["culprits"] == ["dsb-ec-a", "dsb-ec-c"] and diff["required"] == ["dsb-ec-c"]
    assert out["verdict"] == "found"
    alone = [t for t in diff["trials"] if t["applied"] == [0]]
    assert alone and alone[0]["outcome"] == "skip" and "dsb-ec-c" in alone[0]["detail"]
    (rel,) = out["releases"]  # c is not bisected: it is a's requirement
    assert rel["package"] == "dsb-ec-a" and (rel["last_good"], rel["first_bad"]) == ("1.0", "1.5")
    assert "dsb-ec-c==2.0" in rel["pins"]
    (conf,) = out["confounders"]
    assert (conf["version"], conf["moved"]) == ("1.5", ["dsb-ec-d 1.0 -> 2.0"])
    assert "possible confounder: at dsb-ec-a 1.5 uv had to move dsb-ec-d 1.0 -> 2.0" in rel["message"]


@pytest.mark.slow
def test_a_tie_both_ways_is_one_unit_and_the_answer_is_a_sentence_and_fields(tmp_path, cli, cache_dir):
    """a 2.0 requires c >= 2.0 and c 2.0 requires a >= 2.0: one tie, found from either side, is
    listed once; the culprit is x.  Level 1 says it starts with the environments (not "2
    releases"), and the JSON's message is the answer in one line, as the reports begin."""
    dists = {"a": {"1.0": (), "2.0": ("@c>=2.0",)}, "c": {"1.0": (), "2.0": ("@a>=2.0",)},
             "x": {"1.0": (), "1.1": ()}}
    args = _setup(tmp_path, "ej", dists, {"a": "1.0", "c": "1.0", "x": "1.0"}, {"a": "2.0", "c": "2.0", "x": "1.1"},
                  "v('x') >= (1, 1)")
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", *args, "--cache-dir", str(cache_dir),
              "--store", str(tmp_path / "store"), "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["env_diff"]["units"] == [[0, 1]] and out["env_diff"]["culprits"] == ["dsb-ej-x"]
    assert out["message"] == out["message"].strip() and out["message"].startswith(
        "3 changes; culprit dsb-ej-x 1.0 -> 1.1 (") and "first bad release 1.1" in out["message"]
    assert "level 1: both environments first, as given: good.txt (good) and bad.txt (bad); then the good one " \
           "with some of the 3 changes applied" in res.stderr
    assert "releases from good env" not in res.stderr and "no release between them" not in res.stderr.split(
        "level 2")[0]
    # report: the level-2 bisection within the environment one, not again on its own; its answer as fields
    report = cli("report", "--store", str(tmp_path / "store"), "--format", "json", cwd=tmp_path)
    (b,) = json.loads(report.stdout)["bisections"]
    assert b["question"] == "environment good.txt → bad.txt" and b["answer"][1] == out["message"]
    assert b["found"] == [{"package": "dsb-ej-x", "mode": "regression", "last_good": "1.0", "first_bad": "1.1",
                           "maybe": [], "commit": None, "subject": ""}]
    md = cli("report", "--store", str(tmp_path / "store"), "--format", "markdown", cwd=tmp_path).stdout
    assert md.count("- **bisection ") == 1 and str(tmp_path) not in md
    # the issue body: the remedy first (issue 39), then the chain in bold before any table, the
    # changes and trials folded, every table cell short
    body = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", *args, "--cache-dir", str(cache_dir),
               "--store", str(tmp_path / "store"), "-q", "--format", "markdown", cwd=tmp_path).stdout
    lines = body.splitlines()
    chain_at = lines.index(f"**{out['message']}**")
    assert lines[chain_at - 2].startswith("### dsbisect: good.txt → bad.txt") or lines[chain_at - 2].startswith("- **")
    assert not any(ln.startswith("|") for ln in lines[:chain_at])
    assert "<details><summary>3 changes</summary>" in body and "<details><summary>level 1: " in body
    cells = [c for ln in body.splitlines() if ln.startswith("| ") for c in ln.split(" | ")]
    assert max(len(c) for c in cells) <= 125 and str(tmp_path) not in body and str(cache_dir) not in body


@pytest.mark.slow
def test_the_culprit_is_a_transitive_dependency(tmp_path, cli, cache_dir):
    """dep is in the freezes only because top requires it (top 1.1 needs dep >= 1.3); the bug is
    dep's from 1.2: dep is named, not top, though top alone cannot move without it."""
    dists = {"top": {"1.0": ("@dep>=1.0",), "1.1": ("@dep>=1.3",)},
             "dep": {v: () for v in ("1.0", "1.1", "1.2", "1.3")}, "x": {"1.0": (), "1.1": ()}}
    good = {"top": "1.0", "dep": "1.0", "x": "1.0"}
    bad = {"top": "1.1", "dep": "1.3", "x": "1.1"}
    args = _setup(tmp_path, "ed", dists, good, bad, "v('dep') >= (1, 2)")
    for name, torch in (("good.txt", "2.0.0"), ("bad.txt", "2.1.0")):  # neither is the base's: held
        (tmp_path / name).write_text((tmp_path / name).read_text() + f"torch=={torch}\n")
    # a freeze made where dsbisect is installed lists it (here in a version no index has): the tool is held
    (tmp_path / "good.txt").write_text((tmp_path / "good.txt").read_text() + "dsbisect==0.0.1\n")
    out, res = _bisect(cli, tmp_path, cache_dir, args, "--hold", "torch")
    assert "dsbisect is the tool, not the job" in res.stderr
    diff = out["env_diff"]
    assert diff["culprits"] == ["dsb-ed-dep"] and diff["exact"], diff
    assert out["hold"] == ["torch"] and "torch" not in {c["name"] for c in diff["changes"]}
    rel = _level2(out, "dep")
    assert (rel["last_good"], rel["first_bad"]) == ("1.1", "1.2")
    from importlib.metadata import version

    assert f"torch=={version('torch')}" in rel["pins"]  # the base's, in every trial
    # log writes every run as a mark line with the whole environment; replayed into a new store,
    # the same command then runs nothing and gives the same answer
    log = cli("log", "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert log.exit_code == 0 and "# answer: culprit dsb-ed-dep; dsb-ed-dep: last good 1.1, first bad 1.2" in log.stdout
    (tmp_path / "env.log").write_text(log.stdout)
    res = cli("replay", "env.log", "--store", str(tmp_path / "replayed"), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    again = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", *args, "--hold", "torch", "--cache-dir",
                str(cache_dir), "--store", str(tmp_path / "replayed"), "--format", "json", cwd=tmp_path)
    assert again.exit_code == 0 and ": running (run" not in again.stderr, again.stderr
    assert json.loads(again.stdout)["releases"][0]["first_bad"] == "1.2"


def _nothing_created(tmp_path: Path) -> None:
    assert not (tmp_path / "store").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("words, expected", [
    (["--good-env", "nothere.txt", "--bad-env", "bad.txt"], "nothere.txt: no such file or folder"),
    (["--good-env", "good.txt", "--bad-env", "good.txt"], "no difference"),
    (["--bad-env", "bad.txt"], "--bad-env needs --good-env"),  # (--good-env alone: the bad end is this env)
    (["--hold", "torch"], "--hold needs --good-env"),
    (["dsb-ev-a", "1.0", "2.0", "--good-env", "good.txt", "--bad-env", "bad.txt"], "not both"),
    (["--good-env", "good.txt", "--bad-env", "bad.txt", "--pin", "dsb-ev-a==1.0"], "--pin, --pre and --include-yanked"),
    (["--good-env", "good.txt", "--bad-env", "bad.txt", "--hold", "dsb-nowhere"], "--hold dsb-nowhere: the base"),
    (["--good-env", "good.txt", "--bad-env", "gone.txt"], "gone.txt: no such file"),
    (["--good-env", "good.txt", "--bad-env", "unknown.txt"], "the bad environment (unknown.txt) cannot be installed here"),
    (["--good-env", "torch.txt", "--bad-env", "bad.txt"], "--hold torch keeps the base's torch"),
    (["--good-env", "torch.txt", "--bad-env", "torch2.txt", "--hold", "torch"], "the only changes are of held packages"),
    (["--good-env", "tool.txt", "--bad-env", "good.txt"], "the only changes are of held packages (dsbisect)"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, cli, words, expected):
    _wheels(tmp_path / "wh", "ev", {"a": {"1.0": (), "2.0": ()}})
    _freeze(tmp_path / "good.txt", "ev", {"a": "1.0"})
    _freeze(tmp_path / "bad.txt", "ev", {"a": "2.0"})
    _freeze(tmp_path / "unknown.txt", "ev", {"a": "9.9"})  # not in the wheelhouse: uv cannot install it here
    (tmp_path / "torch.txt").write_text("dsb-ev-a==1.0\ntorch==2.0.0\n")  # not the base's, not in the wheelhouse
    (tmp_path / "torch2.txt").write_text("dsb-ev-a==1.0\ntorch==2.1.0\n")
    (tmp_path / "tool.txt").write_text("dsb-ev-a==1.0\ndsbisect==0.0.1\n")  # the tool itself: held, not a change
    (tmp_path / "check.py").write_text("pass\n")
    args = ["--script", "check.py", "--nproc", "1", "--offline", "--find-links", "wh",
            "--store", str(tmp_path / "store"), "--cache-dir", str(tmp_path / "cache")]
    res = cli("bisect", *words, *args, cwd=tmp_path)
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    _nothing_created(tmp_path)


@pytest.mark.parametrize("command", [["python", "check.py"], ["deepspeed", "--num_gpus", "2", "check.py", "--x", "1"],
                                     ["./run.sh"]])
def test_the_words_after_dashes_are_the_command_with_good_env(tmp_path, cli, command):
    """Click fills the optional PACKAGE GOOD BAD with the command's first words: they come back
    as the command (the identical environments then stop it, before anything is made)."""
    _freeze(tmp_path / "good.txt", "ew", {"a": "1.0"})
    (tmp_path / "check.py").write_text("pass\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "run.sh").chmod(0o755)
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "good.txt", "--store", str(tmp_path / "store"),
              "--cache-dir", str(tmp_path / "cache"), "--", *command, cwd=tmp_path)
    assert res.exit_code == 2 and "no difference" in res.stderr, res.output
    _nothing_created(tmp_path)
    res = cli("bisect", "dsb-ew-a", "--good-env", "good.txt", "--bad-env", "good.txt", "--", *command, cwd=tmp_path)
    assert res.exit_code == 2 and "not both" in res.stderr, res.output




@pytest.mark.slow
def test_the_chain_goes_on_to_the_commit_with_git_repo(tmp_path_factory, tmp_path, cli, cache_dir):
    """Two changes; the culprit's release, then the commit inside it that makes rank 0 raise."""
    from conftest import commit_toy, git, write_matrix

    repo = tmp_path_factory.mktemp("egrepo")
    git(repo, "init", "-q", "-b", "main")
    commit_toy(repo, "1.0.0", "ok", "release 1.0.0", name="dsb-eg-toy")
    git(repo, "tag", "v1.0.0")
    hashes = [commit_toy(repo, "1.1.0", "raise" if i >= 3 else "ok", f"change {i}", name="dsb-eg-toy")
              for i in range(1, 5)]
    git(repo, "tag", "v1.1.0")
    wh = tmp_path / "wh"
    for version, behaviour in (("1.0.0", "ok"), ("1.1.0", "raise")):
        toypkg.build_wheel(wh, version, behaviour, dist="dsb-eg-toy")
    _wheels(wh, "eg", {"x": {"1.0": (), "1.1": ()}})
    (tmp_path / "good.txt").write_text("dsb-eg-toy==1.0.0\ndsb-eg-x==1.0\n")
    (tmp_path / "bad.txt").write_text("dsb-eg-toy==1.1.0\ndsb-eg-x==1.1\n")
    write_matrix(tmp_path, ["1.0.0"], package="dsb-eg-toy", collective_timeout=3, nproc=1)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("defaults:\n", "defaults:\n  build_pins: []\n"))
    out, res = _bisect(cli, tmp_path, cache_dir, ["--case", "toy", "--regress-on", "fail", *offline(wh),
                                                  "--git-repo", str(repo)])
    assert out["env_diff"]["culprits"] == ["dsb-eg-toy"]
    (rel,) = out["releases"]
    assert (rel["last_good"], rel["first_bad"]) == ("1.0.0", "1.1.0")
    assert (rel["commit"]["first_bad"], rel["commit"]["subject"]) == (hashes[2], "change 3")
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", "--case", "toy", "--regress-on", "fail",
              *offline(wh), "--git-repo", str(repo), "--cache-dir", str(cache_dir),
              "--store", str(tmp_path / "store"), "-q", "--format", "markdown", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    # the issue body says first what the maintainer must hear: the latest release (the bad env's) still fails
    assert lines[0] == "**Still broken in the latest release: dsb-eg-toy 1.1.0.**", lines[:6]
    assert "- **pin: dsb-eg-toy==1.0.0   (uv pip install 'dsb-eg-toy==1.0.0'" in res.stdout
    first = next(line for line in lines if line.startswith("**2 changes"))  # the chain, after the remedy
    assert first.startswith("**2 changes; culprit dsb-eg-toy 1.0.0 -> 1.1.0 (") and \
        f"first bad release 1.1.0 (level 1's runs); first bad commit {hashes[2][:10]} change 3 (" in first, first
    assert "<details><summary>2 changes</summary>" in res.stdout


@pytest.mark.slow
def test_ends_that_do_not_behave_stop_before_the_search(tmp_path, cli, cache_dir):
    dists = {"a": {"1.0": (), "2.0": ()}, "b": {"1.0": (), "2.0": ()}}
    args = _setup(tmp_path, "ef", dists, {"a": "1.0", "b": "1.0"}, {"a": "2.0", "b": "2.0"}, "False")
    out, res = _bisect(cli, tmp_path, cache_dir, args, code=1)
    assert out["verdict"] == "not-reproduced" and out["env_diff"]["trials"] == [] and out["releases"] == []
    assert "bad.txt (the bad environment, as given) passed: the regression does not reproduce here" in out["message"]
    assert [e["outcome"] for e in out["env_diff"]["ends"]] == ["pass", "pass"]


@pytest.mark.slow
def test_swapped_environments_are_named_swapped(tmp_path, cli, cache_dir):
    """--good-env is the broken one and --bad-env the working one: neither "failed too" (the other
    end passed) nor silence about the swap; the hint gives the two the right way round."""
    dists = {"a": {"1.0": (), "2.0": ()}, "b": {"1.0": (), "2.0": ()}}
    args = _setup(tmp_path, "ei", dists, {"a": "2.0", "b": "2.0"}, {"a": "1.0", "b": "1.0"}, "v('a') >= (2, 0)")
    out, res = _bisect(cli, tmp_path, cache_dir, args, code=1)
    assert out["verdict"] == "good-end-bad" and out["env_diff"]["trials"] == []
    assert [e["outcome"] for e in out["env_diff"]["ends"]] == ["fail", "pass"]
    assert out["message"] == ("good.txt (the good environment, as given) failed and bad.txt (the bad environment) "
                              "passed: the two look swapped; give --good-env bad.txt --bad-env good.txt, or add "
                              "--find-fix to find what fixed it")
    assert "too" not in out["message"]


@pytest.mark.slow
def test_a_downgrade_is_bisected_upwards(tmp_path, cli, cache_dir):
    """The bad environment went back from a 2.0 to 1.0, and 1.0 is broken: the release step looks
    for the first release above 1.0 that is fine (1.5), as --find-fix does."""
    dists = {"a": {v: () for v in ("1.0", "1.2", "1.5", "2.0")}}
    args = _setup(tmp_path, "eh", dists, {"a": "2.0"}, {"a": "1.0"}, "v('a') < (1, 5)")
    out, res = _bisect(cli, tmp_path, cache_dir, args)
    assert out["env_diff"]["culprits"] == ["dsb-eh-a"] and out["env_diff"]["trials"] == []
    (rel,) = out["releases"]
    assert (rel["mode"], rel["last_good"], rel["first_bad"]) == ("find-fix", "1.2", "1.5")
    res = cli("bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", *args, "--cache-dir", str(cache_dir),
              "--store", str(tmp_path / "store"), "-q", "--format", "markdown", cwd=tmp_path)
    assert "culprit dsb-eh-a 2.0 -> 1.0 (downgrade) (0 trials); (a downgrade) last bad release 1.2, " \
           "first good release 1.5 (" in res.stdout, res.stdout


def test_what_the_trials_cost_beyond_the_base_is_said(tmp_path):
    """A change of a package the base provides (a copy in every venv that differs, its size from
    the base's RECORD), a removal the base still provides, a pin both share that is not the base's."""
    from dsbisect.envs.base import Base
    from dsbisect.envdiff.plan import EnvRequest, costs
    from dsbisect.envdiff.environments import diff, read_environment
    from conftest import make_case

    info = tmp_path / "torch-2.13.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(f"torch/lib.so,sha256=x,{3 << 20}\ntorch/a.py,,\n")
    base = Base("python3", "3.11.7", (), (("torch", "2.13.0", str(info)), ("numpy", "2.0.0", str(tmp_path / "none")),
                                         ("six", "1.16.0", str(tmp_path / "none"))))
    good = read_environment(_write(tmp_path / "g.txt", "torch==2.1.0\nnumpy==1.26.4\nsix==1.16.0\na==1.0\n"))
    bad = read_environment(_write(tmp_path / "b.txt", "torch==2.3.0\nnumpy==1.26.4\na==2.0\n"))
    notes = costs(diff(good, bad), EnvRequest(good, bad, make_case(tmp_path)), base, layered=True)
    assert any(n.startswith("torch 2.1.0 -> 2.3.0: the base provides torch 2.13.0; trials install their own "
                            "(~3 MB in each venv that differs); --hold torch") for n in notes), notes
    assert any(n.startswith("- six 1.16.0: the base has six 1.16.0, which stays importable") for n in notes), notes
    assert any("pinned alike in both environments differ from the base" in n and "numpy 1.26.4" in n
               for n in notes), notes
    assert not any(n.startswith("a ") for n in notes)


def test_many_changes_of_base_packages_are_one_note(tmp_path):
    """The environment-diff example moved 18 packages the base provides: one note for them, not
    one a line (19 `note:` lines before anything started)."""
    from dsbisect.envs.base import Base
    from dsbisect.envdiff.plan import EnvRequest, costs
    from dsbisect.envdiff.environments import diff, read_environment
    from conftest import make_case

    names = [f"p{i:02d}" for i in range(18)]
    base = Base("python3", "3.11.7", (), tuple((n, "9.0", str(tmp_path / "none")) for n in names))
    good = read_environment(_write(tmp_path / "g.txt", "".join(f"{n}==1.0\n" for n in names)))
    bad = read_environment(_write(tmp_path / "b.txt", "".join(f"{n}==2.0\n" for n in names)))
    (note,) = costs(diff(good, bad), EnvRequest(good, bad, make_case(tmp_path)), base, layered=True)
    assert note.startswith("the base provides 18 of the changed packages at other versions (p00 9.0, p01 9.0, ")
    assert "and 12 more): trials install their own; --hold NAME keeps the base's" in note


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("reason, names, found", [
    ("Because a==2.0 depends on c>=2.0 and you require c==1.0", ["a", "c", "ab"], {"a", "c"}),
    ("Because dsb-ab==2.0 depends on dsb-c>=2.0", ["dsb-a", "dsb-ab", "dsb-c"], {"dsb-ab", "dsb-c"}),
    ("you require typing_extensions==4.0 and torch requires typing-extensions>=4.8", ["typing-extensions"],
     {"typing-extensions"}),
    ("No solution found: numpy-financial==1.0 requires numpy<2", ["numpy"], {"numpy"}),
    ("Because torch2==1.0 was not found", ["torch"], set()),
])
def test_the_names_uv_error_mentions(reason, names, found):
    from dsbisect.envdiff.plan import named_in

    assert named_in(reason, names) == found


LOSS_RULE = """\
import importlib.metadata as md, json, os
def v(name):
    return tuple(int(x) for x in md.version("dsb-" + name).split("."))
loss = 1.5 + (0.25 if v('{prefix}-c') >= (1, 2) else 0.0)
with open(os.environ["DSBISECT_METRICS"], "a") as f:
    f.write(json.dumps({{"step": 5, "loss": loss}}) + "\\n")
"""


@pytest.mark.slow
def test_a_number_finds_the_change_that_costs_it_then_its_release(tmp_path, cli, cache_dir):
    """Level 1 for a number (issue 38): three changes, of which c 1.0 -> 1.3 raises the loss at
    1.2; the trials are called by their loss against the good environment's, level 2 bisects
    c's releases by the same metric."""
    same = {"1.0": (), "2.0": ()}
    dists = {"a": same, "b": same, "c": {v: () for v in ("1.0", "1.1", "1.2", "1.3")}}
    args = _setup(tmp_path, "em", dists, {"a": "1.0", "b": "1.0", "c": "1.0"}, {"a": "2.0", "b": "2.0", "c": "1.3"},
                  "False")
    (tmp_path / "check.py").write_text(LOSS_RULE.format(prefix="em"))
    args = [a for a in args if a not in ("--regress-on", "fail")]
    out, res = _bisect(cli, tmp_path, cache_dir, args, "--metric", "loss@step5", "--worse-if", "differs by 1%")
    diff = out["env_diff"]
    assert diff["culprits"] == ["dsb-em-c"] and out["verdict"] == "found", out["message"]
    nums = out["numbers"]
    by = {p["label"]: p for p in nums["points"]}
    assert by["good env"]["median"] == 1.5 and by["bad env"]["median"] == 1.75 and by["bad env"]["call"] == "worse"
    assert all(p["call"] in ("worse", "not-worse") for p in nums["points"])
    assert "loss@step5 1.5 → 1.75 (+16.7 %): dsb-em-c" in nums["answer"]
    rel = _level2(out, "c")
    assert (rel["last_good"], rel["first_bad"], rel["verdict"]) == ("1.1", "1.2", "found")
    assert rel["numbers"]["metric"] == "loss@step5"
    # the same environments, no change in the number: not reproduced, with both values
    (tmp_path / "bad.txt").write_text((tmp_path / "bad.txt").read_text().replace("dsb-em-c==1.3", "dsb-em-c==1.1"))
    same_out, res = _bisect(cli, tmp_path, cache_dir, args, "--metric", "loss@step5", "--worse-if", "differs by 1%",
                            code=1)
    assert same_out["verdict"] == "not-reproduced"
    assert "not reproduced: within noise (good 1.5, bad 1.5)" in same_out["message"]
