"""launchers: one LaunchLine per kind — argv, rank env, rank-log names, the manual instructions.

Pure: the cases are made from real files in tmp_path, nothing is started.  The argv and env of
every launcher that existed before ``launchers`` are pinned to what runner.py built then
(``BEFORE``: generated with that code, for the same cases), so the move changed none of them.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from dsbisect.launch import launchers
from dsbisect.run import matrix
from dsbisect.core.command import CommandKind, options_of, parse, parse_hostfile, with_options
from dsbisect.core.errors import InputError, MatrixError
from dsbisect.launch.launchers import LINES, Target, instructions, line_for, plan
from dsbisect.core.model import Accelerator, Case, Launcher, LauncherBackend, Point
from dsbisect.core.rundir import RankLogs, RunDir, rank_of_log


def _cases(folder: Path) -> dict[str, tuple[Case, tuple[int, ...] | None, bool, str | None]]:
    """name -> (case, the slot's GPUs, cuda, CUDA_VISIBLE_DEVICES)."""
    (folder / "train.py").write_text("pass\n")
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    (folder / "hosts").write_text("n1 slots=2\nn2 slots=2\n")
    s = matrix.script_case(folder / "train.py", 2)
    one = replace(s, nproc=1, args=("--steps", "3"))

    def cmd(*argv: str) -> Case:
        return matrix.command_case(list(argv), folder)

    return {
        "ds-cpu": (s, None, False, None),
        "ds-devices": (s, (6, 7), True, None),
        "ds-args": (replace(s, launcher_args=("--bind_cores_to_rank",), args=("--steps", "3")), None, False, None),
        "ds-hostfile": (matrix.with_nodes(s, "t", hostfile=folder / "hosts", num_nodes=2,
                                         backend=LauncherBackend.OPENMPI, master_addr="10.0.0.1"), None, False, None),
        "ds-include": (matrix.with_nodes(s, "t", hostfile=folder / "hosts", include="n1@n2:0"), None, False, None),
        "tr": (replace(s, launcher=Launcher.TORCHRUN, launcher_args=("--max-restarts", "0")), None, False, None),
        "tr-devices": (replace(s, launcher=Launcher.TORCHRUN), (2, 3), True, None),
        "direct-ds": (one, None, False, None),
        "direct-ds-cuda": (one, (3,), True, None),
        "direct-line": (replace(one, line=("python", "train.py", "--steps", "3")), None, False, None),  # as given
        "direct-tr-cuda": (replace(one, launcher=Launcher.TORCHRUN), None, True, "5,6"),
        "direct-off": (replace(one, env=(("DSBISECT_DIRECT", "0"),)), None, False, None),
        "direct-2": (replace(s, launcher=Launcher.DIRECT, args=("--steps", "3")), None, False, None),
        "direct-2-devices": (replace(s, launcher=Launcher.DIRECT), (2, 3), True, None),
        "cmd-ds": (cmd("deepspeed", "--num_gpus", "2", "train.py", "--x"), None, False, None),
        "cmd-ds-port": (cmd("deepspeed", "--master_port", "1234", "--enable_each_rank_log=mine", "train.py"),
                        None, False, None),
        "cmd-tr": (cmd("torchrun", "--nproc-per-node", "2", "train.py"), None, False, None),
        "cmd-tr-own-logs": (cmd("torchrun", "--log-dir", "mine", "--tee", "1", "--master_port=9", "train.py"),
                            None, False, None),
        "cmd-launch": (cmd("python", "-m", "torch.distributed.launch", "--nproc_per_node", "2", "train.py"),
                       None, False, None),
        "cmd-acc": (cmd("accelerate", "launch", "--num_processes", "2", "train.py", "--lr", "1"), None, False, None),
        "cmd-exe": (cmd("./run.sh", "a", "b"), None, False, None),
        # a plain python line asked for as 2 ranks (--nproc 2; without it: one process, no launcher)
        "cmd-script": (matrix.command_case(["python", "train.py", "--y"], folder, nproc=2), None, False, None),
        # new: srun
        "srun-script": (replace(s, launcher=Launcher.SRUN, args=("--steps", "3")), None, False, None),
        "srun-args": (replace(s, launcher=Launcher.SRUN, launcher_args=("-n3", "--kill-on-bad-exit=0")), None, False, None),
        "cmd-srun": (cmd("srun", "--ntasks", "2", "python", "train.py", "--x"), None, False, None),
        "cmd-srun-own": (cmd("srun", "-n", "2", "-o", "mine-%t.log", "-K", "python3", "-X", "dev", "train.py"),
                         None, False, None),
        "cmd-srun-exe": (cmd("srun", "-N1", "--ntasks-per-node=2", "./run.sh", "a"), None, False, None),
    }


# What runner.py's direct_argv/launcher_argv/command_argv and rank_env gave for these cases
# before the move (the run's own DSBISECT_*/TORCH_* variables left out: RUN_ENV below).
BEFORE = [
    ('ds-cpu', '/T/venv/bin/python -u -m deepspeed.launcher.runner --num_gpus 2 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py',
     ''),
    ('ds-devices', '/T/venv/bin/python -u -m deepspeed.launcher.runner --include localhost:6,7 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py',
     ''),
    ('ds-args', '/T/venv/bin/python -u -m deepspeed.launcher.runner --num_gpus 2 --master_port 29500 --enable_each_rank_log=/T/run/ranks --bind_cores_to_rank /T/train.py --steps 3',
     ''),
    ('ds-hostfile', '/T/venv/bin/python -u -m deepspeed.launcher.runner --hostfile /T/hosts --num_nodes 2 --launcher openmpi --master_addr 10.0.0.1 --num_gpus 2 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py',
     ''),
    ('ds-include', '/T/venv/bin/python -u -m deepspeed.launcher.runner --hostfile /T/hosts --include n1@n2:0 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py',
     ''),
    ('tr', '/T/venv/bin/python -u -m torch.distributed.run --nproc_per_node 2 --master_port 29500 --log-dir /T/run/ranks --tee 3 --max-restarts 0 /T/train.py',
     ''),
    ('tr-devices', '/T/venv/bin/python -u -m torch.distributed.run --nproc_per_node 2 --master_port 29500 --log-dir /T/run/ranks --tee 3 /T/train.py',
     ''),
    ('direct-ds', '/bin/sh -c \'exec "$@" >>"$0" 2>&1\' /T/run/ranks/rank0.log /T/venv/bin/python -u /T/train.py --local_rank=0 --steps 3',
     'RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 CROSS_RANK=0 CROSS_SIZE=1 LOCAL_SIZE=1'),
    ('direct-line', '/bin/sh -c \'exec "$@" >>"$0" 2>&1\' /T/run/ranks/rank0.log /T/venv/bin/python -u /T/train.py --steps 3',
     'RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 CROSS_RANK=0 CROSS_SIZE=1 LOCAL_SIZE=1'),
    ('direct-ds-cuda', '/bin/sh -c \'exec "$@" >>"$0" 2>&1\' /T/run/ranks/rank0.log /T/venv/bin/python -u /T/train.py --local_rank=0 --steps 3',
     'RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 CROSS_RANK=0 CROSS_SIZE=1 LOCAL_SIZE=1 CUDA_VISIBLE_DEVICES=3'),
    ('direct-tr-cuda', '/bin/sh -c \'exec "$@" >>"$0" 2>&1\' /T/run/ranks/rank0.log /T/venv/bin/python -u /T/train.py --steps 3',
     'RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 GROUP_WORLD_SIZE=1 ROLE_RANK=0 ROLE_WORLD_SIZE=1 ROLE_NAME=default TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=none CUDA_VISIBLE_DEVICES=5'),
    ('direct-off', '/T/venv/bin/python -u -m deepspeed.launcher.runner --num_gpus 1 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py --steps 3',
     'DSBISECT_DIRECT=0'),
    ('cmd-ds', '/T/venv/bin/python -u -m deepspeed.launcher.runner --num_gpus 2 --master_port 29500 --enable_each_rank_log /T/run/ranks train.py --x',
     ''),
    ('cmd-ds-port', '/T/venv/bin/python -u -m deepspeed.launcher.runner --master_port 1234 --enable_each_rank_log=mine train.py',
     ''),
    ('cmd-tr', '/T/venv/bin/python -u -m torch.distributed.run --nproc-per-node 2 --master-port 29500 --log-dir /T/run/ranks --tee 3 train.py',
     ''),
    ('cmd-tr-own-logs', '/T/venv/bin/python -u -m torch.distributed.run --log-dir mine --tee 1 --master_port=9 train.py',
     ''),
    ('cmd-launch', '/T/venv/bin/python -u -m torch.distributed.launch --nproc_per_node 2 --master-port 29500 --log-dir /T/run/ranks --tee 3 train.py',
     ''),
    ('cmd-exe', './run.sh a b',
     ''),
    ('cmd-script', '/T/venv/bin/python -u -m deepspeed.launcher.runner --num_gpus 2 --master_port 29500 --enable_each_rank_log=/T/run/ranks /T/train.py --y',
     ''),
]

SRUN_RANK = shlex.quote(launchers.SRUN_RANK)
NEW = [
    # launcher: direct with 2 ranks: dsbisect's own starter; RANK, LOCAL_RANK, ROLE_RANK are set per rank by it
    ("direct-2", f"/T/venv/bin/python -I -S {launchers.RANKS_SCRIPT} 2 /T/run/ranks -- /T/venv/bin/python -u /T/train.py "
                 "--steps 3",
     "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1 "
     "ROLE_WORLD_SIZE=2 ROLE_NAME=default TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 "
     "TORCHELASTIC_RUN_ID=none"),
    ("direct-2-devices", f"/T/venv/bin/python -I -S {launchers.RANKS_SCRIPT} 2 /T/run/ranks -- /T/venv/bin/python -u "
                         "/T/train.py",
     "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1 "
     "ROLE_WORLD_SIZE=2 ROLE_NAME=default TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 "
     "TORCHELASTIC_RUN_ID=none CUDA_VISIBLE_DEVICES=2,3"),
    # accelerate on CPU: --multi_gpu, or accelerate starts one process (issue 23); its ranks' logs through the hook
    ("cmd-acc", "/T/venv/bin/python -u -m accelerate.commands.launch --num_processes 2 --main_process_port 29500 "
                "--multi_gpu train.py --lr 1", "DSBISECT_RANK_LOG=1"),
    ("srun-script", f"srun --ntasks=2 --output=/T/run/ranks/rank%t.log --kill-on-bad-exit=1 /bin/sh -c {SRUN_RANK} "
                    "dsbisect-rank /T/venv/bin/python -u /T/train.py --steps 3", "MASTER_PORT=29500"),
    ("srun-args", f"srun -n3 --kill-on-bad-exit=0 --output=/T/run/ranks/rank%t.log /bin/sh -c {SRUN_RANK} "
                  "dsbisect-rank /T/venv/bin/python -u /T/train.py", "MASTER_PORT=29500"),
    ("cmd-srun", f"srun --ntasks 2 --output=/T/run/ranks/rank%t.log --kill-on-bad-exit=1 /bin/sh -c {SRUN_RANK} "
                 "dsbisect-rank /T/venv/bin/python -u train.py --x", "MASTER_PORT=29500"),
    ("cmd-srun-own", f"srun -n 2 -o mine-%t.log -K /bin/sh -c {SRUN_RANK} "
                     "dsbisect-rank /T/venv/bin/python -u -X dev train.py", "MASTER_PORT=29500"),
    ("cmd-srun-exe", f"srun -N1 --ntasks-per-node=2 --output=/T/run/ranks/rank%t.log --kill-on-bad-exit=1 /bin/sh -c "
                     f"{SRUN_RANK} dsbisect-rank ./run.sh a", "MASTER_PORT=29500"),
]

RUN_ENV = ("DSBISECT_RUN_DIR=/T/run DSBISECT_METRICS=/T/run/metrics.jsonl DSBISECT_COLLECTIVE_TIMEOUT=60 "
           "DSBISECT_CASE={case} TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
           "TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/T/run/nccl_trace_rank_ "
           "TORCH_FR_DUMP_TEMP_FILE=/T/run/nccl_trace_rank_")


def _target(folder: Path, devices: tuple[int, ...] | None = None) -> Target:
    return Target(folder / "venv" / "bin" / "python", RunDir(folder / "run"), 29500, devices)


def _plan(tmp_path: Path, name: str):
    case, devices, cuda, visible = _cases(tmp_path)[name]
    return case, plan(case, _target(tmp_path, devices), cuda, visible)


def _shown(tmp_path: Path, words) -> str:
    return shlex.join(str(w).replace(str(tmp_path), "/T") for w in words)


@pytest.mark.parametrize(("name", "argv", "env"), BEFORE + NEW, ids=[n for n, *_ in BEFORE + NEW])
def test_argv_and_rank_env_per_kind(tmp_path, name, argv, env):
    case, p = _plan(tmp_path, name)
    assert _shown(tmp_path, p.argv) == argv
    run_env = RUN_ENV.format(case=case.name).split()
    assert [f"{k}={v}".replace(str(tmp_path), "/T") for k, v in p.env.items()] == run_env + env.split()


@pytest.mark.parametrize(("name", "kind"), [
    ("ds-cpu", "deepspeed"), ("tr", "torchrun"), ("direct-ds", "direct"), ("direct-off", "deepspeed"),
    ("direct-2", "direct"),
    ("cmd-ds", "deepspeed"), ("cmd-launch", "torchrun"), ("cmd-acc", "accelerate"), ("cmd-exe", "executable"),
    ("cmd-script", "deepspeed"), ("srun-script", "srun"), ("cmd-srun", "srun"), ("cmd-srun-exe", "srun"),
])
def test_line_for_picks_the_kind(tmp_path, name, kind):
    case = _cases(tmp_path)[name][0]
    assert line_for(case).kind == kind and LINES[kind] is line_for(case)


@pytest.mark.parametrize("name", [n for n, *_ in BEFORE + NEW])
def test_instructions_run_what_the_runner_runs(tmp_path, name):
    """The manual instructions' command is the runner's plan: same argv, same variables (after
    the accelerator's), from the same folder, the ranks' log folder made first."""
    case, devices, cuda, _ = _cases(tmp_path)[name]
    t = _target(tmp_path, devices)
    accel = Accelerator.CUDA if cuda else Accelerator.CPU
    lines = instructions(case, Point(versions=(("deepspeed", "0.12.4"),)), tmp_path / "venv", accel, t)
    words = shlex.split(lines[-1].removeprefix("  run       "))
    assert words[:3] == ["mkdir", "-p", str(t.run.ranks)] and words[3:6] == ["&&", "cd", str(case.cwd or t.run.path)]
    assert words[6:8] == ["&&", "env"]
    p = plan(case, t, cuda)
    env = launchers.accelerator_env(case, accel) | dict(p.env)
    assert words[8:8 + len(env)] == [f"{k}={v}" for k, v in env.items()]
    assert tuple(words[8 + len(env):]) == p.argv
    assert lines[3] == f"  logs      {t.run.path}"


def test_instructions_mask_secrets(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    case = matrix.command_case(["deepspeed", "train.py", "--hf_token", "hf_abcdefghijklmnopqrstuvwxyz"], tmp_path)
    case = replace(case, env=(("WANDB_API_KEY", "s3cr3t-value-xyz"),))
    text = "\n".join(instructions(case, Point(versions=()), tmp_path / "v", Accelerator.CPU, _target(tmp_path)))
    assert "s3cr3t-value-xyz" not in text and "hf_abcdefghijklmnopqrstuvwxyz" not in text


# ------------------------------------------------------------------- rank logs


def test_each_line_names_its_rank_logs_as_the_run_folder_reads_them(tmp_path):
    run = RunDir(tmp_path / "run")
    assert LINES["direct"].rank_logs is RankLogs.DIRECT and rank_of_log(run.rank_log(0)) == 0
    srun = _plan(tmp_path, "cmd-srun")[1].argv
    output = next(a for a in srun if a.startswith("--output=")).removeprefix("--output=")
    assert LINES["srun"].rank_logs is RankLogs.DIRECT and rank_of_log(Path(output.replace("%t", "1"))) == 1
    assert LINES["deepspeed"].rank_logs is RankLogs.DEEPSPEED and rank_of_log(run.ranks / "20260101_rank2.log") == 2
    assert LINES["torchrun"].rank_logs is RankLogs.TORCHRUN
    assert rank_of_log(run.ranks / "x" / "attempt_0" / "1" / "stdout.log") == 1
    assert LINES["executable"].rank_logs is RankLogs.NONE
    assert LINES["accelerate"].rank_logs is RankLogs.DIRECT  # the start-up hook's ranks/rank<R>.log


# ------------------------------------------------------------------ srun lines


@pytest.mark.parametrize(("line", "nproc", "nnodes", "script"), [
    ("srun --ntasks 2 python train.py --x", 2, 1, "train.py"),
    ("srun -n2 python -u train.py", 2, 1, "train.py"),
    ("srun --ntasks=4 --nodes 2 python train.py", 2, 2, "train.py"),
    ("srun --ntasks-per-node 3 -N 2 python train.py", 3, 2, "train.py"),
    ("srun --ntasks 3 -N 2 python train.py", None, 2, "train.py"),  # uneven: no ranks per node
    ("srun -N 1-3 -n 2 python train.py", None, None, "train.py"),  # a range of nodes
    ("srun python train.py", 1, 1, "train.py"),
    ("srun --ntasks-per-n 2 --kill-on python train.py", 2, 1, "train.py"),  # getopt's unique prefixes
    ("srun -n 2 --kill-on-bad-exit 1 python train.py", 2, 1, None),  # -K's value is inline only: 1 is the program
    ("srun -K1 --exclusive=user -n 2 ./run.sh", 2, 1, None),
    ("srun --mpi=pmix -l -n 2 -- python train.py", 2, 1, "train.py"),
])
def test_srun_lines_are_read_as_srun_reads_them(tmp_path, line, nproc, nnodes, script):
    _cases(tmp_path)
    cmd = parse(shlex.split(line), tmp_path)
    assert (cmd.kind, cmd.nproc, cmd.nnodes) == (CommandKind.SRUN, nproc, nnodes)
    assert (cmd.script.name if cmd.script else None) == script


@pytest.mark.parametrize(("line", "error"), [
    ("srun --ntasks two python train.py", "srun: --ntasks needs an integer"),
    ("srun -n", "srun: -n needs a value"),
    ("srun --nodes x python train.py", "srun: --nodes needs N or MIN-MAX"),
    ("srun -n 2", "srun: no script after its options"),
    ("srun -n 2 python missing.py", "srun: python: script .*missing.py does not exist"),
    ("srun -n 2 ./nothere.sh", "srun: ./nothere.sh: no such file"),
    ("srun --nta 2 python train.py", "srun: unknown option --nta"),  # a prefix of several: getopt refuses it too
    ("srun -n 2 --label=yes python train.py", "srun: --label takes no value"),
])
def test_bad_srun_lines_are_one_error(tmp_path, line, error):
    _cases(tmp_path)
    with pytest.raises(InputError, match=error):
        parse(shlex.split(line), tmp_path)


def test_srun_options_added_are_inline_and_the_users_kept(tmp_path):
    _cases(tmp_path)
    cmd = parse(shlex.split("srun -o mine.log -K0 -n 2 python train.py"), tmp_path)
    assert with_options(cmd, {"--output": "x", "--kill-on-bad-exit": "1", "--ntasks": "9", "--label": None},
                        inline=True) == ("-o", "mine.log", "-K0", "-n", "2", "--label")
    assert options_of(CommandKind.SRUN, ["-n3", "--gres=gpu:2"]).option("--ntasks") == "3"
    with pytest.raises(InputError, match="not an option"):
        options_of(CommandKind.SRUN, ["-n3", "train.py"])


def test_a_matrix_case_takes_launcher_srun_and_checks_its_options(tmp_path):
    (tmp_path / "t.py").write_text("pass\n")
    (tmp_path / "m.yaml").write_text("axes: {deepspeed: ['0.1']}\ncases:\n  c:\n    script: t.py\n"
                                     "    launcher: srun\n    launcher_args: ['--gres=gpu:1']\n")
    case = matrix.load(tmp_path / "m.yaml").cases[0]
    assert case.launcher is Launcher.SRUN and line_for(case).kind == "srun"
    (tmp_path / "m.yaml").write_text("axes: {deepspeed: ['0.1']}\ncases:\n  c:\n    script: t.py\n"
                                     "    launcher: srun\n    launcher_args: ['--ntasks', 'two']\n")
    with pytest.raises(MatrixError, match="cases.c.launcher_args: srun: --ntasks needs an integer"):
        matrix.load(tmp_path / "m.yaml")


# -------------------------------------------------------------------- hostfiles


@pytest.mark.parametrize(("text", "hosts"), [
    ("n1 slots=2\nn2 slots=4\n", {"n1": 2, "n2": 4}),
    ("# the nodes\n\n   \nn1 slots=2\n  # n3 slots=8\nn2 slots=1\n", {"n1": 2, "n2": 1}),  # comment lines, blanks
    ("n1 slots=2 # spare GPUs are not used\n", {"n1": 2}),  # what follows slots=N is not read
    ("n1 slots=2#x\n", {"n1": 2}),
    ("n1#rack slots=2\n", {"n1#rack": 2}),  # a # inside the host name is part of it (as in DeepSpeed)
    ("\tn1\tslots=3\n", {"n1": 3}),
])
def test_one_hostfile_parser(text, hosts):
    assert parse_hostfile(text, "hf") == hosts


@pytest.mark.parametrize(("text", "error"), [
    ("n1\n", "hf: bad line 'n1' (expected 'HOST slots=N')"),  # multinode used to take it as host n1
    ("n1 slots = 2\n", "bad line"),
    ("n1 slots=two\n", "bad line"),
    ("n1 slots=2\nn1 slots=4\n", "hf: host n1 is named twice"),
    ("# nothing\n\n", "hf names no host"),
])
def test_bad_hostfiles_are_one_error(text, error):
    with pytest.raises(InputError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_hostfile(text, "hf")


def test_a_matrix_hostfile_is_read_when_the_case_is_made(tmp_path):
    (tmp_path / "t.py").write_text("pass\n")
    (tmp_path / "hosts").write_text("n1\n")
    s = matrix.script_case(tmp_path / "t.py", 2)
    with pytest.raises(MatrixError, match=r"where: hostfile .*hosts: bad line 'n1'"):
        matrix.with_nodes(s, "where", hostfile=tmp_path / "hosts")


@pytest.mark.parametrize("name", ["cmd-ds", "cmd-tr", "cmd-acc", "cmd-exe", "cmd-srun", "ds-cpu", "srun-script"])
def test_a_case_crosses_json_with_its_parsed_command(tmp_path, name):
    """A Slurm job gets its case as JSON: the command line is parsed again there, to the same Command."""
    case = _cases(tmp_path)[name][0]
    again = Case.from_json(case.to_json())
    assert again == case and again.key == case.key
    assert again.command is None or again.command.argv == case.command.argv


# ------------------------------------------------------- the ranks a line starts


def _acc(folder: Path, line: str, config: str | None = None) -> Case:
    (folder / "train.py").write_text("pass\n")
    if config is not None:
        (folder / "acc.yaml").write_text(config)
    return matrix.command_case(shlex.split(line), folder)


@pytest.mark.parametrize(("line", "config", "cuda", "count", "added"), [
    ("accelerate launch --num_processes 2 train.py", None, False, 2, True),  # issue 23: one process without it
    ("accelerate launch --num-processes=3 train.py", None, False, 3, True),  # accelerate's other spelling
    ("python -m accelerate.commands.launch --num_processes 2 train.py", None, False, 2, True),
    ("accelerate launch --num_processes 2 train.py", None, True, 2, False),  # it sees the GPUs and picks multi-GPU
    ("accelerate launch --multi_gpu --num_processes 2 train.py", None, False, 2, False),
    ("accelerate launch --use_deepspeed --num_processes 4 --num_machines 2 train.py", None, False, 2, False),  # per node
    ("accelerate launch --num_processes 1 train.py", None, False, 1, False),  # --multi_gpu refuses 1
    ("accelerate launch train.py", None, False, 1, False),  # on CPU it counts 0 GPUs: one process
    ("accelerate launch train.py", None, True, None, False),  # one per GPU it sees
    ("accelerate launch --cpu train.py", None, False, 1, False),
    ("accelerate launch --cpu --num_processes 2 --mpirun_hostfile h train.py", None, False, 2, False),
    ("accelerate launch --tpu --num_processes 8 train.py", None, False, None, False),
    ("accelerate launch --config_file acc.yaml train.py", "distributed_type: MULTI_GPU\nnum_processes: 2\n",
     False, 2, False),
    ("accelerate launch --config_file acc.yaml train.py", "distributed_type: DEEPSPEED\nnum_processes: 2\n",
     False, 2, False),
    ("accelerate launch --config_file acc.yaml train.py", "distributed_type: MULTI_CPU\nnum_processes: 2\n",
     False, 2, True),
    ("accelerate launch --config_file acc.yaml train.py", "distributed_type: 'NO'\nnum_processes: 2\n",
     True, 1, False),  # the config's single process, as on the user's machine
])
def test_accelerate_lines_start_what_they_ask_for(tmp_path, line, config, cuda, count, added):
    case = _acc(tmp_path, line, config)
    ranks = line_for(case).ranks(case, cuda)
    assert (ranks.count, bool(ranks.added)) == (count, added)
    argv = plan(case, _target(tmp_path), cuda).argv
    assert argv.count("--multi_gpu") == (1 if added or "--multi_gpu" in line else 0)
    if added:
        assert ranks.describe() == f"{count} ranks" and "--multi_gpu" in ranks.added
        assert argv[argv.index("--multi_gpu") + 1] == "train.py"  # an option of accelerate's, not the script's


@pytest.mark.parametrize(("line", "config"), [
    ("accelerate launch --cpu --num_processes 2 train.py", None),
    ("accelerate launch --cpu --config_file acc.yaml train.py", "num_processes: 4\n"),
])
def test_accelerate_cpu_with_several_processes_is_refused(tmp_path, line, config):
    """accelerate's --cpu runs the script once in every release: the line cannot do what it says."""
    with pytest.raises(InputError, match=r"^command: accelerate launch: --cpu starts one process, not the \d"):
        _acc(tmp_path, line, config)


@pytest.mark.parametrize(("name", "cuda", "shown"), [
    ("ds-cpu", False, "2 ranks"), ("tr", False, "2 ranks"), ("direct-ds", False, "1 rank"), ("direct-2", False, "2 ranks"),
    ("ds-hostfile", False, "2 ranks per node"), ("cmd-ds", False, "2 ranks"), ("cmd-tr", False, "2 ranks"),
    ("cmd-launch", False, "2 ranks"), ("cmd-srun", False, "2 ranks"), ("cmd-script", False, "2 ranks"),
    ("cmd-acc", False, "2 ranks"), ("cmd-acc", True, "2 ranks"),
    ("cmd-exe", False, "ranks: unknown (an executable starts its own)"),  # issue 23: it said "2 ranks"
])
def test_each_line_says_the_ranks_it_starts(tmp_path, name, cuda, shown):
    case = _cases(tmp_path)[name][0]
    assert line_for(case).ranks(case, cuda).describe() == shown


def test_a_line_known_to_start_fewer_says_so_before_it_runs(tmp_path):
    case = _acc(tmp_path, "accelerate launch --config_file acc.yaml train.py", "distributed_type: 'NO'\nnum_processes: 2\n")
    ranks = line_for(case).ranks(case, True)
    assert ranks.said() == ("warning: the line asks for 2 processes; with its config's distributed_type NO "
                            "accelerate launch starts one")
    assert line_for(case).ranks(case, False).said().startswith("--multi_gpu added")  # on CPU it is added
    one = _acc(tmp_path, "accelerate launch --config_file acc.yaml train.py", "distributed_type: 'NO'\n")
    assert line_for(one).ranks(one, True).said() == ""


def test_a_launcher_that_counts_devices_itself_has_no_known_count(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    for line, who in (("torchrun --nproc-per-node auto train.py", "torchrun"), ("deepspeed train.py", "deepspeed")):
        case = matrix.command_case(shlex.split(line), tmp_path)
        assert line_for(case).ranks(case, False).describe() == f"ranks: unknown ({who} counts this machine's devices)"


def test_a_shortfall_is_said_from_the_ranks_that_started():
    two = launchers.Ranks(2)
    assert two.shortfall({0, 1}) == "" and two.shortfall({0, 1, 2}) == ""
    assert two.shortfall({0}) == ("the line asks for 2 ranks; the point venv's Python ran as 1 of them (rank 0): "
                                  "the run tested fewer ranks than asked")
    assert "ran as none of them" in two.shortfall(set())
    assert launchers.Ranks(1).shortfall(set()) == ""  # one rank: nothing to miss
    assert launchers.Ranks(None, "x").shortfall(set()) == ""  # an executable's: unknown
    assert launchers.Ranks(2, per_node=True).shortfall({0}) == ""  # the other nodes' ranks leave no trace here


def test_accelerate_lines_with_their_own_logs_keep_them(tmp_path):
    for line in ("accelerate launch --num_processes 2 --log_dir mine --tee 3 train.py",
                 "accelerate launch -t 3 --num_processes 2 train.py"):
        case = _acc(tmp_path, line)
        assert "DSBISECT_RANK_LOG" not in plan(case, _target(tmp_path)).env


def test_the_hook_sends_a_ranks_output_to_its_log(tmp_path):
    """DSBISECT_RANK_LOG=1 in a rank: stdout and stderr (its children's too) into ranks/rank<R>.log;
    a process without RANK (the launcher) and a child of the rank leave theirs as they were."""
    import subprocess
    import sys

    hook = Path(launchers.__file__).parents[1] / "_hook"
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    code = ("import dsbisect_hook, os, subprocess, sys; print('out'); print('err', file=sys.stderr); "
            "subprocess.run([sys.executable, '-c', 'import dsbisect_hook, os; print(\"child\", "
            "os.environ[\"DSBISECT_RANK_LOG\"])'])")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(hook), "DSBISECT_RUN_DIR": str(run.path),
           "DSBISECT_RANK_LOG": "1", "DSBISECT_FR_PROBE": "0", "DSBISECT_PDEATHSIG": "0", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env | {"RANK": "1"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert run.rank_log(1).read_text().split() == ["out", "err", "child", "0"]
    assert run.ranks_started() == {1}
    done = subprocess.run([sys.executable, "-c", "import dsbisect_hook; print('launcher')"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == "launcher\n" and not run.rank_log(0).exists()


# ------------------------------------------------- real accelerate launch on CPU

ZOO_WHEELS = Path(__file__).resolve().parents[1] / "data" / "zoo-wheels"
_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "UV_INDEX_URL",
              "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_NO_INDEX", "UV_CONFIG_FILE",
              "DSBISECT_INDEX_URL", "DSBISECT_STORE")
ACCELERATE_SCRIPT = """\
from accelerate import PartialState
state = PartialState()
print(f"process {state.process_index} of {state.num_processes}: {state.distributed_type}", flush=True)
state.wait_for_everyone()
"""
# A torchrun rank that never runs the point venv's Python (rank 1): the run tests one rank of two.
HALF = """\
#!/bin/sh
[ "$RANK" = 0 ] && exec python -c "print('rank 0 ran')"
echo "rank $RANK: no python"
"""


def _zoo_run(cli, cache_dir, folder: Path, *line: str):
    from conftest import offline

    res = cli("run", "--format", "json", "--versions", "accelerate=0.28.0", "--accelerator", "cpu",
              "--store", str(folder / "store"), *offline(ZOO_WHEELS, cache_dir), "--", *line, cwd=folder)
    assert res.exit_code == 0, res.output
    import json

    (run,) = json.loads(res.stdout)["runs"]
    return run, res


@pytest.mark.slow
@pytest.mark.skipif(not ZOO_WHEELS.is_dir(), reason="the zoo's accelerate wheels")
def test_accelerate_launch_on_cpu_starts_every_rank_with_its_log(cli, cache_dir, tmp_path, monkeypatch):
    """Issue 23: `accelerate launch --num_processes 2` on CPU ran one process while dsbisect said
    "2 ranks", and its output was all in launcher.log. Real accelerate 0.28.0, real ranks."""
    for name in _INDEX_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    (tmp_path / "train.py").write_text(ACCELERATE_SCRIPT)
    run, res = _zoo_run(cli, cache_dir, tmp_path, "accelerate", "launch", "--num_processes", "2", "train.py")
    assert run["outcome"] == "pass", run["reason"]
    folder = Path(run["run_dir"])
    logs = {p.name: p.read_text() for p in (folder / "ranks").glob("*.log")}
    assert sorted(logs) == ["rank0.log", "rank1.log"], logs
    assert "process 0 of 2: DistributedType.MULTI_CPU" in logs["rank0.log"]
    assert "process 1 of 2: DistributedType.MULTI_CPU" in logs["rank1.log"]
    assert "process 0 of 2" not in (folder / "launcher.log").read_text()  # the ranks' output is in their logs
    first = (folder / "launcher.log").read_text().splitlines()[0]
    assert first.startswith("dsbisect: 2 ranks, --multi_gpu added: on CPU accelerate launch starts one process")
    assert " --num_processes 2 --main_process_port " in first and first.endswith(" --multi_gpu train.py")
    assert "running (run 1, 2 ranks, cpu; --multi_gpu added: on CPU accelerate launch starts one process without it)" \
        in res.stderr
    assert "warning" not in res.stderr

    (tmp_path / "half.sh").write_text(HALF)
    (tmp_path / "half.sh").chmod(0o755)
    run, res = _zoo_run(cli, cache_dir, tmp_path, "torchrun", "--nproc-per-node", "2", "--no-python", "./half.sh")
    assert run["outcome"] == "pass", run["reason"]
    said = ("warning: the line asks for 2 ranks; the point venv's Python ran as 1 of them (rank 0): the run tested "
            "fewer ranks than asked")
    assert said in res.stderr
    assert said in " ".join(run["evidence"].get("notes") or []), run["evidence"]


def test_a_refused_accelerate_line_is_one_line_exit_2_and_creates_nothing(cli, tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    res = cli("run", "--versions", "accelerate=0.28.0", "--", "accelerate", "launch", "--cpu", "--num_processes", "2",
              "train.py", cwd=tmp_path)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--cpu starts one process, not the 2 of --num_processes" in lines[0], res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]
