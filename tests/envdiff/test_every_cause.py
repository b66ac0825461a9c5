"""Every cause of an environment bisection, on toy packages: two independent causes (each alone
breaks the job), each bisected to its release with its own remedy, and the verified last line;
a bisection killed between the causes resumes with what it had found.

Real toy wheels through real uv (offline, a wheelhouse per test) and a 1-rank script without a
launcher, as tests/envdiff/test_engine.py: the script fails when the versions it finds meet a
rule, as two regressions in those releases would.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import toypkg
from conftest import offline, stopped_dsbisect

pytestmark = pytest.mark.slow

RULE = """\
import importlib.metadata as md, sys
def v(name):
    return tuple(int(x) for x in md.version("dsb-{p}-" + name).split("."))
bad = []
if (1, 2) <= v("a") < (1, 4):
    bad.append("a")
if v("b") >= (2, 1):
    bad.append("b")
print("broken by", bad if bad else "nothing", flush=True)
sys.exit(1 if bad else 0)
"""
# a: 1.2 breaks it, 1.4 (newer than the bad environment's 1.3) fixes it; b: 2.1 breaks it, still broken in 2.2
RELEASES = {"a": ("1.0", "1.1", "1.2", "1.3", "1.4"), "b": ("2.0", "2.1", "2.2"), "x": ("1.0", "1.1"),
            "y": ("1.0", "1.1")}
GOOD = {"a": "1.0", "b": "2.0", "x": "1.0", "y": "1.0"}
BAD = {"a": "1.3", "b": "2.2", "x": "1.1", "y": "1.1"}


def _setup(tmp_path: Path, p: str) -> list[str]:
    for name, versions in RELEASES.items():
        for version in versions:
            dist = f"dsb-{p}-{name}"
            toypkg.build_wheel(tmp_path / "wh", version, "ok", dist=dist, module=dist.replace("-", "_"))
    for end, pins in (("good", GOOD), ("bad", BAD)):
        (tmp_path / f"{end}.txt").write_text("".join(f"dsb-{p}-{n}=={v}\n" for n, v in sorted(pins.items())))
    (tmp_path / "check.py").write_text(RULE.format(p=p))
    return ["bisect", "--good-env", "good.txt", "--bad-env", "bad.txt", "--script", "check.py", "--nproc", "1",
            "--accelerator", "cpu", "--regress-on", "fail", *offline(tmp_path / "wh")]


def test_two_independent_causes_each_with_its_release_and_remedy(tmp_path, cli, cache_dir):
    args = _setup(tmp_path, "kc") + ["--cache-dir", str(cache_dir), "--store", str(tmp_path / "store"), "-q"]
    res = cli(*args, "--format", "json", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    every = out["every_cause"]
    assert set(every) == {"end", "verified", "reverted", "causes"}
    assert {k for c in every["causes"] for k in c} == {"culprits", "culprit_changes", "required", "exact", "verdict",
                                                      "note", "check", "check_line", "releases"}
    assert [c["culprits"] for c in every["causes"]] == [["dsb-kc-a"], ["dsb-kc-b"]]
    assert out["env_diff"]["culprits"] == ["dsb-kc-a"]  # the first cause, where it always was
    assert every["end"] == "passes" and every["reverted"] == ["dsb-kc-a", "dsb-kc-b"]
    first, second = every["causes"]
    assert first["check"]["side"] == "new" and first["check"]["outcome"] == "fail"  # b alone still breaks it
    assert second["check"]["side"] == "old" and second["check"]["outcome"] == "pass"
    assert second["check"]["applied"] == [2, 3]  # the bad environment with a and b reverted: x, y moved
    run = second["check"]["run_ids"][0]
    assert every["verified"] == f"the bad environment with these 2 changes reverted passes (run {run})"
    assert out["message"].endswith(every["verified"]) and "2 causes; cause 1: culprit dsb-kc-a" in out["message"]
    rel = {r["package"]: (r["last_good"], r["first_bad"]) for r in out["releases"]}
    assert rel == {"dsb-kc-a": ("1.1", "1.2"), "dsb-kc-b": ("2.0", "2.1")}
    assert first["releases"] == ["dsb-kc-a"] and second["releases"] == ["dsb-kc-b"]
    fix = {m["package"]: m for m in out["remedy"]}
    a, b = fix["dsb-kc-a"], fix["dsb-kc-b"]
    # each pin ran with the other cause reverted (else b's bug would fail a's pin too)
    assert a["pin_holds"] and "dsb-kc-b==2.0" in a["pin_bisection"]["pins"] and a["others_reverted"]
    assert b["pin_holds"] and "dsb-kc-a==1.0" in b["pin_bisection"]["pins"]
    assert (a["fixed_in"], a["still_bad"]) == ("1.4", False)
    assert (b["latest"], b["still_bad"]) == ("2.2", True)
    md = cli(*args, "--format", "markdown", cwd=tmp_path)
    assert md.stdout.splitlines()[0] == "**Still broken in the latest release: dsb-kc-b 2.2.**", md.stdout
    assert every["verified"] in md.stdout and "cause 2" in md.stdout
    text = cli(*args, cwd=tmp_path)
    assert text.stdout.index("pin: dsb-kc-a==1.1") < text.stdout.index("2 causes")
    assert every["verified"] in " ".join(text.stdout.split())


def _done_runs(store: Path) -> list[str]:
    try:
        with sqlite3.connect(store / "dsbisect.sqlite3") as con:
            return [k for (k,) in con.execute("SELECT point_key FROM runs WHERE status='done' ORDER BY id")]
    except sqlite3.Error:
        return []


def _past_the_first_cause(store: Path) -> bool:
    """A saved step that applies everything but a: the check after the first cause was run."""
    return any("good + dsb-kr-b 2.0 -&gt; 2.2, dsb-kr-x" in p.read_text() or "good + dsb-kr-b 2.0 -> 2.2, dsb-kr-x"
               in p.read_text() for p in store.glob("bisections/*.json"))


def test_a_kill_between_the_causes_resumes_with_what_was_found(tmp_path, cli, cache_dir):
    args = _setup(tmp_path, "kr") + ["--cache-dir", str(cache_dir), "--store", str(tmp_path / "store"), "-q",
                                     "--format", "json"]
    store = tmp_path / "store"
    stopped_dsbisect(args, tmp_path, lambda: _past_the_first_cause(store), 600, "the check after the first cause")
    finished = _done_runs(store)
    assert finished
    res = cli(*args, cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [c["culprits"] for c in out["every_cause"]["causes"]] == [["dsb-kr-a"], ["dsb-kr-b"]]
    assert out["every_cause"]["end"] == "passes"
    keys = _done_runs(store)
    assert all(keys.count(k) == 1 for k in finished), "a finished trial was run again"
