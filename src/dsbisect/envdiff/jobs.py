"""``dsbisect bisect``'s one entry: the bisection of two environments (``--good-env``/``--bad-env``)
or of a package's releases, whichever the request names, checked before the store or the cache
is touched, and run.
"""

from __future__ import annotations

import tempfile
import typing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from dsbisect.bisect.commitjob import bisect_commits
from dsbisect.bisect.jobs import BisectRequest, Checked, EnvPair, Invocation, bisect_releases, open_bisection
from dsbisect.core.errors import InputError
from dsbisect.core.model import Answer, BaseMode, EnvOptions, IndexOptions
from dsbisect.records.results import Result
from dsbisect.run.settings import Frontend, Settings

if typing.TYPE_CHECKING:  # the engine is imported when a bisection of environments runs
    from dsbisect.envdiff.engine import EnvRequest
    from dsbisect.envdiff.result import EnvResult


@dataclass(frozen=True)
class Bisected:
    """A finished bisection (of releases, or of two environments) and the index settings it read."""

    result: Result | EnvResult
    index: IndexOptions

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def failure(self) -> tuple[Answer, str]:
        """The verdict and message to say when it did not answer (exit code not 0)."""
        from dsbisect.envdiff.result import EnvResult

        if isinstance(self.result, EnvResult):
            return self.result.failure
        return self.result.verdict, self.result.message


def bisect(request: BisectRequest, invocation: Invocation, settings: Settings, frontend: Frontend) -> Bisected:
    """Run the bisection ``request`` names: of two environments when it gives them, of a clone's
    commits with ``--commits``, else of PACKAGE's releases from GOOD to BAD (``request.check``
    done first, by the caller)."""
    if request.pair.given:
        return bisect_envs(request, invocation, settings, frontend)
    run = bisect_commits if request.span.given else bisect_releases
    result, index = run(request, invocation, settings, frontend)
    return Bisected(result, index)


def env_request(request: BisectRequest, invocation: Invocation, settings: Settings) -> Checked[EnvRequest]:
    """The bisection of two environments ``request`` asks for, checked (the environments read, or
    resolved: a date, a commit, this environment); its ``argv`` is the command line a mark line
    repeats: options, then ``-- COMMAND``."""
    from dsbisect.envdiff import settingsplan, trialcase
    from dsbisect.envdiff.engine import EnvRequest

    if request.what.pin or request.pre or request.include_yanked:
        raise InputError("--pin, --pre and --include-yanked are for PACKAGE GOOD BAD; the environments pin "
                         "everything (--hold NAME keeps the base's version of a package)")
    if request.pair.settings_given and request.search.metric is not None:
        raise InputError("--metric does not go with --good-config, --good-vars or --good-command yet: "
                         "a number is bisected over package changes (--good-env/--bad-env)")
    words = request.words
    case, env_defaults = request.what.resolve(words or None)
    case = settings.shape(case)
    executor = settings.placement.executor_for()
    request.search.check_signature()
    inv = list(invocation.argv)  # Click's PACKAGE GOOD BAD (the command's first words) first, then the options
    argv = (inv[:inv.index("--")] if "--" in inv else inv)[min(3, len(words)):] + (["--", *words] if words else [])
    hold = tuple(dict.fromkeys(request.pair.hold or ()))
    settings_plan = settingsplan.read_plan(request.pair, words, Path.cwd())  # None without settings
    if request.pair.settings_only:
        good, bad = trialcase.no_packages(request.pair)
    else:
        good, bad = resolve_ends(request.pair, hold, settings, settings.venvs.options(env_defaults))
    s = request.search
    req = EnvRequest(good.environment, bad.environment, case, hold=hold, argv=tuple(argv), regress_on=s.regress_on,
                     mode=s.mode, repeat=s.repeat, confirm=s.confirm, signature=s.signature,
                     git_repo=s.git_repo, verify_commit_ends=s.verify_commit_ends, any_failure=s.any_failure,
                     prove=s.prove, freezes=(good.freeze, bad.freeze), source_notes=good.notes + bad.notes,
                     metric=s.metric_spec(True), metric_pattern=s.metric_pattern, settings=settings_plan)
    return Checked(req, env_defaults, executor)


def resolve_ends(pair: EnvPair, hold: tuple[str, ...], settings: Settings, options: EnvOptions):
    """The good and the bad environment (``sources.Resolved``) of ``--good-env``/``--bad-env``: a
    date resolved against the index with the held packages at the base's version, a file read
    from a commit of the current folder's repository, this environment when no bad one is given
    (less, in layered venvs, what only it has: the base every trial sees anyway)."""
    from dsbisect.envdiff import sources
    from dsbisect.envs.base import inspect_base
    from dsbisect.envs.cache import CachePaths
    from dsbisect.envs.uv import Uv

    now = datetime.now(timezone.utc)
    good_spec, bad_spec = sources.specs(*pair.paths(), now)
    base = inspect_base(options.python)
    with tempfile.TemporaryDirectory(prefix="dsbisect-resolve-") as tmp:
        cache = CachePaths(settings.venvs.root()).uv_cache
        uv = Uv(cache if cache.is_dir() else Path(tmp) / "uv", settings.sources.resolve())
        how = sources.Resolving(uv, base.python, sources.held_pins(hold, base), Path.cwd(), now)
        good, bad = (sources.resolve_env(x, how) for x in (good_spec, bad_spec))
    if bad_spec.origin is sources.Origin.CURRENT and _layered(options, base):
        bad = sources.without_base_only(bad, good.environment)
    return good, bad


def _layered(options: EnvOptions, base) -> bool:
    if options.base is not BaseMode.AUTO:
        return options.base is BaseMode.LAYERED
    return base.version_of("torch") is not None


def bisect_envs(request: BisectRequest, invocation: Invocation, settings: Settings, frontend: Frontend) -> Bisected:
    """`bisect --good-env A --bad-env B`: which change(s) break the case, then their release and commit."""
    from dsbisect.envdiff.engine import EnvBisection
    from dsbisect.envdiff.trialcase import plan_trials

    checked = env_request(request, invocation, settings)
    req = checked.request
    index, env_options = settings.sources.resolve(), settings.venvs.options(checked.env_defaults)
    planned = plan_trials(req, index, env_options, settings.venvs.root())  # nothing created before this
    ui, runner, req = open_bisection(request, checked, settings, frontend, env_options, index)
    for note in planned.notes:
        frontend.say(f"note: {note}")
    with ui.running():
        return Bisected(EnvBisection(runner, index, req, planned).run(), index)
