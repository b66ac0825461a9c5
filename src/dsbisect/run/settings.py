"""What the commands that run points share, as frozen values: per-run limits, where packages come
from, where venvs live, how runs are placed (here, or Slurm), multi-node settings and the store;
the frontend a job talks to the user through; and the one factory that opens the session (store,
venvs, runner, executor) from them.

A command line fills these (``cli.options`` declares their options); each checks its own values
and turns them into what the layers below take, so that a bad value is one ``InputError`` raised
before anything is created.
"""

from __future__ import annotations

import dataclasses
import functools
import enum
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dsbisect.core import outputs
from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.model import BaseMode, Case, EnvOptions, IndexOptions, LauncherBackend
from dsbisect.run import matrix
from dsbisect.run.executor import Place
from dsbisect.run.runner import Runner
from dsbisect.run.session import cache_root, index_options, open_runner


class ExecutorKind(str, enum.Enum):
    """Where runs go: here, or one Slurm job per run."""

    local = "local"
    slurm = "slurm"


@dataclass(frozen=True)
class Limits:
    """Per-run limits that override the matrix's (seconds; None: the case's own)."""

    timeout: float | None = None
    collective_timeout: float | None = None
    idle_timeout: float | None = None
    no_early_hang: bool = False

    def apply(self, case: Case) -> Case:
        """``case`` under these limits; an InputError for a limit that is no number of seconds."""
        for flag, value in (("--timeout", self.timeout), ("--collective-timeout", self.collective_timeout),
                            ("--idle-timeout", self.idle_timeout)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InputError(f"{flag} {value:g}: expected a number of seconds greater than 0")
        case = case.with_timeouts(self.timeout, self.collective_timeout, self.idle_timeout)
        return dataclasses.replace(case, early_hang=False) if self.no_early_hang else case


@dataclass(frozen=True)
class Sources:
    """Where packages come from, as given (``resolve`` adds uv's and pip's own settings)."""

    offline: bool = False
    find_links: Sequence[Path] | None = None
    index_url: str | None = None
    extra_index_url: Sequence[str] | None = None

    def resolve(self) -> IndexOptions:
        """The index settings, resolved (``notes``: the pip/uv settings left out, for the command
        to say once its input is checked, so that bad input stays one line)."""
        return index_options(self.offline, list(self.find_links or []), self.index_url,
                             list(self.extra_index_url or []))


@dataclass(frozen=True)
class Venvs:
    """Where point venvs live and what they are made from (None: the matrix's, else the default)."""

    cache_dir: Path | None = None
    python: str | None = None
    base: BaseMode | None = None

    def options(self, defaults: EnvOptions) -> EnvOptions:
        """The venv options over ``defaults`` (the interpreter checked now, before anything is created)."""
        from dsbisect.envs.base import find_python

        opts = dataclasses.replace(defaults, python=self.python or defaults.python, base=self.base or defaults.base)
        if opts.python:
            find_python(opts.python)
        return opts

    def root(self) -> Path:
        """The env root (``--cache-dir``, else the user's cache dir), checked."""
        return cache_root(self.cache_dir)


@dataclass(frozen=True)
class Nodes:
    """Multi-node settings of the deepspeed launcher that override the matrix's."""

    hostfile: Path | None = None
    num_nodes: int | None = None
    launcher_backend: LauncherBackend | None = None
    master_addr: str | None = None
    include: str | None = None
    exclude: str | None = None

    def apply(self, case: Case) -> Case:
        return matrix.with_nodes(
            case, "command line", hostfile=self.hostfile.resolve() if self.hostfile else None,
            num_nodes=self.num_nodes, backend=self.launcher_backend, master_addr=self.master_addr,
            include=self.include, exclude=self.exclude)


@dataclass(frozen=True)
class Placement:
    """How many points at once, and where they run."""

    jobs: int | None = None
    executor: ExecutorKind = ExecutorKind.local
    partition: str | None = None
    slurm_time: int | None = None
    gpus_per_job: int | None = None
    slurm_arg: Sequence[str] | None = None

    def executor_for(self) -> Place:
        """How runs are made (a ``Place``): here, or as Slurm jobs with these job settings."""
        if self.executor is ExecutorKind.local:
            if self.partition or self.slurm_time or self.gpus_per_job is not None or self.slurm_arg:
                raise InputError("--partition, --slurm-time, --gpus-per-job and --slurm-arg need --executor slurm")
            from dsbisect.run.local import LocalExecutor

            return LocalExecutor
        from dsbisect.run.slurm import SlurmExecutor, SlurmOptions

        return functools.partial(SlurmExecutor, options=SlurmOptions(
            partition=self.partition, time=self.slurm_time, gpus=self.gpus_per_job,
            args=tuple(self.slurm_arg or ()), jobs=self.jobs or 8))


@dataclass(frozen=True)
class Settings:
    """Everything a command that runs points shares, besides what it runs."""

    store: Path = Path(".dsbisect")
    limits: Limits = field(default_factory=Limits)
    sources: Sources = field(default_factory=Sources)
    venvs: Venvs = field(default_factory=Venvs)
    placement: Placement = field(default_factory=Placement)
    nodes: Nodes = field(default_factory=Nodes)

    def shape(self, case: Case) -> Case:
        """``case`` under the limits and node settings given."""
        return self.nodes.apply(self.limits.apply(case))


class Display(Protocol):
    """Progress of a job on the user's terminal: the runner's progress callback (``kind, text``),
    what it knows of the points to come, and the spans while it runs or asks something."""

    def __call__(self, kind: str, text: str) -> None: ...

    def expect_unrunnable(self, n: int) -> None: ...

    def running(self) -> AbstractContextManager[None]: ...

    def paused(self) -> AbstractContextManager[None]: ...


@dataclass(frozen=True)
class Frontend:
    """How a job talks to the user: ``display(total)`` makes its progress display (``total``: the
    runs to come, 0 when not known), ``say`` a note on stderr, ``ask`` a question (``--manual``)."""

    display: Callable[[int], Display]
    say: Callable[[str], None]
    ask: Callable[[str], str]


def open_session(settings: Settings, env_options: EnvOptions, index: IndexOptions, display: Display, *,
                 rerun: bool = False, executor: Place | None = None) -> Runner:
    """The runner of every command that runs points: the store of ``settings``, venvs under its
    cache, runs made by the executor ``executor`` makes (None: here).  What an earlier dsbisect of this store left running when it
    died is stopped first."""
    return open_runner(settings.store, settings.venvs.cache_dir, env_options, index, display, rerun=rerun,
                       jobs=settings.placement.jobs, **({"place": executor} if executor else {}))


def matrix_files(path: Path) -> tuple[Path, ...]:
    """The scripts and named files of a matrix's cases (nothing when it does not load: the
    command says why itself)."""
    try:
        m = matrix.load(path)
    except (DsbisectError, OSError, ValueError):
        return ()
    found: list[object] = []
    for case in m.cases:
        found += [case.script, *(p for p, _ in case.inputs), *case.args]
        if case.nodes.hostfile is not None:
            found.append(case.nodes.hostfile)
    return outputs.existing_files(found)
