"""Bring your own repro: the user's command line as they would type it, under real launchers.

A deepspeed line, a torchrun line and a plain executable each run in every point venv as given
(dsbisect adds only a free port and per-rank logs); the script never passes a collective
timeout, yet a hang ends at dsbisect's; git bisect's exit codes hold (0 good, 125 skip, else
bad); the files the line names are recorded with the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_json, offline

import toypkg
from dsbisect.run import matrix as matrix_mod
from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator

pytestmark = pytest.mark.slow

# A user's training script: its own arguments, a config file, no timeout for its collectives.
# Its ranks meet (env://) within a limit of their own, which only bounds a failure: on a loaded
# machine one rank can be a minute late, importing torch.
TRAIN = """\
import argparse, datetime, json, os
import torch.distributed as dist
import dsb_toy

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True)
ap.add_argument("--steps", type=int, default=1)
ap.add_argument("--local_rank", type=int, default=0)
args = ap.parse_args()
cfg = json.load(open(args.config))
store, rank, world = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=600)))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)  # no timeout: dsbisect's
print(f"rank {dist.get_rank()}: lr {cfg['lr']}, {args.steps} steps, dsb_toy {dsb_toy.__version__}", flush=True)
for _ in range(args.steps):
    dsb_toy.step(dist)
dist.barrier()
dist.destroy_process_group()
"""

# A shell script that builds nothing and checks one thing: git-bisect style.
CHECK = """\
#!/bin/sh
# exit 0: good, 125: cannot test, anything else: bad
python -c "import dsb_toy" 2>/dev/null || exit 125
v=$(python -c "import dsb_toy; print(dsb_toy.BEHAVIOUR)")
[ "$v" = ok ] && exit 0
echo "dsb_toy behaves: $v" >&2
exit 3
"""

RELEASES = {"4.0.0": "ok", "4.1.0": "ok", "4.2.0": "import", "4.3.0": "skip", "4.4.0": "skip"}


@pytest.fixture(scope="module")
def house(tmp_path_factory):
    return toypkg.build_wheelhouse(tmp_path_factory.mktemp("byo-wheels"), RELEASES, dist="dsb-byo")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "cfg.json").write_text('{"lr": 0.001}\n')
    (tmp_path / "check.sh").write_text(CHECK)
    (tmp_path / "check.sh").chmod(0o755)
    return tmp_path


def _run(cli, project, house, cache_dir, *command, versions="dsb-byo=4.0.0,4.3.0", extra=()):
    report, _ = cli_json(cli, "run", "--versions", versions, "--accelerator", "cpu", "--collective-timeout", "5",
                         *offline(house, cache_dir), *extra, "--", *command, cwd=project)
    return {r["versions"]["dsb-byo"]: r for r in report["runs"]}


@pytest.mark.parametrize("line", [
    ["deepspeed", "--num_gpus", "2", "train.py", "--config", "cfg.json", "--steps", "2"],
    ["torchrun", "--nproc-per-node", "2", "train.py", "--config", "cfg.json", "--steps", "2"],
])
def test_a_launcher_line_runs_as_given(cli, project, house, cache_dir, line):
    # --no-early-hang: the collective timeout, not the early proof that races it, ends the hang
    runs = _run(cli, project, house, cache_dir, *line, extra=("--no-early-hang",))
    ok, hung = runs["4.0.0"], runs["4.3.0"]
    assert ok["outcome"] == "pass", ok["reason"]
    # The script passed no timeout: dsbisect's 5 s collective timeout still ended the hang.
    assert hung["outcome"] == "hang" and "Timed out waiting 5000ms" in hung["reason"], hung["reason"]
    env = ok["environment"]
    assert env["command"] == line
    inputs = {Path(i["path"]).name: i for i in env["inputs"]}
    assert set(inputs) >= {"train.py", "cfg.json"}
    copy = Path(ok["run_dir"]) / inputs["cfg.json"]["copy"]
    assert copy.read_text() == '{"lr": 0.001}\n'
    log = Path(ok["run_dir"]) / "launcher.log"
    assert "--master" in log.read_text() or line[0] == "torchrun"  # dsbisect's own port, not a fixed one
    assert list((Path(ok["run_dir"]) / "ranks").rglob("*.log"))  # per-rank logs in the run folder


def test_a_changed_config_is_a_different_case(cli, project, house, cache_dir):
    # what is tested is the case's key (the files the line names), not a launcher (the two
    # launcher lines are the test above's): the script with its config, one rank, no launcher
    line = ["python", "train.py", "--config", "cfg.json"]
    one = ("--nproc", "1")
    first = _run(cli, project, house, cache_dir, *line, versions="dsb-byo=4.0.0", extra=one)["4.0.0"]
    again = _run(cli, project, house, cache_dir, *line, versions="dsb-byo=4.0.0", extra=one)["4.0.0"]
    assert again["id"] == first["id"]  # recorded, reused
    (project / "cfg.json").write_text('{"lr": 0.01}\n')
    changed = _run(cli, project, house, cache_dir, *line, versions="dsb-byo=4.0.0", extra=one)["4.0.0"]
    assert changed["id"] != first["id"] and changed["outcome"] == "pass"


def test_an_executable_is_judged_by_its_exit_code(cli, project, house, cache_dir):
    runs = _run(cli, project, house, cache_dir, "./check.sh", versions="dsb-byo=4.1.0,4.2.0,4.3.0")
    assert runs["4.1.0"]["outcome"] == "pass"
    assert runs["4.2.0"]["outcome"] == "skip"  # cannot be tested: an import check, or the script's own 125
    assert (runs["4.3.0"]["outcome"], runs["4.3.0"]["reason"]) == ("fail", "exit 3")


def test_bisect_takes_the_command_line(cli, project, house, cache_dir):
    res = cli("bisect", "dsb-byo", "4.0.0", "4.4.0", "--accelerator", "cpu", "--regress-on", "any",
              *offline(house, cache_dir), "--format", "json", "-q",
              "--", "./check.sh", cwd=project)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # 4.2.0 cannot be tested (it does not import): the change is in 4.2.0 or 4.3.0.
    assert (out["verdict"], out["last_good"], out["maybe"]) == ("ambiguous", "4.1.0", ["4.2.0", "4.3.0"])


def test_command_lines_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(InputError, match="missing.py"):
        matrix_mod.command_case(["torchrun", "--nproc-per-node", "2", "missing.py"], tmp_path)
    (tmp_path / "x.py").write_text("")
    case = matrix_mod.command_case(["python", "-u", "x.py", "--lr", "1"], tmp_path, nproc=3,
                                   accelerator=Accelerator.CPU)
    assert case.command is None and case.nproc == 3 and case.script.name == "x.py" and case.args == ("--lr", "1")
