"""The output contract: the keys and value types of what `run`, `report`, `bisect` and `diff`
print with ``--format json``, and the line shapes of `log`, pinned on real toy runs.

Scripts parse these; a key renamed, dropped or retyped breaks them.  The pinned trees below
are literal data, so such a change shows as a diff of this file.  What is pinned is the shape,
never a value that varies (times, ids, paths, versions of the machine's packages).

The spec language of the trees:
- a string names the JSON types a value may have, joined by ``|``: ``str``, ``int``,
  ``number`` (an int or a float), ``bool``, ``null``, ``object`` (any object: one whose keys
  these runs cannot show, e.g. a commit search's, which needs a clone);
- ``[spec]``: a list whose every element is ``spec``;
- ``{"key": spec, "key?": spec}``: an object with exactly these keys, ``?`` marking a key
  that is there only on some machines or some runs (a GPU's facts, a measurement that may
  not be taken); an object may hold no key that is not pinned;
- ``{"*": spec}``: an object keyed by data (package names, case names, outcomes);
- ``(spec, spec)``: either.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import toypkg
from conftest import write_matrix

# ------------------------------------------------------------------ the pinned trees

HOST = {
    "name": "str", "dsbisect": "str", "host_python": "str", "platform": "str", "cpus": "int",
    "gpus": ["str"], "cpu_model?": "str", "ram_bytes?": "int", "shm_bytes?": "int", "driver?": "str",
    "topology?": "str",
}

FINGERPRINT = {
    "format": "int",
    "files": [["str"]],
    "env": [["str"]],
    "interpreter": {"executable": "str", "python": "str", "torch": "str", "cuda": "str"},
    "accelerator": "str",
    "added": "str",  # what dsbisect added to the line (--multi_gpu), "" for nothing (Inputs.added, f7fad9b)
}

# What the import check of a point venv found (on a GPU machine, also CUDA's and NCCL's versions).
CHECKED = {
    "python": "str", "versions": {"*": "str"}, "where": "str", "seconds": "number",
    "cuda?": "str|null", "gpus?": ["str"], "nccl?": "str", "nvcc?": "str",
    "fingerprint": FINGERPRINT, "host": HOST,
}

# A run that launched (pass, fail, hang); the keys with ? depend on what the run met.
EVIDENCE = {
    "files": ["str"], "notes": ["str"], "taken": ["str"], "survivors": ["str|int"], "pids": ["int"],
    "peak_rss?": "int", "oom?": "object", "escaped?": ["int"], "shm_removed?": ["str"],
}

HANG = {"waits": [["int|str"]], "frames": ["str"], "text": "str"}  # a hang's signature, typed
LAUNCHED_ENVIRONMENT = CHECKED | {"accelerator": "str", "shadowed": [["str"]], "index": "str"}


def _run(evidence: dict, environment: dict, exit_code: str = "int") -> dict:
    return {
        "id": "int", "case": "str", "point": "str", "versions": {"*": "str"}, "commit": "str|null",
        "attempt": "int", "started": "number", "outcome": "str", "exit_code": exit_code, "seconds": "number",
        "reason": "str", "signature": "str", "run_dir": "str", "evidence": evidence,
        "environment": environment, "manual": "str|null",
        "variant": "str",  # the grid's name of the run's variant of its case (issue 23): a "variants" entry's "case"
    }


# One run of each outcome, as `run` and `report` list it under "runs".
RUN_BY_OUTCOME = {
    "pass": _run(EVIDENCE, LAUNCHED_ENVIRONMENT),
    "fail": _run(EVIDENCE | {"error_frames": ["str"]}, LAUNCHED_ENVIRONMENT),
    # a hang the launcher ended has its exit code; one dsbisect ended itself (the early proof, the
    # grace after a timeout line, the wall timeout) has none: the process group was stopped
    "hang": _run(EVIDENCE | {"hang_detected_after_s?": "number", "hang": HANG}, LAUNCHED_ENVIRONMENT,
                 exit_code="int|null"),
    # untestable: the point's venv does not import the package (nothing launched)
    # its evidence is why it was skipped: records.SkipCause (added with the typed records, issue 19)
    "skip": _run({"skip_cause": "str"}, CHECKED, exit_code="null"),
}

GRID = {  # `run --format json` and `report --format json`, without "runs"
    "dsbisect": "str",
    "hosts": [HOST],
    "compat": ["str"],
    "cases": ["str"],
    "grid": [{"point": "str",
              "cells": {"*": {"outcome": "str", "counts": {"*": "int"}, "seconds": "number", "run": "int"}}}],
    # issue 23: the runs of one case name that ran the same thing (case key; each point's latest
    # inputs apart from earlier ones): "case" is its label in "cases" and the cells
    "variants": [{"case": "str", "name": "str", "case_key": "str", "differs": ["str"], "earlier_inputs": "bool",
                  "run_ids": ["int"], "same_as": ["str"]}],
    "runs": ["object"],  # each pinned by RUN_BY_OUTCOME
}

# `report --format json`: the grid and the store's bisections (issue 23), each with its answer
REPORT = GRID | {
    "bisections": [{"key": "str", "question": "str", "case": "str", "status": "str", "verdict": "str|null",
                    "answer": ["str"], "run_ids": ["int"], "command": "str",
                    # issue 37: the answer as fields, one per package answered (the sentences stay in "answer")
                    "found": [{"package": "str", "mode": "str", "last_good": "str|null", "first_bad": "str|null",
                               "maybe": ["str"], "commit": "str|null", "subject": "str"}]}],
}

FAILURE = {"kind": "str", "error": "str", "message": "str", "frames": ["str"], "identity": "str", "shown": "str",
           "hang?": HANG}

CONFIRM_END = {"point": "str", "agree": "int", "runs": "int", "as": "str"}

BISECT = {
    "package": "str",
    "good": "str",
    "bad": "str",
    "mode": "str",
    "regress_on": "str",
    "regression": {"kind": "str", "asked": "str", "learned_from": "str", "identity": "str", "failure": FAILURE},
    "different": ["str"],
    "signature_filter": "str|null",
    "case": "str",
    "pins": ["str"],
    "candidates": ["str"],
    "steps": [{"stage": "str", "version": "str", "commit": "str|null", "subject": "str", "verdict": "str",
               "outcome": "str", "runs": "int", "counts": {"*": "int"}, "run_ids": ["int"], "seconds": "number",
               "detail": "str", "manual": "bool"}],
    "verdict": "str",
    "message": "str",
    "last_good": "str|null",
    "first_bad": "str|null",
    "maybe": ["str"],
    "commit": "object|null",
    "commit_message": "str",
    "good_end": "str|null",
    "caveats": ["str"],
    "confirm": {"runs": "int", "confirmed": "bool", "last_good": CONFIRM_END, "first_bad": CONFIRM_END},
    "proof": "object|null",
    # issue 22's --confidence P (null without it): {"asked", "release", "commit"}
    "confidence": ({"asked": "number", "release": "object|null", "commit": "object|null"}, "null"),
}

ENV_SIDE = {"source": "str", "format": "str", "python": "str|null", "requires_python": "str|null",
            "packages": "int", "options": ["str"], "notes": ["str"], "roots": ["str"]}
PIN = {"version": "str", "direct": "str|null", "editable": "bool", "requirement": "str"}
DIFF = {
    "summary": "str",
    "good": ENV_SIDE,
    "bad": ENV_SIDE,
    # an added package has no "good" side, a removed one no "bad"
    "changes": [{"name": "str", "kind": "str", "good": (PIN, "null"), "bad": (PIN, "null"), "bisectable": "bool",
                 "whole": "bool", "describe": "str", "notes": ["str"]}],
}

# `bisect --good-config/--bad-config` (issue 41): env_diff.changes' elements that are settings (a
# package change keeps its keys); "setting" is "config", "env" or "flag"; a secret's values are "***".
SETTING_CHANGE = {"name": "str", "kind": "str", "good": "str|null", "bad": "str|null", "bisectable": "bool",
                  "describe": "str", "setting": "str"}

# `log`: the header, then one `dsbisect mark` line per run the bisection used.
LOG_HEADER = [
    r"# dsbisect log of bisection [0-9a-f]{16}: dsb-contract 1\.0\.0 → 1\.2\.0 \(done: found\)",
    r"# dsbisect bisect dsb-contract 1\.0\.0 1\.2\.0 .*--case=toy.*",
    r"# ran in .+: replay from there \(.+\)",
    r"# answer: last good 1\.0\.0, first bad 1\.1\.0",
    r"# replay with: dsbisect replay FILE --store NEW, then the command above with --store NEW runs nothing",
]
LOG_MARK = r"dsbisect mark (good|bad|skip) dsb-contract==1\.[0-2]\.0 --case=toy  # run \d+( \(confirm\))?: (pass|fail|hang) [\d.]+ s(: .+)?"


# ------------------------------------------------------------------ the check

def _kind(value) -> str:
    for t, name in ((bool, "bool"), (int, "int"), (float, "number"), (str, "str"), (list, "list"), (dict, "object")):
        if isinstance(value, t):
            return name
    return "null"


def mismatches(value, spec, path: str = "$") -> list[str]:
    """Where ``value`` departs from ``spec`` (the spec language of this module's docstring)."""
    if isinstance(spec, tuple):  # one of these
        each = [mismatches(value, s, path) for s in spec]
        return [] if [] in each else min(each, key=len)
    if isinstance(spec, str):
        kinds, got = spec.split("|"), _kind(value)
        ok = got in kinds or (got == "int" and "number" in kinds)
        return [] if ok else [f"{path}: a {got}, pinned as {spec}"]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [f"{path}: a {_kind(value)}, pinned as a list"]
        return [m for i, v in enumerate(value) for m in mismatches(v, spec[0], f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [f"{path}: a {_kind(value)}, pinned as an object"]
    if "*" in spec:
        return [m for k, v in value.items() for m in mismatches(v, spec["*"], f"{path}.{k}")]
    keys = {k.rstrip("?"): k for k in spec}
    found = [f"{path}: key {k!r} is not pinned" for k in value if k not in keys]
    found += [f"{path}: pinned key {k!r} is missing" for k, s in keys.items() if s == k and k not in value]
    return found + [m for k, v in value.items() if k in keys for m in mismatches(v, spec[keys[k]], f"{path}.{k}")]


def assert_conforms(value, spec) -> None:
    found = mismatches(value, spec)
    assert not found, "the --format json contract changed:\n  " + "\n  ".join(found)


def test_the_check_catches_a_renamed_a_dropped_and_a_retyped_key():
    good = {"a": 1, "b": [{"c": "x"}], "d": {"pkg": "1.0"}}
    spec = {"a": "int", "b": [{"c": "str", "e?": "int"}], "d": {"*": "str"}}
    assert mismatches(good, spec) == []
    assert mismatches({"a": 1.5, "b": [{"c": None, "f": 1}], "d": {"pkg": 1}}, spec) == [
        "$.a: a number, pinned as int",
        "$.b[0]: key 'f' is not pinned", "$.b[0].c: a null, pinned as str", "$.d.pkg: a int, pinned as str"]
    assert mismatches({"a": 1, "d": {}}, spec) == ["$: pinned key 'b' is missing"]
    assert mismatches(None, ({"c": "str"}, "null")) == [] and mismatches({"c": "x"}, ({"c": "str"}, "null")) == []
    assert mismatches({"c": 1}, ({"c": "str"}, "null")) == ["$.c: a int, pinned as str"]


# ------------------------------------------------------------------ the runs

RELEASES = {"1.0.0": "ok", "1.1.0": "raise", "1.2.0": "skip", "1.3.0": "import"}


def _dsbisect(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real program, as a script reading its output would start it."""
    return subprocess.run([sys.executable, "-m", "dsbisect", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, cache_dir) -> dict:
    """One grid of a pass, a fail, a hang and an untestable release; a bisection over the
    first three that reuses them (with --confirm 2: two runs more); `report` and `log` of it.
    The collectives' timeout (300 s) only bounds a failure: the early proof ends the hang, on a
    loaded machine too, not a 3 s gloo timeout racing dsbisect's grace for the ranks' stacks."""
    folder = tmp_path_factory.mktemp("contract")
    house = toypkg.build_wheelhouse(tmp_path_factory.mktemp("contract-wheels"), RELEASES, dist="dsb-contract")
    write_matrix(folder, list(RELEASES), package="dsb-contract", collective_timeout=300)
    offline = ("--offline", "--find-links", str(house), "--cache-dir", str(cache_dir), "-q")
    got = {}
    for name, args in (("run", ("run", "matrix.yaml", "--format", "json", *offline)),
                       ("bisect", ("bisect", "dsb-contract", "1.0.0", "1.2.0", "--case", "toy", "--regress-on",
                                   "any", "--confirm", "2", "--format", "json", *offline)),
                       ("report", ("report", "--format", "json")),
                       ("log", ("log",))):
        res = _dsbisect(*args, cwd=folder)
        assert res.returncode == 0, f"{name}: {res.stdout}{res.stderr}"
        got[name] = res.stdout if name == "log" else json.loads(res.stdout)
    return got


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "report"])
def test_grid_json_keys(outputs, command):
    grid = outputs[command]
    assert_conforms(grid, REPORT if command == "report" else GRID)
    if command == "report":  # the bisection made after the run is there, with its verdict
        assert [(b["verdict"], b["case"]) for b in grid["bisections"]] == [("found", "toy")]
        (found,) = grid["bisections"][0]["found"]
        assert (found["package"], found["last_good"], found["first_bad"]) == ("dsb-contract", "1.0.0", "1.1.0")
    by_outcome = {r["outcome"]: r for r in grid["runs"]}
    assert sorted(by_outcome) == sorted(RUN_BY_OUTCOME)  # each outcome's record is pinned
    for outcome, run in by_outcome.items():
        assert_conforms(run, RUN_BY_OUTCOME[outcome])


@pytest.mark.slow
def test_bisect_json_keys(outputs):
    result = outputs["bisect"]
    assert (result["verdict"], result["first_bad"], result["confirm"]["confirmed"]) == ("found", "1.1.0", True)
    assert_conforms(result, BISECT)


@pytest.mark.slow
def test_log_lines(outputs):
    lines = outputs["log"].splitlines()
    for pattern, line in zip(LOG_HEADER, lines):
        assert re.fullmatch(pattern, line), line
    marks = lines[len(LOG_HEADER):]
    used = {i for s in outputs["bisect"]["steps"] for i in s["run_ids"]}
    assert len(marks) == len(used)  # one line per run used
    for line in marks:
        assert re.fullmatch(LOG_MARK, line), line


def test_diff_json_keys(tmp_path):
    (tmp_path / "good.txt").write_text("dsb-a==1.0\ndsb-b==2.0\ndsb-c==1.0\n")
    (tmp_path / "bad.txt").write_text("dsb-a==1.1\ndsb-b==2.0\ndsb-d==3.0\n")
    res = _dsbisect("diff", "good.txt", "bad.txt", "--format", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert sorted(c["kind"] for c in found["changes"]) == ["added", "changed", "removed"]
    assert_conforms(found, DIFF)


@pytest.mark.slow
def test_settings_bisect_json_keys(tmp_path, cache_dir):
    (tmp_path / "job.py").write_text("import json, sys\nsys.exit(json.load(open(sys.argv[-1]))['x'])\n")
    (tmp_path / "ok.json").write_text('{"x": 0, "y": 1}')
    (tmp_path / "broken.json").write_text('{"x": 1, "y": 2}')
    res = _dsbisect("bisect", "--good-config", "ok.json", "--bad-config", "broken.json", "--store", "store",
                    "--cache-dir", str(cache_dir), "-q", "--format", "json", "--", "python", "job.py", "broken.json",
                    cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["env_diff"]["culprits"] == ["x"] and found["message"].startswith("2 changes; culprit config x 0 -> 1")
    for change in found["env_diff"]["changes"]:
        assert_conforms(change, SETTING_CHANGE)
