"""A run's launch line on this machine: the argv, the environment and the port a point's run
is launched with (``launch_line``), from the case, the point's venv and the GPU slot.

The environment is a clean one (``base_env``) with the point venv's tools first on the PATH
(for a command line), DeepSpeed's just-in-time ops built once per venv and shared by digest,
and the CPU accelerator forced where the run has no GPU.  A script under DeepSpeed's launcher
in a venv without DeepSpeed runs under torchrun, or with no launcher (``installed_launcher``).
What the launcher log says of the line is written here too.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from dsbisect.core.model import Accelerator, Case, Launcher, check_wanted
from dsbisect.core.proc import clean_env, without_unset
from dsbisect.core.redact import redact, remember, secret_values
from dsbisect.core.rundir import RunDir
from dsbisect.envs.base import has_module
from dsbisect.envs.toolchain import rank_path
from dsbisect.envs.venvs import EXTENSIONS, Env, EnvManager, clear_stale_build_locks
from dsbisect.launch.launchers import Plan, Ranks, Target, plan
from dsbisect.launch.supervise import LaunchSpec
from dsbisect.run.executor import Progress
from dsbisect.run.launched import Job, Line


def launch_line(job: Job, port: int, checks: bool, envs: EnvManager, progress: Progress) -> Line:
    """The run's argv and environment on ``port`` (taken for it by the caller); ``checks``: the
    run's first interpreter makes the import check (``DSBISECT_CHECK_IMPORTS``)."""
    case, run, env = job.case, job.run, job.env
    cuda = job.accel is Accelerator.CUDA
    devices = job.slot.devices if cuda else None
    variables = base_env(case, job.accel, envs, env)
    for lock in clear_stale_build_locks(env.path):  # a killed build's; it would read as a hang
        with open(run.launcher_log, "a") as note:
            note.write(f"dsbisect: removed {lock}, left by a just-in-time build that was stopped\n")
    if checks:  # the run's first interpreter makes the import check
        variables["DSBISECT_CHECK_IMPORTS"] = ",".join(check_wanted(job.point))
        if envs.caches_bytecode(env):  # and caches what it imports (EnvManager.caches_bytecode)
            variables["DSBISECT_CHECK_BYTECODE"] = "1"
    target = Target(env.python, run, port, devices)
    p = plan(case, target, cuda, variables.get("CUDA_VISIBLE_DEVICES"))
    case, chosen = installed_launcher(case, env.path) if not p.line.direct else (case, "")  # no launcher: none to swap
    if chosen:
        with open(run.launcher_log, "a") as note:
            note.write(f"dsbisect: {chosen}\n")
        progress("note", f"{case.name} · {job.point.label}: {chosen}")
        p = plan(case, target, cuda, variables.get("CUDA_VISIBLE_DEVICES"))
    variables = without_unset(variables | p.env)  # a setting's trial may remove a variable
    run.ranks.mkdir(parents=True, exist_ok=True)
    ranks = p.line.ranks(case, cuda)
    _say_line(run, case, p, ranks)
    secrets = secret_values(variables, [*p.argv, *(case.command.argv if case.command else ())])
    remember(secrets)  # the ranks' and the command line's: whatever this process shows from now on masks them
    spec = LaunchSpec(
        argv=p.argv,
        env=variables,
        cwd=p.cwd,
        run=run,
        wall_timeout=case.timeout,
        idle_timeout=case.idle_timeout,
        quiet_after=max(1.0, case.collective_timeout * 0.4),
        early_hang=case.early_hang,
    )
    return Line(spec, port, p.line.direct, secrets, ranks)


def _say_line(run: RunDir, case: Case, p: Plan, ranks: Ranks) -> None:
    """What the launcher log says of the line: how the ranks start without a launcher, or what
    the launcher was told of them."""
    if p.line.direct:
        with open(run.launcher_log, "a") as note:  # launch appends; show and forensics read both logs
            program = redact(" ".join(p.line.program(p.argv)))
            if case.nproc == 1:
                note.write(f"dsbisect: 1 rank, run without a launcher (rank 0 of 1, output in "
                           f"{run.rank_log(0).relative_to(run.path)}): {program}\n")
            else:
                note.write(f"dsbisect: {case.nproc} ranks, started by dsbisect without a launcher (output "
                           f"in {run.ranks.relative_to(run.path)}/rank<R>.log): {program}\n")
    elif ranks.said():
        with open(run.launcher_log, "a") as note:
            note.write(f"dsbisect: {ranks.describe()}, {ranks.said()}: {redact(shlex.join(p.argv))}\n")


def base_env(case: Case, accel: Accelerator, envs: EnvManager, venv: Env | None = None) -> dict[str, str]:
    """The environment a run (or an import check) of ``case`` starts from, in ``venv`` when given."""
    env = clean_env({"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
    if venv is not None:  # ops compiled just in time (DeepSpeed's) are built once per venv, then loaded
        env.setdefault("TORCH_EXTENSIONS_DIR", str(venv.path / EXTENSIONS))
        env.setdefault("DSBISECT_OPS_DIR", str(envs.paths.ops))  # shared by digest of sources+toolchain
        # one ninja, whatever the caller's PATH; python, deepspeed, torchrun, accelerate: the point's
        env["PATH"] = rank_path(env.get("PATH", ""), envs.paths.root, venv.path / "bin" if case.command else None)
    if case.compat:
        env["DSBISECT_COMPAT"] = ",".join(case.compat)
    if accel is Accelerator.CPU:
        env |= {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    # On GPUs DeepSpeed detects the accelerator itself, as in the user's job: setting
    # DS_ACCELERATOR=cuda sends 0.12.4's get_accelerator() into endless recursion.
    return env


def installed_launcher(case: Case, venv: Path) -> tuple[Case, str]:
    """The case to launch, with a launcher the point venv has, and what was chosen instead ("" when
    nothing was): a script under DeepSpeed's launcher (the default) in a venv without DeepSpeed (a
    Transformers or Accelerate user's) runs under torchrun, which comes with torch; without torch
    either, dsbisect starts the ranks itself.  A command line's own launcher is never changed."""
    if case.command is not None or case.launcher is not Launcher.DEEPSPEED or has_module(venv, "deepspeed"):
        return case, ""
    other = Launcher.TORCHRUN if has_module(venv, "torch") else Launcher.DIRECT
    return (dataclasses.replace(case, launcher=other, launcher_args=()),
            f"the deepspeed launcher is not installed in the point venv (no deepspeed): the script runs under "
            f"{'torchrun' if other is Launcher.TORCHRUN else 'no launcher (dsbisect starts the ranks)'} instead")
