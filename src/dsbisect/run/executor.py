"""Where a run of a point is made: the ``Executor`` interface, and the ``Site`` every executor
records into.

The ``Runner`` decides which points run and which recorded runs stand for them; an executor
makes one run and records it: here (``local.LocalExecutor``: venv, import check, launch,
verdict), as one Slurm job (``slurm.SlurmExecutor``), or by the user at a prompt
(``bisect.marks.ManualExecutor``).  An executor is made for a site (a ``Place`` is how:
``LocalExecutor``, ``functools.partial(SlurmExecutor, options=...)``), so that one runner,
one store and one progress line serve whichever makes the runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dsbisect.core.model import Case, Point
from dsbisect.envs.venvs import EnvManager
from dsbisect.records.run import RunRecord
from dsbisect.store.store import Store

Progress = Callable[[str, str], None]


def quiet(kind: str, text: str) -> None:
    """Progress that shows nothing."""


@dataclass(frozen=True)
class Slot:
    """Where a run executes: the GPU indices it may use (None: CPU or all)."""

    devices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run to make: of ``point`` of ``case`` (as the executor runs it: ``case_for``), its
    ``attempt``-th, in ``slot``."""

    case: Case
    point: Point
    attempt: int = 1
    slot: Slot = Slot()


@dataclass(frozen=True)
class Site:
    """What every executor works with: the store its runs are recorded in, the venvs, the
    progress line, and this machine's GPUs (names, and the indices CUDA_VISIBLE_DEVICES shows)
    with the ``--jobs`` limit (what a run here gets of them: ``local.accelerator``)."""

    store: Store
    envs: EnvManager
    progress: Progress = quiet
    gpus: tuple[str, ...] = ()
    gpu_ids: tuple[int, ...] = ()
    jobs: int | None = None  # None: as many as the machine's GPUs (or cores) allow


class Executor(Protocol):
    """Makes one run of a point and records it in its site's store."""

    def slots(self, case: Case) -> list[Slot]:
        """Where runs of ``case`` (as ``case_for`` gives it) may go at once: one slot per run in flight."""

    def case_for(self, case: Case) -> Case:
        """``case`` as a run of it is made: with this machine's GPU settings where the run is
        here; as given where another machine applies its own."""

    def where(self, case: Case) -> str:
        """The accelerator a run of ``case`` gets ("cpu", "cuda"; "" where another machine
        decides), which recorded runs must match to be reused."""

    def unrunnable(self, case: Case) -> str:
        """Why no run of ``case`` can be made at all (each is a skip at once: too few GPUs
        here), or "" when runs can be made."""

    def builds_here(self, case: Case) -> bool:
        """Whether a run of ``case`` uses a venv built on this machine, which is then worth
        building while other points run."""

    def run_once(self, spec: RunSpec, cancel: threading.Event) -> RunRecord:
        """One run, recorded in the site's store; stopped early (an ``Interrupted``) when
        ``cancel`` is set."""


Place = Callable[[Site], Executor]


class Delegated:
    """What an executor that hands each run to others (Slurm, the user) says about where runs
    go: one at a time, the case as given, the accelerator theirs, nothing built ahead here."""

    def slots(self, case: Case) -> list[Slot]:
        return [Slot()]

    def case_for(self, case: Case) -> Case:
        return case

    def where(self, case: Case) -> str:
        return ""

    def unrunnable(self, case: Case) -> str:
        return ""

    def builds_here(self, case: Case) -> bool:
        return False
