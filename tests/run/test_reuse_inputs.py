"""A recorded run is reused only when what it ran is the same (``dsbisect.inputs``).

Real runs of a tiny one-rank script (the point venv's python itself, no launcher), each case
both ways: what changed runs again and says why; what did not change is still reused.  The
script's verdict depends on everything that may change under a recorded run: a local module it
imports, a variable it reads, a config named in its args, the matrix's ``env:``, and the
interpreter (``--python``).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import offline
import toypkg

pytestmark = pytest.mark.slow

RELEASES = {"1.0.0": "ok", "1.1.0": "raise"}

# Passes when helper.FIXED, MY_FIX=1, or a JSON file named in its args says {"fixed": true};
# dsb_toy 1.1.0 fails unless fixed some way, 1.0.0 passes whatever.
SCRIPT = """\
import json, os, sys
import dsb_toy
import helper

named = [a for a in sys.argv[1:] if a.endswith(".json")]
for log in (a for a in sys.argv[1:] if a.endswith(".log")):  # an output named in the args
    open(log, "a").write("ran\\n")
cfg = json.load(open(named[-1])) if named else {}
fixed = helper.FIXED or os.environ.get("MY_FIX") == "1" or cfg.get("fixed")
print(f"dsb_toy {dsb_toy.BEHAVIOUR} fixed={fixed}", flush=True)
sys.exit(0 if fixed or dsb_toy.BEHAVIOUR == "ok" else 1)
"""


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("reuse-wheels"), RELEASES, dist="dsb-reuse")


@pytest.fixture
def project(tmp_path, monkeypatch):
    for name in ("MY_FIX", "MY_DB_PASS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "x.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text("FIXED = False\n")
    (tmp_path / "cfg.json").write_text('{"fixed": false}\n')
    return tmp_path


def _run(cli, project, house, cache_dir, *command, extra=(), versions="dsb-reuse=1.1.0"):
    """``dsbisect run`` of ``command`` (default: the script): (the run's JSON, stderr)."""
    res = cli("run", "--versions", versions, "--nproc", "1", "--accelerator", "cpu", *offline(house, cache_dir),
              "--format", "json", *extra,
              "--", *(command or ("python", "x.py")), cwd=project)
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    return run, res.stderr


def _matrix_run(cli, project, house, cache_dir, env: str = "", args: str = ""):
    (project / "matrix.yaml").write_text(f"""\
defaults: {{accelerator: cpu, nproc: 1, timeout: 120, env: {{OMP_NUM_THREADS: "1"{env}}}}}
cases:
  one:
    script: x.py
    args: [{args}]
    axes: {{dsb-reuse: ["1.1.0"]}}
""")
    res = cli("run", "matrix.yaml", *offline(house, cache_dir),
              "--format", "json", cwd=project)
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    return run, res.stderr


def _reused(run: dict, stderr: str, first: dict) -> bool:
    return run["id"] == first["id"] and f"(run {first['id']}, recorded)" in stderr


def test_an_edited_local_module_runs_again_and_an_unchanged_one_is_reused(cli, project, house, cache_dir):
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "fail", first["reason"]
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err
    # The hook listed what the rank imported from outside the venv: the script and helper.py.
    imported = {Path(p).name for p, _ in first["environment"]["fingerprint"]["files"]}
    assert {"x.py", "helper.py"} <= imported

    (project / "helper.py").write_text("FIXED = True\n")
    fixed, err = _run(cli, project, house, cache_dir)
    assert fixed["id"] != first["id"] and fixed["outcome"] == "pass", err
    assert f"recorded run {first['id']} is for other inputs: helper.py changed; running it again" in err
    last, err = _run(cli, project, house, cache_dir)
    assert _reused(last, err, fixed), err


def test_an_exported_variable_runs_again_and_volatile_ones_do_not(cli, project, house, cache_dir, monkeypatch):
    monkeypatch.setenv("MY_DB_PASS", "hunter2-but-longer")
    first, _ = _run(cli, project, house, cache_dir)
    assert first["outcome"] == "fail"
    # What differs from one shell, terminal, job or invocation to the next is not an input.
    for name, value in (("OLDPWD", "/elsewhere"), ("SLURM_JOB_ID", "4242"), ("TERM_PROGRAM", "tmux"),
                        ("SSH_CONNECTION", "10.0.0.1 22"), ("DSBISECT_LOOKAHEAD", "0")):
        monkeypatch.setenv(name, value)
    again, err = _run(cli, project, house, cache_dir)
    assert _reused(again, err, first), err

    monkeypatch.setenv("MY_FIX", "1")
    fixed, err = _run(cli, project, house, cache_dir)
    assert fixed["outcome"] == "pass" and fixed["id"] != first["id"]
    assert f"recorded run {first['id']} is for other inputs: MY_FIX set" in err, err
    monkeypatch.delenv("MY_FIX")
    back, err = _run(cli, project, house, cache_dir)  # the first run's inputs again: the first run
    assert _reused(back, err, first), err
    # Values are digested (keyed by the store's own key), never stored.
    record = (Path(first["run_dir"]) / "run.json").read_text()
    assert "MY_DB_PASS" in record and "hunter2-but-longer" not in record


def test_a_changed_file_named_in_the_args_runs_again(cli, project, house, cache_dir):
    # A matrix case (its ranks run in the run folder: the path is absolute): its args are not in
    # the case key; the file they name is an input.
    # A file the run writes (a log named in the args) is its output, not an input.
    args = f'"--deepspeed", "{project / "cfg.json"}", "--log", "{project / "train.log"}"'
    first, _ = _matrix_run(cli, project, house, cache_dir, args=args)
    assert first["outcome"] == "fail"
    again, err = _matrix_run(cli, project, house, cache_dir, args=args)
    assert _reused(again, err, first), err
    (project / "cfg.json").write_text('{"fixed": true}\n')
    fixed, err = _matrix_run(cli, project, house, cache_dir, args=args)
    assert fixed["outcome"] == "pass" and f"recorded run {first['id']} is for other inputs: cfg.json changed;" in err
    assert (project / "train.log").read_text() == "ran\nran\n"

    # A command line: the file is in its case key, and the new case says what changed since.
    line = ("python", "x.py", "--deepspeed", "cfg.json")
    (project / "cfg.json").write_text('{"fixed": false}\n')
    cmd, _ = _run(cli, project, house, cache_dir, *line)
    assert cmd["outcome"] == "fail"
    (project / "cfg.json").write_text('{"fixed": true}\n')
    cmd2, err = _run(cli, project, house, cache_dir, *line)
    assert cmd2["outcome"] == "pass" and f"recorded run {cmd['id']} is for other inputs: cfg.json changed" in err
    cmd3, err = _run(cli, project, house, cache_dir, *line)
    assert _reused(cmd3, err, cmd2), err


def test_a_changed_matrix_env_value_says_so(cli, project, house, cache_dir):
    first, _ = _matrix_run(cli, project, house, cache_dir, env=', MY_FIX: "0"')
    assert first["outcome"] == "fail"
    fixed, err = _matrix_run(cli, project, house, cache_dir, env=', MY_FIX: "1"')
    assert fixed["outcome"] == "pass" and f"recorded run {first['id']} is for other inputs: MY_FIX changed" in err
    again, err = _matrix_run(cli, project, house, cache_dir, env=', MY_FIX: "1"')
    assert _reused(again, err, fixed), err


def test_bisect_probes_reuse_only_runs_of_the_same_inputs(cli, project, house, cache_dir):
    (project / "matrix.yaml").write_text("""\
defaults: {accelerator: cpu, nproc: 1, timeout: 120, env: {OMP_NUM_THREADS: "1"}}
cases:
  one: {script: x.py, axes: {dsb-reuse: ["1.0.0"]}}
""")
    args = ("bisect", "dsb-reuse", "1.0.0", "1.1.0", "--case", "one", "--regress-on", "fail", *offline(house, cache_dir),
            "--format", "json")
    res = cli(*args, cwd=project)
    assert res.exit_code == 0 and json.loads(res.stdout)["first_bad"] == "1.1.0", res.output
    ids = {i for s in json.loads(res.stdout)["steps"] for i in s["run_ids"]}
    res = cli(*args, cwd=project)
    assert res.exit_code == 0 and {i for s in json.loads(res.stdout)["steps"] for i in s["run_ids"]} == ids
    assert "recorded)" in res.stderr and "running it again" not in res.stderr

    (project / "helper.py").write_text("FIXED = False  # edited, same behaviour\n")
    res = cli(*args, cwd=project)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["first_bad"] == "1.1.0"
    assert not {i for s in out["steps"] for i in s["run_ids"]} & ids  # every probe ran again
    assert res.stderr.count("is for other inputs: helper.py changed; running it again") == 2, res.stderr


def test_a_run_that_records_no_inputs_is_run_again(cli, project, house, cache_dir):
    first, _ = _run(cli, project, house, cache_dir)
    store = project / ".dsbisect" / "dsbisect.sqlite3"
    with sqlite3.connect(store) as db:  # as an older dsbisect recorded it
        facts = json.loads(db.execute("SELECT facts FROM runs WHERE id=?", (first["id"],)).fetchone()[0])
        facts.pop("fingerprint")
        db.execute("UPDATE runs SET facts=? WHERE id=?", (json.dumps(facts), first["id"]))
    again, err = _run(cli, project, house, cache_dir)
    assert again["id"] != first["id"]
    assert f"recorded run {first['id']} does not record its inputs (made by an older dsbisect)" in err
    last, err = _run(cli, project, house, cache_dir)
    assert _reused(last, err, again), err


@pytest.fixture(scope="module")
def other_python(tmp_path_factory) -> Path:
    """A second interpreter: a uv venv of the same python, without torch."""
    from dsbisect.envs.uv import uv_bin

    folder = tmp_path_factory.mktemp("other-python") / "venv"
    subprocess.run([uv_bin(), "venv", str(folder), "--python", sys.executable, "--offline", "-q"], check=True)
    return folder / "bin" / "python"


def test_another_interpreter_runs_again_and_the_report_names_it(cli, project, house, cache_dir, other_python):
    first, _ = _run(cli, project, house, cache_dir)
    mine = first["environment"]["fingerprint"]["interpreter"]
    assert mine["torch"] and mine["executable"] != str(other_python)

    other, err = _run(cli, project, house, cache_dir, extra=("--python", str(other_python)))
    assert other["id"] != first["id"], err
    assert f"recorded run {first['id']} is for other inputs: python changed ({mine['executable']} -> " \
           f"{other_python})" in err, err
    # No torch there: the point cannot be tested, and says so with that interpreter's facts.
    assert other["outcome"] == "skip" and "torch" in other["reason"]
    assert other["environment"]["fingerprint"]["interpreter"]["executable"] == str(other_python)
    res = cli("run", "--versions", "dsb-reuse=1.1.0", "--nproc", "1", "--accelerator", "cpu", *offline(house, cache_dir),
              "--python", str(other_python), "--",
              "python", "x.py", cwd=project)
    assert f"python 3.{sys.version_info[1]}" in res.stdout and f"({other_python})" in res.stdout, res.stdout
    assert mine["executable"] not in res.stdout

    back, err = _run(cli, project, house, cache_dir)  # the first interpreter again: its run
    assert _reused(back, err, first), err
