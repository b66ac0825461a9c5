"""A sweep (``dsbisect run``): every case of a matrix at every point, or a command line at the
versions asked for; each point run (or reused) through the session's runner.

Everything is checked (the matrix or the command, the limits, the executor, the index, the
interpreter, every version on an axis) before the store or the cache is touched.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.core.model import Accelerator, Case, EnvOptions
from dsbisect.core.redact import redact
from dsbisect.records.run import RunRecord
from dsbisect.run import matrix
from dsbisect.run.local import LocalExecutor
from dsbisect.run.runner import Runner
from dsbisect.run.settings import Display, Frontend, Limits, Settings, open_session


@dataclass(frozen=True)
class SweepRequest:
    """What ``dsbisect run`` runs: ``args`` is a matrix file (default matrix.yaml), or, with
    ``versions``/``pin``, a command line; ``case`` picks cases of the matrix."""

    args: Sequence[str] | None = None
    case: Sequence[str] | None = None
    versions: Sequence[str] | None = None
    pin: Sequence[str] | None = None
    nproc: int | None = None  # None: not given (-- python x.py runs as one process, as given)
    accelerator: Accelerator = Accelerator.AUTO
    rerun: bool = False
    repeat: int = 1

    @property
    def narrowing(self) -> bool:
        """A matrix at other versions (a YAML file is never a command line)."""
        args = list(self.args or [])
        return bool(self.versions or self.pin) and len(args) == 1 and Path(args[0]).suffix in (".yaml", ".yml")


@dataclass(frozen=True)
class Swept:
    """A sweep's runs (each named after the case it ran for), its cases as run, and the matrix
    file they came from (None: a command line's)."""

    records: tuple[RunRecord, ...]
    cases: tuple[Case, ...]
    matrix: Path | None


def cases_of(request: SweepRequest) -> tuple[list[Case], EnvOptions, Path | None]:
    """The cases a request names, the venv defaults they come with and their matrix file; an
    InputError (or MatrixError) when it names nothing runnable."""
    args, versions, pins = list(request.args or []), list(request.versions or []), list(request.pin or [])
    if request.narrowing:
        m = matrix.load(Path(args[0]))
        return matrix.narrowed(m.select(_names(request.case)), versions, pins), m.env, m.path
    if versions or pins:
        case = matrix.command_points(args, Path.cwd(), versions, pins, request.nproc, request.accelerator)
        return [case], EnvOptions(), None
    if len(args) > 1:
        raise InputError("a command line needs --versions or --pin (and -- before it)")
    if not args and not Path("matrix.yaml").exists():  # nothing named what to run: say what to give
        raise InputError("give a MATRIX file, or --versions PKG=V1,V2 (or --pin REQ) and -- COMMAND: what to "
                         "run (no matrix.yaml here)")
    m = matrix.load(Path(args[0]) if args else Path("matrix.yaml"))
    return m.select(_names(request.case)), m.env, m.path


def _names(case: Sequence[str] | None) -> list[str] | None:
    return list(case) if case else None


def sweep(request: SweepRequest, settings: Settings, frontend: Frontend) -> Swept:
    """Run every point of every case ``request`` names (``repeat`` times), reusing what the store
    holds unless ``rerun``; progress through ``frontend``."""
    from dsbisect.envs.versions import check_points

    cases, env_defaults, source = cases_of(request)
    cases = [settings.shape(c) for c in cases]
    executor = settings.placement.executor_for()
    index = settings.sources.resolve()
    env_options = settings.venvs.options(env_defaults)
    check_points(cases, index)
    ui = frontend.display(sum(len(c.points) for c in cases) * request.repeat)
    runner = open_session(settings, env_options, index, ui, rerun=request.rerun, executor=executor)
    for said in filter(None, map(matrix.how_it_runs, cases)):  # a plain `python x.py`: one process as given
        frontend.say(said)
    # points skipped at once for want of GPUs are no part of the time left
    ui.expect_unrunnable(sum(len(c.points) for c in cases if runner.unrunnable(c)) * request.repeat)
    records: list[RunRecord] = []
    with ui.running():
        for c in cases:
            note_slots(runner, c, ui)
            for rs in runner.run_many(c, list(c.points), want=request.repeat):  # a run of another name, one key
                records += [r if r.case_name == c.name else dataclasses.replace(r, case_name=c.name) for r in rs]
    return Swept(tuple(records), tuple(cases), source)


def title(request: SweepRequest, swept: Swept, limits: Limits = Limits()) -> str:
    """``dsbisect run …``: the line that runs the same points of the same cases again (the grid's
    title): the matrix or the command line, with every option that decides what runs (--case,
    --versions, --pin, --repeat, the limits that are part of a case, and for a command its
    --accelerator and the --nproc of a ``python x.py`` line); never where things are kept."""
    words = [w for c in request.case or () for w in ("--case", c)] if swept.matrix is not None else []
    words += [w for v in request.versions or () for w in ("--versions", v)]
    words += [w for p in request.pin or () for w in ("--pin", p)]
    words += ["--repeat", str(request.repeat)] if request.repeat > 1 else []
    words += [w for flag, value in (("--timeout", limits.timeout), ("--collective-timeout", limits.collective_timeout),
                                    ("--idle-timeout", limits.idle_timeout)) if value is not None
              for w in (flag, f"{value:g}")] + ["--no-early-hang"] * limits.no_early_hang
    if swept.matrix is not None:
        return redact("dsbisect run " + shlex.join([_from_here(swept.matrix), *words]))
    words += ["--accelerator", request.accelerator.value] if request.accelerator is not Accelerator.AUTO else []
    words += ["--nproc", str(request.nproc)] if swept.cases[0].command is None and request.nproc else []
    return redact("dsbisect run " + shlex.join([*words, "--", *(request.args or [])]))


def _from_here(path: Path) -> str:
    """A file as a command line typed here names it: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def note_slots(runner: Runner, case: Case, ui: Display) -> None:
    """Say how many points of ``case`` run at once, where, and whether that oversubscribes the CPU."""
    slots = runner.slots(case)
    if not isinstance(runner.executor, LocalExecutor):
        ui("note", f"{case.name}: up to {len(slots)} Slurm job(s) at once")
        return
    _, said = runner.executor.memory_plan(case)
    if len(slots) > 1 or said:
        where = ", ".join(",".join(map(str, s.devices)) for s in slots if s.devices) or "CPU"
        many = f"{len(slots)} points at once" if len(slots) > 1 else "1 point at a time"
        ui("note", f"{case.name}: {many} ({where}{'; ' + said if said else ''})")
    cores = os.cpu_count() or 1
    if runner.accelerator(case) is Accelerator.CPU and len(slots) * case.nproc > cores:
        ui("note", f"{case.name}: {len(slots)} jobs x {case.nproc} ranks on {cores} cores: oversubscribed")
