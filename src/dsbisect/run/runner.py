"""The runs of the points a command asks for: recorded ones reused, missing ones made.

``Runner.runs`` is what ``run`` and ``bisect`` both stand on: it returns the recorded runs
of a (case, point) and makes the missing ones.  PASS, FAIL and HANG are reused from the
store; SKIPs are tried again, since their causes (no GPU here, a build that failed, an
index that was down) belong to the machine and the moment rather than to the point.

Where a run is made is the ``Executor``'s business (``executor``): here (``local.LocalExecutor``,
the default), one Slurm job per run (``slurm.SlurmExecutor``), or the user at a prompt
(``bisect --manual``).  The runner runs several points at once in the executor's slots, and
builds the venvs of the points a search may test next while others run, where the runs are here.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import InitVar, dataclass, field

from dsbisect.core import proc
from dsbisect.core.errors import EnvBuildError
from dsbisect.core.model import Accelerator, Case, Outcome, Point, check_wanted
from dsbisect.core.proc import clean_env
from dsbisect.envs import facts
from dsbisect.envs.venvs import Env, EnvManager
from dsbisect.records.run import RunRecord
from dsbisect.run.executor import Executor, Place, Progress, RunSpec, Site, Slot, quiet
from dsbisect.run.local import LocalExecutor, accelerator
from dsbisect.run.reuse import Reuse, stale
from dsbisect.store.store import Store

CaseOf = Callable[[Point], Case]  # the case a point runs under, where points of one search differ in it
_AHEAD = threading.local()  # .label, .why: the point whose venv this thread builds ahead of its run


def env_line(text: str) -> tuple[str, str]:
    """A line of the venvs' (``EnvManager.log``) as progress shows it: on a look-ahead thread,
    the "ahead" kind, worded as a look-ahead build; else an "env" line as it is."""
    label = getattr(_AHEAD, "label", "")
    if not label:
        return "env", text
    return "ahead", f"look-ahead for {label} ({_AHEAD.why}): {text}"


@dataclass
class Runner:
    """The runs of (case, point)s over ``store`` and the venvs of ``envs``, made by the executor
    that ``place`` makes for the runner's ``site`` (``LocalExecutor``: here, on this machine's
    ``gpus``, ``gpu_ids`` and ``jobs``)."""

    store: Store
    envs: EnvManager
    gpus: InitVar[Sequence[str]] = ()
    progress: Progress = quiet
    rerun: bool = False
    gpu_ids: InitVar[Sequence[int]] = ()
    jobs: InitVar[int | None] = None  # None: as many as the machine's GPUs (or cores) allow
    place: Place = LocalExecutor  # makes the executor for this runner's site: here, unless told otherwise
    cancel: threading.Event = field(default_factory=threading.Event)  # set: every running launch stops
    _ahead: ThreadPoolExecutor | None = None  # builds the venvs a bisection may need next
    _ahead_jobs: list = field(default_factory=list)
    _ahead_stop: threading.Event = field(default_factory=threading.Event)  # set: the one under way is killed

    def __post_init__(self, gpus: Sequence[str], gpu_ids: Sequence[int], jobs: int | None) -> None:
        self.site = Site(self.store, self.envs, self.progress, tuple(gpus), tuple(gpu_ids), jobs)
        self.executor: Executor = self.place(self.site)

    # ---------------------------------------------------------- concurrency

    def slots(self, case: Case) -> list[Slot]:
        """Where runs of ``case`` can go at once: one slot for a multi-node case (it holds the
        hosts and slots it names), else the executor's (GPU slices, CPU budgets, Slurm jobs)."""
        case = self.executor.case_for(case)
        if case.nodes.multi:
            return [Slot()]
        return self.executor.slots(case)

    def unrunnable(self, case: Case) -> bool:
        """Whether every run of ``case`` is a skip at once (too few GPUs here): no part of the time left."""
        return bool(self.executor.unrunnable(case))

    def accelerator(self, case: Case) -> Accelerator:
        """The accelerator a run of ``case`` gets on this machine."""
        return accelerator(self.site, case)

    def run_many(self, case: Case | CaseOf, points: list[Point], want: int = 1,
                 enough: Callable[[list[RunRecord]], bool] | None = None) -> list[list[RunRecord]]:
        """``runs`` of several points, at once when the machine has room for more than one;
        ``case`` may be a function of the point (a settings trial runs its own case)."""
        if callable(case):
            return self._run_pairs([case(p) for p in points], points, want, enough)
        return self._run_pairs([case] * len(points), points, want, enough)

    def _run_pairs(self, cases: list[Case], points: list[Point], want: int, enough) -> list[list[RunRecord]]:
        case = cases[0] if cases else None
        if case is None:
            return []
        slots = self.slots(case)
        if len(slots) == 1 or len(points) == 1:
            return self._sequential(cases, points, want, enough)
        free: queue.Queue[Slot] = queue.Queue()
        for slot in slots:
            free.put(slot)

        def one(case: Case, point: Point) -> list[RunRecord]:
            slot = free.get()
            try:
                with proc.cancellable(self.cancel):  # a wait for a lock ends once the runs are stopped
                    return self.runs(case, point, want, enough, slot)
            finally:
                free.put(slot)

        with ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="dsbisect-run") as pool:
            futures = [pool.submit(one, c, p) for c, p in zip(cases, points)]
            try:
                return [f.result() for f in futures]
            except BaseException:
                self.cancel.set()  # every running launch stops its process group
                raise

    def _sequential(self, cases: list[Case], points: list[Point], want: int, enough) -> list[list[RunRecord]]:
        """One point after another, the next point's venv built while the current one runs."""
        out, stop = [], threading.Event()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsbisect-env") as bg:
            try:
                for i, point in enumerate(points):
                    if i + 1 < len(points):
                        bg.submit(self._prepare_cancellable, stop, cases[i + 1], points[i + 1], "the next point")
                    out.append(self.runs(cases[i], point, want, enough))
            except BaseException:  # Ctrl-C: the next point's build (or its wait for a lock) stops too
                stop.set()
                raise
        return out

    def prepare_ahead(self, case: Case | CaseOf, points: list[Point]) -> None:
        """Build these points' venvs in the background while others run (what was asked ahead
        before and has not started is dropped: only the latest look-ahead matters)."""
        if os.environ.get("DSBISECT_LOOKAHEAD") == "0":  # for measuring what it saves
            return
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsbisect-ahead")
            self._ahead_stop = threading.Event()
        for job in self._ahead_jobs:
            job.cancel()
        self._ahead_jobs = [self._ahead.submit(self._prepare_ahead, case(p) if callable(case) else case, p)
                            for p in points]

    def stop_ahead(self) -> None:
        """The answer is known: drop the look-ahead builds not started and kill the one under way
        (its uv, pip and compilers; the half-built venv is removed as after any failed build),
        rather than wait for a venv no one will run (a DeepSpeed sdist build takes a minute)."""
        if self._ahead is not None:
            self._ahead_stop.set()
            self._ahead.shutdown(wait=True, cancel_futures=True)
            self._ahead, self._ahead_jobs = None, []

    def _prepare_ahead(self, case: Case, point: Point) -> None:
        self._prepare_cancellable(self._ahead_stop, case, point)

    def _prepare_cancellable(self, stop: threading.Event, case: Case, point: Point,
                             why: str = "the search may test it next") -> None:
        try:
            with proc.cancellable(stop):  # its builds and its waits for locks stop once ``stop`` is set
                self._prepare(case, point, why)
        except proc.Cancelled:
            return  # not needed any more; a later run of this point builds it again

    def _prepare(self, case: Case, point: Point, why: str = "the search may test it next") -> None:
        if not self.executor.builds_here(case):
            return  # the run is not here, or cannot run here
        # Recorded: most likely reused. Whether it is, is decided once, when the point's turn
        # comes (a run set aside then builds its venv itself).
        if not self.rerun and any(r.outcome is not Outcome.SKIP or r.manual is not None
                                  for r in self.store.done_runs(self.executor.case_for(case).key, point.key)):
            return
        _AHEAD.label, _AHEAD.why = f"{case.name} · {point.label}", f"{why}; built while another point runs"
        try:
            env = self.envs.ensure(point)
            precompile(env, check_wanted(point)[:-1])
        except EnvBuildError:
            return  # the run itself records the skip, with the reason
        finally:
            _AHEAD.label = ""
            self.progress("ahead", "")  # over: no look-ahead line any more

    # ----------------------------------------------------------------- public

    def runs(self, case: Case, point: Point, want: int = 1,
             enough: Callable[[list[RunRecord]], bool] | None = None, slot: Slot = Slot()) -> list[RunRecord]:
        """Up to ``want`` runs of ``point``: recorded ones first, then new ones until ``enough``."""
        case = self.executor.case_for(case)  # here: with this GPU's settings; a remote node applies its own
        self.store.name_case(case.name, case.key)  # its runs may be recorded under another name of this key
        recorded, why = self.reusable(case, point)
        runs = recorded[:want]
        for r in runs:
            self.progress("reused", f"{case.name} · {point.label}: {r.outcome.value} (run {r.id}, recorded)")
        if why and len(runs) < want:
            self.progress("note", f"{case.name} · {point.label}: {why}; running it again")
        while len(runs) < want and not (enough and enough(runs)) and Outcome.SKIP not in {r.outcome for r in runs}:
            run = self.run_once(case, point, attempt=len(runs) + 1, slot=slot)
            runs.append(run)
            if run.outcome is Outcome.SKIP:
                break
        return runs

    # ------------------------------------------------------------------ reuse

    def reusable(self, case: Case, point: Point) -> tuple[list[RunRecord], str]:
        """The recorded runs that may stand for runs of ``point`` now (``inputs`` has the rule):
        PASS, FAIL and HANG whose inputs are what would run now, and every run marked by hand
        (a skip included: the user said so); with why the latest one set aside was ("" if none).
        What would run now is made once (``Reuse.present``) and each record compared with it."""
        if self.rerun:
            return [], ""
        done = self.store.done_runs(case.key, point.key)
        judged = [r for r in done if r.manual is None and r.outcome is not Outcome.SKIP]
        other = None if done else self.store.latest_of_other_case(case.name, case.key, point.key)
        if not judged and other is None:
            return [r for r in done if r.manual is not None], ""  # nothing to compare
        now = self.reuse.present(case, point, [*judged, *([other] if other else [])], self._where(case))  # once
        fresh, why = [], ""
        for r in done:
            if r.manual is not None:
                fresh.append(r)
            elif r.outcome is not Outcome.SKIP:
                why_not = stale(r, now)
                if why_not:
                    why = why_not
                else:
                    fresh.append(r)
        if other is not None:  # the case's script, args or settings changed since
            why = stale(other, now) or f"recorded run {other.id} is for other case settings"
        return fresh, why

    @functools.cached_property
    def reuse(self) -> Reuse:
        return Reuse(self.store, self.envs)

    def _where(self, case: Case) -> str:
        """The accelerator a run of ``case`` gets here ("" when an executor's node decides)."""
        return self.executor.where(case)


    # ---------------------------------------------------------------- one run

    def run_once(self, case: Case, point: Point, attempt: int = 1, slot: Slot = Slot()) -> RunRecord:
        """One run of ``point`` of ``case`` (as the executor runs it: ``Executor.case_for``), through the executor."""
        return self.executor.run_once(RunSpec(case, point, attempt, slot), self.cancel)


PRECOMPILE = r"""
import compileall, importlib.metadata as md, importlib.util, json, os, sys
root = os.path.realpath(sys.prefix)
for name in json.loads(sys.argv[1]):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    for mod in (dist.read_text("top_level.txt") or "").split():
        spec = importlib.util.find_spec(mod) if mod.isidentifier() else None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if os.path.realpath(loc).startswith(root + os.sep):  # the venv's own copy, not the base's
                compileall.compile_dir(loc, quiet=2, workers=1)
"""


def precompile(env: Env, dists: list[str]) -> None:
    """Write the bytecode of the point's own packages (uv installs sources only) while another point
    runs, so that the run does not compile them on its way (or on every import, where
    PYTHONDONTWRITEBYTECODE is set).  Measured on 2 cores: accelerate's import went from ~3.7 to
    ~3.0 s of CPU; compiling it took 0.2 s.  Best effort: a failure leaves the run to compile."""
    if not dists:
        return
    import json

    proc.run([env.python, "-c", PRECOMPILE, json.dumps(dists)], env=clean_env(facts.MORTAL), timeout=300)
