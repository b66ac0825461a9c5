"""One home per launcher: how a case's ranks are started, and how their launcher reports back.

A ``LaunchLine`` is one kind of launch line — ``deepspeed``, ``torchrun``, ``accelerate``,
``srun``, ``direct`` (the script's ranks started by dsbisect, no launcher) or ``executable`` (the
user's program, run as it is).  Each owns:

- ``argv``: the command line dsbisect runs, with the point venv's python and only what
  dsbisect needs added (a free master port, per-rank logs in the run folder), never what the
  user gave taken away;
- ``rank_env``: the variables the ranks get from dsbisect rather than from a launcher;
- ``rank_logs``: where the ranks' own logs go (``rundir.RankLogs``: the run folder's one naming);
- ``ranks``: how many ranks the line will really start (``Ranks``: None for an executable, whose
  count dsbisect cannot know), and what dsbisect added so that it starts those it asks for;
- the manual instructions (``instructions``), made from the same ``plan`` that the runner runs.

The lines a launcher prints when a rank fails (deepspeed's "exits with return code", torch
elastic's root cause, srun's "task R: Exited with exit code N") are read by
``outcome.first_rank_exit``, below this module: ``outcome`` importing it would lift ``launch``
and everything over it by a floor.

``line_for(case)`` picks the line: a command line's kind, else the direct run for one rank or
``launcher: direct``, else the case's ``launcher``.  A new launcher is one class here (and its grammar in ``command``).

Pure but for ``Case`` and ``RunDir`` paths: nothing here starts a process or reads a file.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from dsbisect.core.command import PYTHON, Command, CommandKind, options_of, with_options
from dsbisect.core.model import Accelerator, Case, Launcher, Nodes, Point
from dsbisect.core.redact import redact
from dsbisect.core.rundir import RankLogs, RunDir, flight_recorder_env


@dataclass(frozen=True)
class Target:
    """Where a line runs: the point venv's python, the run folder, a master port, the slot's GPUs."""

    python: Path
    run: RunDir
    port: int
    devices: tuple[int, ...] | None = None
    cuda: bool = False  # the ranks run on GPUs (set by ``plan``)


@dataclass(frozen=True)
class Ranks:
    """How many ranks a line starts: ``count`` in all (None: dsbisect cannot know, ``unknown``
    says why), ``per_node`` when the count is per node of several; ``added``: the option dsbisect
    adds so that the line starts them, and why; ``fewer``: why the line starts fewer than it
    asks for, known before it runs."""

    count: int | None
    unknown: str = ""
    per_node: bool = False
    added: str = ""
    fewer: str = ""

    def said(self) -> str:
        """What dsbisect adds, or warns of, before the run ("" when neither)."""
        return self.added or (f"warning: {self.fewer}" if self.fewer else "")

    def describe(self) -> str:
        """'2 ranks', '1 rank', '4 ranks per node', 'ranks: unknown (…)'."""
        if self.count is None:
            return f"ranks: unknown ({self.unknown})" if self.unknown else "ranks: unknown"
        return f"{self.count} rank{'' if self.count == 1 else 's'}" + (" per node" if self.per_node else "")

    def shortfall(self, started: set[int]) -> str:
        """The warning when a run started fewer ranks than the line asked for ("" when it did
        not, or when the count is unknown or per node of several: ranks elsewhere leave no trace here)."""
        if self.count is None or self.per_node or self.count < 2 or len(started) >= self.count:
            return ""
        seen = (f"the point venv's Python ran as {len(started)} of them (rank {', '.join(map(str, sorted(started)))})"
                if started else "the point venv's Python ran as none of them (no process had RANK set)")
        return f"the line asks for {self.count} ranks; {seen}: the run tested fewer ranks than asked"


def _counted(nproc: int | None, nnodes: int | None, why: str) -> Ranks:
    """nproc per node on nnodes nodes (None: not known from the line); per node on several."""
    if nproc is None or nnodes is None:
        return Ranks(None, why)
    return Ranks(nproc, per_node=True) if nnodes > 1 else Ranks(nproc)


@dataclass(frozen=True)
class Plan:
    """What is started: the command line, the variables the ranks get from dsbisect, from where."""

    line: LaunchLine
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path


class LaunchLine:
    """One kind of launch line (the subclasses are the kinds)."""

    kind: ClassVar[str]
    rank_logs: ClassVar[RankLogs]
    folds_check: ClassVar[bool] = True  # the import check is made by the run's first interpreter
    direct: ClassVar[bool] = False  # dsbisect itself starts the ranks

    def argv(self, case: Case, t: Target) -> list[str]:
        raise NotImplementedError

    def rank_env(self, case: Case, t: Target, cuda: bool, visible: str | None) -> dict[str, str]:
        """What the ranks get from dsbisect (a launcher gives them the rest)."""
        return {}

    def ranks(self, case: Case, cuda: bool) -> Ranks:
        """The ranks the line starts: a command line's own count, else the case's ``nproc`` (per node)."""
        if case.command:
            return _counted(case.command.nproc, case.command.nnodes, f"{self.kind} counts this machine's devices")
        return Ranks(case.nproc, per_node=case.nodes.multi)


# ------------------------------------------------------------------ deepspeed


class DeepSpeed(LaunchLine):
    kind = "deepspeed"
    module = "deepspeed.launcher.runner"
    rank_logs = RankLogs.DEEPSPEED

    def argv(self, case: Case, t: Target) -> list[str]:
        head = [str(t.python), "-u", "-m", self.module]
        if case.command:
            cmd = case.command
            add = {"--master_port": str(t.port), "--enable_each_rank_log": str(t.run.ranks)}
            return head + [*with_options(cmd, add), cmd.target, *cmd.script_args]
        argv = head + nodes_args(case.nodes)
        if case.nodes.include or case.nodes.exclude:
            pass  # the case picks hosts and slots itself (the launcher refuses --num_gpus with them)
        elif t.devices:
            argv += ["--include", "localhost:" + ",".join(str(d) for d in t.devices)]
        else:
            argv += ["--num_gpus", str(case.nproc)]  # per node, with a hostfile
        argv += ["--master_port", str(t.port), f"--enable_each_rank_log={t.run.ranks}"]
        return argv + list(case.launcher_args) + [str(case.script), *case.args]

def nodes_args(n: Nodes) -> list[str]:
    """The deepspeed launcher's multi-node options of a case, as given."""
    args: list[str] = []
    for flag, value in (("--hostfile", n.hostfile), ("--include", n.include), ("--exclude", n.exclude),
                        ("--num_nodes", n.num_nodes), ("--launcher", n.backend.value if n.backend else None),
                        ("--master_addr", n.master_addr)):
        if value is not None:
            args += [flag, str(value)]
    return args


def nodes_problem(n: Nodes, launcher: Launcher) -> str:
    """Why multi-node settings cannot be run as given ("" when they can): only the deepspeed
    launcher reads a hostfile, and it refuses some combinations."""
    uses_hostfile = n.num_nodes is not None or n.backend or n.master_addr
    if (uses_hostfile or n.hostfile or n.include or n.exclude) and launcher is not Launcher.DEEPSPEED:
        return "hostfile, include, exclude, num_nodes, launcher_backend and master_addr need launcher: deepspeed"
    if uses_hostfile and n.hostfile is None:
        return "num_nodes, launcher_backend and master_addr need a hostfile"
    if n.include and n.exclude:
        return "give include or exclude, not both"
    if n.num_nodes is not None and (n.include or n.exclude):
        return "num_nodes cannot be combined with include/exclude (the deepspeed launcher refuses it)"
    return ""


# ------------------------------------------------------------ torchrun, accelerate


class Torchrun(LaunchLine):
    kind = "torchrun"
    module = "torch.distributed.run"
    rank_logs = RankLogs.TORCHRUN

    def argv(self, case: Case, t: Target) -> list[str]:
        if case.command:
            cmd = case.command
            module = "torch.distributed.launch" if "torch.distributed.launch" in cmd.prefix else self.module
            add = {"--master-port": str(t.port), "--log-dir": str(t.run.ranks), "--tee": "3"}
            return [str(t.python), "-u", "-m", module, *with_options(cmd, add), cmd.target, *cmd.script_args]
        return [str(t.python), "-u", "-m", self.module, "--nproc_per_node", str(case.nproc),
                "--master_port", str(t.port), "--log-dir", str(t.run.ranks), "--tee", "3",
                *case.launcher_args, str(case.script), *case.args]


class Accelerate(LaunchLine):
    """``accelerate launch`` (a command line only): it starts torch elastic (or the deepspeed
    launcher) itself.  On CPU it starts one process unless told how to start several, so where
    the line asks for more dsbisect adds ``--multi_gpu``, as accelerate does itself on a machine
    with several GPUs (``accelerate_ranks``).  Its ranks write to its own output; the start-up
    hook sends each rank's to ``ranks/rank<R>.log`` (``DSBISECT_RANK_LOG``) unless the line
    names logs of its own (``--log_dir``, ``--tee``)."""

    kind = "accelerate"
    module = "accelerate.commands.launch"
    rank_logs = RankLogs.DIRECT

    def argv(self, case: Case, t: Target) -> list[str]:
        cmd = case.command
        add: dict[str, str | None] = {"--main_process_port": str(t.port)}
        if accelerate_ranks(cmd, t.cuda).added:
            add[MULTI_GPU] = None
        return [str(t.python), "-u", "-m", self.module, *with_options(cmd, add), cmd.target, *cmd.script_args]

    def rank_env(self, case: Case, t: Target, cuda: bool, visible: str | None) -> dict[str, str]:
        own = any(case.command.has_option(o) for o in ("--log_dir", "--tee"))
        return {} if own else {"DSBISECT_RANK_LOG": "1"}

    def ranks(self, case: Case, cuda: bool) -> Ranks:
        return accelerate_ranks(case.command, cuda)


MULTI_GPU = "--multi_gpu"
# The flags that pick accelerate's launcher; the config's distributed_type values that start every process.
_ACCELERATE_MODES = ("--multi_gpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm")
_ACCELERATE_MANY = {"MULTI_GPU", "MULTI_NPU", "MULTI_XPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_HPU",
                    "MULTI_NEURON", "DEEPSPEED", "FSDP", "MEGATRON_LM"}
_ACCELERATE_ONE = {None, "NO", "MULTI_CPU"}  # its simple launcher: the script, once


def accelerate_ranks(cmd: Command, cuda: bool) -> Ranks:
    """The processes ``accelerate launch`` starts for ``cmd``, read as its ``launch_command``
    picks a launcher (the same in 0.22 … 1.14): ``--cpu`` or no mode runs the script once
    (``mpirun`` starts them with ``--mpirun_hostfile``); a mode flag or a config's multi-process
    ``distributed_type`` starts ``--num_processes``; with neither and no config file, it picks
    multi-GPU itself when it sees more than one GPU.  On CPU, where that never happens, a line
    that asks for 2 or more gets ``--multi_gpu`` added (``added``): its ranks find no GPU and
    run on gloo (accelerate's MULTI_CPU).  (``--cpu`` with several is refused when the line is
    parsed: it would start one.)"""
    asked = cmd.nproc * cmd.nnodes if cmd.nproc and cmd.nnodes else None
    many = _counted(cmd.nproc, cmd.nnodes, "as many processes as accelerate counts GPUs")
    if cmd.has_option("--mpirun_hostfile"):
        return many
    if cmd.has_option("--cpu"):
        return Ranks(1)
    if any(cmd.has_option(flag) for flag in _ACCELERATE_MODES) or cmd.distributed_type in _ACCELERATE_MANY:
        return many
    if cmd.has_option("--tpu") or cmd.distributed_type not in _ACCELERATE_ONE:
        return Ranks(None, f"accelerate's {cmd.distributed_type or 'TPU'} launcher")
    if cuda and cmd.has_option("--config_file"):  # its single process, as on the user's machine
        fewer = (f"the line asks for {asked} processes; with its config's distributed_type "
                 f"{cmd.distributed_type or '(none)'} accelerate launch starts one")
        return Ranks(1, fewer=fewer if asked and asked > 1 else "")
    if cuda:  # accelerate picks multi-GPU itself when it sees several GPUs
        return many
    if asked is None or asked < 2:
        return Ranks(1)
    return replace(many, added=f"{MULTI_GPU} added: on CPU accelerate launch starts one process without it")


# --------------------------------------------------------------------- srun


# Each task maps Slurm's task variables onto those torch's env:// rendezvous reads, then runs
# the rank; MASTER_ADDR is the step's first node unless the environment names one.
SRUN_RANK = ('export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
             'LOCAL_WORLD_SIZE="${SLURM_STEP_TASKS_PER_NODE%%[(,]*}" GROUP_RANK="$SLURM_NODEID" '
             'NODE_RANK="$SLURM_NODEID"; '
             '[ -n "$MASTER_ADDR" ] || MASTER_ADDR=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n 1); '
             'export MASTER_ADDR; exec "$@"')


class Srun(LaunchLine):
    """``srun --ntasks N python train.py …`` inside an allocation (or one srun makes): each task
    is a rank, its output in ``ranks/rank<R>.log``; srun stops the other tasks when one fails
    (``--kill-on-bad-exit``), as the other launchers do."""

    kind = "srun"
    rank_logs = RankLogs.DIRECT
    folds_check = False  # every task is a first interpreter: the check is made before the launch

    def argv(self, case: Case, t: Target) -> list[str]:
        add = {"--output": f"{t.run.ranks}/rank%t.log", "--kill-on-bad-exit": "1"}
        if case.command:
            cmd, program = case.command, _with_python((case.command.target, *case.command.script_args), t.python)
        else:  # a script case with launcher: srun (its ranks per node are the tasks, on one node)
            cmd, add = options_of(CommandKind.SRUN, case.launcher_args), {"--ntasks": str(case.nproc), **add}
            program = [str(t.python), "-u", str(case.script), *case.args]
        return ["srun", *with_options(cmd, add, inline=True), "/bin/sh", "-c", SRUN_RANK, "dsbisect-rank", *program]

    def rank_env(self, case: Case, t: Target, cuda: bool, visible: str | None) -> dict[str, str]:
        return {"MASTER_PORT": str(t.port)}



def _with_python(program: tuple[str, ...], python: Path) -> list[str]:
    """``python [opts] x.py …`` with the point venv's python (unbuffered, as the other lines run it)."""
    if PYTHON.fullmatch(Path(program[0]).name):
        return [str(python), "-u", *program[1:]]
    return list(program)


# --------------------------------------------------------- direct, executable


RANKS_SCRIPT = Path(__file__).parents[1] / "_hook" / "dsbisect_ranks.py"  # launcher: direct's own starter


class Direct(LaunchLine):
    """The script's ranks started by dsbisect itself, with the point venv's python and no
    launcher process: a 1-rank case (any launcher: the rank gets what that launcher would give
    it, deepspeed's ``--local_rank=0``, but a ``-- python x.py`` line runs as given) or ``launcher:
    direct`` (torchrun's variables).

    One rank: ``sh`` opens ``ranks/rank0.log`` and ``exec``s, so the rank is the process.
    Several: ``_hook/dsbisect_ranks.py`` (run with ``-S``: it imports nothing of the venv)
    starts them as torchrun's static rendezvous does, each with its ``ranks/rank<R>.log``,
    stops the others when one fails and says which one did, first."""

    kind = "direct"
    rank_logs = RankLogs.DIRECT
    direct = True

    def ranks(self, case: Case, cuda: bool) -> Ranks:
        return Ranks(case.nproc)

    def argv(self, case: Case, t: Target) -> list[str]:
        rank = [str(t.python), "-u", str(case.script)]
        if case.nproc > 1:
            return [str(t.python), "-I", "-S", str(RANKS_SCRIPT), str(case.nproc), str(t.run.ranks), "--",
                    *rank, *case.args]
        # a `-- python x.py` line (case.line) runs as given: no launcher's argument for a plain script
        local = ["--local_rank=0"] if case.launcher is Launcher.DEEPSPEED and not case.line else []
        return ["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(t.run.rank_log(0)), *rank, *local, *case.args]

    def program(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """The ranks' own command line within ``argv`` (what they run, without what starts them)."""
        return argv[4:] if argv[0] == "/bin/sh" else argv[argv.index("--") + 1:]

    def rank_env(self, case: Case, t: Target, cuda: bool, visible: str | None) -> dict[str, str]:
        """The variables a launcher gives its ranks: enough for ``init_process_group`` (env://)."""
        n = str(case.nproc)
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": n, "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(t.port)}
        if case.launcher is Launcher.DEEPSPEED:
            env |= {"CROSS_RANK": "0", "CROSS_SIZE": "1", "LOCAL_SIZE": "1"}
        else:
            env |= {"LOCAL_WORLD_SIZE": n, "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0",
                    "ROLE_WORLD_SIZE": n, "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": "0",
                    "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none"}
        if case.nproc > 1:  # each rank's own, set by the starter, which must not carry them (a process with RANK is a rank)
            for name in ("RANK", "LOCAL_RANK", "ROLE_RANK"):
                del env[name]
        if cuda and case.nproc == 1:  # the slot's GPU, else the first one this process may use, as --num_gpus 1
            first = (visible or "").split(",")[0].strip()
            env["CUDA_VISIBLE_DEVICES"] = str(t.devices[0]) if t.devices else (first or "0")
        elif cuda and t.devices:  # the slot's GPUs; rank R takes LOCAL_RANK R of them, as under torchrun
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in t.devices)
        return env


class Executable(LaunchLine):
    """Any other program, run as it is (the point venv's bin first on its PATH): its exit code is
    the verdict; its first interpreter need not be the point venv's, so the check comes first."""

    kind = "executable"
    rank_logs = RankLogs.NONE
    folds_check = False

    def ranks(self, case: Case, cuda: bool) -> Ranks:
        return Ranks(None, "an executable starts its own")

    def argv(self, case: Case, t: Target) -> list[str]:
        return list(case.command.argv)


# ------------------------------------------------------------------ choosing


LINES: Mapping[str, LaunchLine] = {line.kind: line for line in (DeepSpeed(), Torchrun(), Accelerate(), Srun(),
                                                                Direct(), Executable())}
_BY_COMMAND = {CommandKind.DEEPSPEED: "deepspeed", CommandKind.TORCHRUN: "torchrun",
               CommandKind.ACCELERATE: "accelerate", CommandKind.SRUN: "srun", CommandKind.EXECUTABLE: "executable"}

# The python -m module behind each launcher a command line may name (a layered venv gets a
# ``bin/`` entry of its own for each, running the venv's python: the base's would run the base's).
VENV_ENTRIES = {"torchrun": Torchrun.module, "deepspeed": DeepSpeed.module,
                "accelerate": "accelerate.commands.accelerate_cli"}


def direct_run(case: Case) -> bool:
    """Whether dsbisect starts the ranks itself: ``launcher: direct``, or a 1-rank single-node
    case with no launcher options of its own and no command line, run as rank 0 of 1
    (``DSBISECT_DIRECT=0`` in the case's env keeps its launcher)."""
    if case.command:
        return False
    if case.launcher is Launcher.DIRECT:
        return True
    return (case.nproc == 1 and not case.nodes.multi and not case.launcher_args
            and dict(case.env).get("DSBISECT_DIRECT") != "0")


def line_for(case: Case) -> LaunchLine:
    """The line that runs ``case``: its command line's kind, the direct run, or its launcher's."""
    if case.command:
        return LINES[_BY_COMMAND[case.command.kind]]
    if direct_run(case):
        return LINES["direct"]
    return LINES[case.launcher.value]


def added_options(case: Case, cuda: bool) -> str:
    """What dsbisect adds to the case's line that changes what it runs (``--multi_gpu``: accelerate
    launch's N processes on CPU instead of one), part of a run's inputs; "" for none. The
    plumbing it adds (a free port, log folders) changes nothing a verdict rests on."""
    said = line_for(case).ranks(case, cuda).added
    return said.split(" ", 1)[0] if said else ""


def launch_env(case: Case, run: RunDir) -> dict[str, str]:
    """What every process of a run gets from dsbisect: the run folder (the start-up hook writes
    there), the file a script may write its numbers to, the collective timeout, the flight
    recorder's dump files, and the case's env."""
    return {
        "DSBISECT_RUN_DIR": str(run.path),
        "DSBISECT_METRICS": str(run.metrics),
        "DSBISECT_COLLECTIVE_TIMEOUT": f"{case.collective_timeout:g}",
        "DSBISECT_CASE": case.name,
    } | flight_recorder_env(run) | dict(case.env)


def plan(case: Case, t: Target, cuda: bool = False, visible: str | None = None) -> Plan:
    """What to start for ``case``: its line's argv, the variables dsbisect gives (the run's and
    the ranks'), and the folder it runs from."""
    line, t = line_for(case), replace(t, cuda=cuda)
    env = launch_env(case, t.run) | line.rank_env(case, t, cuda, visible)
    return Plan(line, tuple(line.argv(case, t)), env, case.cwd or t.run.path)


def accelerator_env(case: Case, accel: Accelerator) -> dict[str, str]:
    """What the accelerator and the case's shims add (the runner's base environment has them too)."""
    env = {"DSBISECT_COMPAT": ",".join(case.compat)} if case.compat else {}
    if accel is Accelerator.CPU:
        env |= {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    return env


def instructions(case: Case, point: Point, venv: Path, accel: Accelerator, t: Target) -> list[str]:
    """How to run ``case`` at ``point`` by hand: the venv, how to activate it, and the command the
    runner would run (``plan``), with the variables it would give, from the folder it would use."""
    p = plan(case, t, cuda=accel is Accelerator.CUDA)
    env = accelerator_env(case, accel) | dict(p.env)
    run = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *p.argv])
    run = f"mkdir -p {shlex.quote(str(t.run.ranks))} && cd {shlex.quote(str(p.cwd))} && {run}"
    return [f"{case.name} · {point.label}",
            f"  venv      {venv}",
            f"  activate  source {shlex.quote(str(venv / 'bin' / 'activate'))}",
            f"  logs      {t.run.path}",
            f"  run       {redact(run)}"]
