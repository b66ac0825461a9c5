"""What ``dsbisect bisect`` asks for, checked, and the release bisection it runs; what ``dsbisect
versions`` lists.

A ``BisectRequest`` is the command's own options as values (the case, the search, the two
environments); ``check`` does the checks that come before the report file is checked, and
``bisect_releases`` the rest, before the store or the cache is touched, then runs the search
(``envdiff.jobs`` runs the bisection of two environments).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from packaging.version import Version

from dsbisect.bisect.span import CommitSpan
from dsbisect.core.errors import InputError
from dsbisect.core.metric import MetricSpec, parse_metric
from dsbisect.core.mode import Mode
from dsbisect.core.model import Accelerator, Case, EnvOptions, IndexOptions, RegressOn
from dsbisect.records.results import Request, Result
from dsbisect.run import matrix
from dsbisect.run.executor import Place
from dsbisect.verdict.readings import compile_pattern
from dsbisect.run.settings import Display, ExecutorKind, Frontend, Settings, Sources, open_session

if TYPE_CHECKING:
    from dsbisect.run.runner import Runner


@dataclass(frozen=True)
class CaseChoice:
    """What a bisection (or a mark) runs: ``case`` of ``matrix``, ``script``, or a command line
    given apart; ``pin``: packages held; ``nproc``/``accelerator``: of a script or a command."""

    case: str | None = None
    script: Path | None = None
    matrix: Path = Path("matrix.yaml")
    pin: Sequence[str] | None = None
    nproc: int | None = None  # None: not given (--script: 2 ranks; -- python x.py: one process, as given)
    accelerator: Accelerator = Accelerator.AUTO

    def resolve(self, command: Sequence[str] | None) -> tuple[Case, EnvOptions]:
        """The case, and the venv defaults it comes with (a matrix's own); an InputError when
        more than one, or nothing, names what to run."""
        if sum(bool(x) for x in (self.case, self.script, command)) > 1:
            raise InputError("give one of --case, --script or -- COMMAND")
        if command:
            return matrix.command_case(list(command), Path.cwd(), nproc=self.nproc,
                                       accelerator=self.accelerator), EnvOptions()
        if self.script:
            return matrix.script_case(self.script, self.nproc or 2, self.accelerator), EnvOptions()
        if self.case is None and not self.matrix.exists():  # nothing named what to run: say what to give
            raise InputError(f"give --case NAME, --script FILE or -- COMMAND: what to run (no {self.matrix} here "
                             "to take its one case from)")
        m = matrix.load(self.matrix)
        return m.only_case(self.case), m.env


@dataclass(frozen=True)
class SearchChoice:
    """What counts as bad and how sure the answer must be; the commit step and its proof."""

    regress_on: RegressOn = RegressOn.AUTO
    any_failure: bool = False
    find_fix: bool = False  # the --find-fix flag as given; the search reads ``mode``
    fixed_in: bool = False  # --fixed-in: after the first bad release, the latest (bisect.fixedin)
    fixed_in_upto: str | None = None
    repeat: int = 1
    confirm: int = 1
    signature: str | None = None
    confidence: float | None = None
    git_repo: Path | None = None
    verify_commit_ends: bool = True
    prove: bool = True
    metric: str | None = None  # --metric NAME[@stepN][@AGG]
    worse_if: str | None = None  # --worse-if 'lower by 5%'
    metric_pattern: str | None = None  # --metric-pattern REGEX with (?P<value>...)

    def metric_spec(self, envs: bool) -> MetricSpec | None:
        """--metric and --worse-if as a spec (None when neither is given); an InputError for a
        bad one, one without the other, or one beside what a numeric search does not do yet."""
        if self.metric is None and self.worse_if is None and self.metric_pattern is None:
            return None
        if self.metric is None or self.worse_if is None:
            raise InputError("--metric and --worse-if go together: e.g. --metric loss@step50 --worse-if 'differs by 1%'")
        spec = parse_metric(self.metric, self.worse_if)
        if self.metric_pattern is not None:
            compile_pattern(self.metric_pattern)
        clash = [flag for flag, on in (("--confidence", self.confidence is not None), ("--find-fix", self.find_fix),
                                       ("--confirm", self.confirm > 1),
                                       ("--signature", self.signature is not None)) if on]
        if self.find_fix:  # the fix of a number is where it turns back: the threshold turned round
            raise InputError("--metric does not go with --find-fix: to find where a number was fixed, bisect "
                             "without it and turn --worse-if round (a fixed 'higher by 10%' is 'lower by 10%' "
                             "from the broken start)")
        if clash:
            raise InputError(f"--metric does not go with {clash[0]} yet: the search itself decides how often "
                             "to run each point")
        return spec

    @property
    def mode(self) -> Mode:
        """What the search looks for: the one place the flag becomes a mode."""
        return Mode.of(self.find_fix)

    def check_signature(self) -> None:
        if self.signature is not None and not self.signature.strip():
            raise InputError("--signature needs some text")

    def check_confidence(self, good: str | None, envs: bool) -> None:
        """--confidence P: a probability strictly between 0.5 and 1, and a search of its own."""
        p = self.confidence
        if p is None:
            return
        if not 0.5 < p < 1:
            raise InputError(f"--confidence {p:g}: give a probability between 0.5 and 1 (exclusive), e.g. 0.95")
        if self.repeat > 1 or self.confirm > 1:
            which = "--repeat" if self.repeat > 1 else "--confirm"
            raise InputError(f"--confidence and {which} do not go together: --confidence decides how often to run "
                             "each point itself")
        if envs:
            raise InputError("--confidence is for PACKAGE GOOD BAD, not --good-env/--bad-env")
        if good == "auto":
            raise InputError("--confidence needs a GOOD release: 'auto' walks back on single runs, which a flaky "
                             "regression would fool")


@dataclass(frozen=True)
class EnvPair:
    """``--good-env A --bad-env B`` (files, venvs or pythons as they are; ``SPEC@DATE``; ``git:REV:PATH``:
    see ``envdiff.sources``), and the packages held.  Without ``--bad-env`` the bad end is the
    environment dsbisect runs in."""

    good_env: str | None = None
    bad_env: str | None = None
    hold: Sequence[str] | None = None
    # settings that differ too, or alone (envdiff.trialcase): two configs, two `env` dumps, a good line
    good_config: Path | None = None
    bad_config: Path | None = None
    good_vars: Path | None = None
    bad_vars: Path | None = None
    good_command: str | None = None

    @property
    def given(self) -> bool:
        return self.good_env is not None or self.bad_env is not None or bool(self.hold) or self.settings_given

    @property
    def settings_given(self) -> bool:
        return any(x is not None for x in (self.good_config, self.bad_config, self.good_vars, self.bad_vars,
                                           self.good_command))

    @property
    def settings_only(self) -> bool:
        """Settings without environments: both ends are the environment dsbisect runs in."""
        return self.settings_given and self.good_env is None and self.bad_env is None and not self.hold

    def paths(self) -> tuple[str, str | None]:
        """The good and the bad ENV as given (the bad one None: this environment); an InputError
        without the good one."""
        if self.good_env is None:
            raise InputError("--bad-env needs --good-env (the environment that worked)" if self.bad_env
                             else "--hold needs --good-env")
        return self.good_env, self.bad_env


@dataclass(frozen=True)
class Invocation:
    """The bisect command line: ``argv`` as a mark line repeats it (``marks.invocation``), and the
    words as typed (only they tell whether PACKAGE GOOD BAD came before ``--``)."""

    argv: tuple[str, ...] = ()
    typed: tuple[str, ...] = ()

    @property
    def after_dashes(self) -> tuple[str, ...]:
        return self.typed[self.typed.index("--") + 1:] if "--" in self.typed else ()


@dataclass(frozen=True)
class BisectRequest:
    """``dsbisect bisect``: PACKAGE GOOD BAD (or two environments) and ``-- COMMAND``, the case,
    the search, which releases are candidates, and ``manual`` (the user runs each point)."""

    package: str | None = None
    good: str | None = None
    bad: str | None = None
    command: Sequence[str] | None = None
    what: CaseChoice = field(default_factory=CaseChoice)
    search: SearchChoice = field(default_factory=SearchChoice)
    pre: bool = False
    include_yanked: bool = False
    manual: bool = False
    pair: EnvPair = field(default_factory=EnvPair)
    span: CommitSpan = field(default_factory=CommitSpan)  # --commits OLD..NEW (no releases), its budget

    @property
    def words(self) -> list[str]:
        """With two environments: PACKAGE GOOD BAD as Click filled them, then the command."""
        return [w for w in (self.package, self.good, self.bad) if w is not None] + list(self.command or [])

    def check(self, invocation: Invocation) -> None:
        """The checks before the report file's: --confidence, and two environments given whole
        and not beside PACKAGE GOOD BAD; --commits not beside them; a budget not for two
        environments nor beside --confirm."""
        self.search.check_confidence(self.good, self.pair.given)
        self.check_fixed_in()
        self.search.metric_spec(self.pair.given)
        if self.span.budgeted and self.pair.given:
            raise InputError("--max-runs and --deadline bound a search of releases or commits, "
                             "not of two environments")
        if self.span.budgeted and self.search.confirm > 1:
            raise InputError("--confirm with --max-runs or --deadline: give --repeat N or --confidence P instead")
        if self.span.given and self.pair.given:
            raise InputError("give either --commits OLD..NEW or --good-env and --bad-env, not both")
        if not self.pair.given:
            return
        if not self.pair.settings_only:
            self.pair.paths()
        if len(self.words) > len(invocation.after_dashes):
            raise InputError("give either PACKAGE GOOD BAD or --good-env and --bad-env, not both")


    def check_fixed_in(self) -> None:
        from dsbisect.bisect.fixedin import check_upto

        s = self.search
        if s.fixed_in_upto is not None and not s.fixed_in:
            raise InputError("--fixed-in-upto goes with --fixed-in")
        if s.fixed_in and (s.find_fix or self.pair.given or self.span.given or s.metric is not None):
            which = "--find-fix" if s.find_fix else "--good-env" if self.pair.given else \
                "--commits" if self.span.given else "--metric"
            extra = " (an environment bisection runs each culprit's fix search anyway)" if self.pair.given else ""
            raise InputError(f"--fixed-in is for PACKAGE GOOD BAD, not with {which}{extra}")
        check_upto(s.fixed_in_upto)


def manual_executor(settings: Settings, frontend: Frontend, ui: Display) -> Place:
    """``bisect --manual``: each point's venv built here; the user runs it and answers."""
    from dsbisect.bisect.marks import ManualExecutor

    if settings.placement.executor is not ExecutorKind.local:
        raise InputError("--manual asks you about each point: it cannot go with --executor slurm")

    def ask(text: str) -> str:
        with ui.paused():
            return frontend.ask(text)

    return functools.partial(ManualExecutor, ask=ask, say=frontend.say)


R = TypeVar("R")


@dataclass(frozen=True)
class Checked(Generic[R]):
    """A bisection's request checked (not against the index yet): the request, the venv defaults
    of its case, and where its runs go (None: here)."""

    request: R
    env_defaults: EnvOptions
    executor: Place


def open_bisection(request: BisectRequest, checked: Checked[R], settings: Settings, frontend: Frontend,
                   env_options: EnvOptions, index: IndexOptions) -> tuple[Display, Runner, R]:
    """What every bisection does once its request is checked and planned: the display, the
    session (``--manual``: each point answered by the user), the line saying how a plain command
    runs, and the request with its width (runs at once: the session's slots for its case)."""
    ui = frontend.display(0)
    executor = manual_executor(settings, frontend, ui) if request.manual else checked.executor
    runner = open_session(settings, env_options, index, ui, executor=executor)
    req = checked.request
    if matrix.how_it_runs(req.case):  # a plain `python x.py`: one process as given, or --nproc ranks
        frontend.say(matrix.how_it_runs(req.case))
    return ui, runner, dataclasses.replace(req, width=len(runner.slots(req.case)))


def release_request(request: BisectRequest, invocation: Invocation, settings: Settings) -> Checked[Request]:
    """The release bisection ``request`` asks for, checked in the order a user reads the errors."""
    if request.package is None or request.good is None or request.bad is None:
        raise InputError("give PACKAGE GOOD BAD (or --good-env and --bad-env)")
    case, env_defaults = request.what.resolve(request.command)
    case = settings.shape(case)
    executor = settings.placement.executor_for()
    s = request.search
    s.check_signature()
    spec = s.metric_spec(False)
    req = Request(package=request.package, good=request.good, bad=request.bad, case=case,
                  pins=matrix.check_pins(list(request.what.pin or []), request.package), regress_on=s.regress_on,
                  mode=s.mode, repeat=s.repeat, signature=s.signature, pre=request.pre, git_repo=s.git_repo,
                  verify_commit_ends=s.verify_commit_ends, confirm=s.confirm, include_yanked=request.include_yanked,
                  prove=s.prove, argv=invocation.argv, any_failure=s.any_failure, confidence=s.confidence,
                  metric=spec, metric_pattern=s.metric_pattern)
    return Checked(req, env_defaults, executor)


def bisect_releases(request: BisectRequest, invocation: Invocation, settings: Settings,
                    frontend: Frontend) -> tuple[Result, IndexOptions]:
    """`bisect PACKAGE GOOD BAD`: the release (then commit) bisection, everything checked before
    the store or the cache is touched; its result, and the index settings it read (``--commits``,
    the search of a clone's commits alone, is ``commitjob.bisect_commits``)."""
    from dsbisect.bisect.bisection import Bisection, plan
    from dsbisect.bisect.budget import Meter

    checked = release_request(request, invocation, settings)
    req = checked.request
    budget = request.span.budget()
    index = settings.sources.resolve()
    env_options = settings.venvs.options(checked.env_defaults)
    planned = plan(req, index)
    if req.bad == "latest":
        checked = dataclasses.replace(checked, request=dataclasses.replace(req, bad=planned.versions[-1]))
        frontend.say(f"latest release of {req.package}: {checked.request.bad}")
    ui, runner, req = open_bisection(request, checked, settings, frontend, env_options, index)
    if budget.given:
        frontend.say(f"budget: {budget.describe()}")
    with ui.running():  # the budget counts from here: the checks and the plan took no run
        result = Bisection(runner, index, req, meter=Meter(budget) if budget.given else None).run(planned)
        if request.search.fixed_in:
            from dsbisect.bisect.fixedin import with_fix

            result = with_fix(runner, index, result, request.search.fixed_in_upto)
        return result, index


@dataclass(frozen=True)
class Releases:
    """The releases ``dsbisect versions`` lists, oldest first, and the notes of the index settings."""

    versions: tuple[Version, ...]
    notes: tuple[str, ...]


def releases(package: str, good: str | None, bad: str | None, sources: Sources, pre: bool) -> Releases:
    """Every release of ``package`` (none of GOOD BAD given), or those a bisection from GOOD to
    BAD (default: the latest) tests."""
    from dsbisect.envs.versions import LATEST, candidates, listed

    index = sources.resolve()
    if good is None and bad is not None:
        raise InputError("give both GOOD and BAD, or neither")
    found = listed(package, index, pre) if good is None else candidates(package, good, bad or LATEST, index, pre)
    return Releases(tuple(found), index.notes)
