"""``dsbisect prefetch``: what a wheelhouse for an offline machine must hold, checked, then fetched.

A request names the matrix's cases (at their own versions or others), or two environments (what
``bisect --good-env/--bad-env`` installs), dsbisect's own dependencies, extra requirements and a
range of commits to build; the target's Python, platform and base (a ``snapshot-base`` file).
Everything is checked before anything is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dsbisect.core.errors import InputError
from dsbisect.core.model import EnvOptions, IndexOptions, Point
from dsbisect.run import matrix
from dsbisect.run.session import cache_root
from dsbisect.run.settings import Sources

if TYPE_CHECKING:
    from dsbisect.envdiff.environments import Environment
    from dsbisect.offline.prefetch import EnvFetch, Prefetcher, Target


@dataclass(frozen=True)
class PrefetchRequest:
    """What ``dsbisect prefetch`` fetches into ``dest`` (see the module)."""

    matrix: Path | None = None
    dest: Path = Path("wheelhouse")
    case: Sequence[str] | None = None
    versions: Sequence[str] | None = None
    with_candidates: bool = False
    python_version: str | None = None
    platform_tag: Sequence[str] | None = None
    base_snapshot: Path | None = None
    tool: bool = False
    cases_too: bool = True
    extra: Sequence[str] | None = None
    git_repo: Path | None = None
    commits: str | None = None
    package: str = "deepspeed"
    good_env: str | None = None  # any ENV bisect takes (a file, SPEC@DATE, git:REV:PATH)
    bad_env: str | None = None
    hold: Sequence[str] | None = None


@dataclass(frozen=True)
class Fetched:
    """What a prefetch added to the wheelhouse (file names), the wheelhouse, and its size in bytes."""

    added: tuple[str, ...]
    dest: Path
    size: int


@dataclass(frozen=True)
class Plan:
    """A prefetch checked: the points to fetch, the two environments' fetch, the extra
    requirements, the clone, the target, the venv options and the index."""

    points: tuple[Point, ...]
    envs: tuple[Environment, Environment] | None
    fetch: EnvFetch | None
    extras: tuple[str, ...]
    repo: Path | None
    target: Target
    env_options: EnvOptions
    index: IndexOptions


def environments(request: PrefetchRequest, index: IndexOptions) -> tuple[Environment, Environment] | None:
    """The two environments of ``--good-env/--bad-env``, read (or resolved, as bisect's: a date
    against ``index``, a file from a commit); None without them."""
    from dsbisect.envdiff.sources import resolve_given

    good, bad, hold = request.good_env, request.bad_env, request.hold
    if good is None or bad is None:
        if good or bad:
            raise InputError("give both --good-env and --bad-env")
        if hold:
            raise InputError("--hold needs --good-env and --bad-env")
        return None
    good_env, bad_env = resolve_given(str(good), str(bad), index)
    return good_env.environment, bad_env.environment


def matrix_of(request: PrefetchRequest, cases_too: bool) -> matrix.Matrix | None:
    """The matrix prefetch reads: the one named, else matrix.yaml; with --no-cases (only --tool,
    --extra, --commits), matrix.yaml only for its settings, and only when there."""
    if request.matrix is None and not cases_too and not Path("matrix.yaml").is_file():
        return None
    return matrix.load(request.matrix or Path("matrix.yaml"))


def _cases(request: PrefetchRequest, m: matrix.Matrix | None, cases_too: bool) -> list:
    cases = m.select(list(request.case) if request.case else None) if m is not None else []
    if request.versions:
        if not cases_too:
            raise InputError("--versions changes the cases' points: it cannot go with --no-cases")
        cases = matrix.narrowed(cases, list(request.versions), [])
    return cases


def _check_places(request: PrefetchRequest, sources: Sources) -> None:
    if sources.offline:
        raise InputError("prefetch downloads what --offline runs need: it cannot run --offline itself")
    dest = request.dest
    there = next((p for p in (dest, *dest.absolute().parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise InputError(f"--dest {dest}: {there} is a file, not a folder")


def _repo(request: PrefetchRequest) -> Path | None:
    from dsbisect.envs import gitrepo

    git_repo, commits = request.git_repo, request.commits
    if (git_repo or commits) and not (git_repo and commits and ".." in commits):
        raise InputError("--git-repo and --commits OLD..NEW go together")
    return gitrepo.check_repo(git_repo) if git_repo else None


def plan(request: PrefetchRequest, sources: Sources) -> Plan:
    """``request`` checked, in the order a user reads the errors; nothing downloaded."""
    from dsbisect.offline.prefetch import Target, commit_ends, env_fetch, env_holding, load_snapshot, points_to_fetch

    if not request.cases_too and request.case:
        raise InputError("--case names cases to fetch: it cannot go with --no-cases")
    _check_places(request, sources)  # --offline first: a date would need the index it refuses
    envs = environments(request, sources.resolve())
    cases_too = request.cases_too and (bool(request.case) or envs is None)  # an env bisection runs no axis point
    m = matrix_of(request, cases_too)
    cases = _cases(request, m, cases_too)
    index = sources.resolve()
    extras = matrix.check_pins(list(request.extra or []), flag="--extra")
    repo = _repo(request)
    if repo is not None:
        commit_ends(repo, request.commits or "")  # both ends are commits of the clone: checked, then created
    snapshot = load_snapshot(request.base_snapshot) if request.base_snapshot else None
    target = Target(request.python_version, tuple(request.platform_tag or ()), snapshot)
    points = points_to_fetch(cases, index, request.with_candidates) if cases_too else []
    env_options = m.env if m is not None else EnvOptions()
    fetch = None
    if envs is not None:
        holding = env_holding(*envs, tuple(dict.fromkeys(request.hold or ())), target, env_options.python)
        fetch = env_fetch(*envs, holding, index, request.with_candidates)
    return Plan(tuple(points), envs, fetch, extras, repo, target, env_options, index)


def prefetch(request: PrefetchRequest, cache_dir: Path | None, sources: Sources,
             say: Callable[[str], None]) -> Fetched:
    """Fetch (and build) into ``request.dest`` everything ``request`` names, saying each step."""
    from dsbisect.envs.venvs import EnvManager
    from dsbisect.offline.prefetch import Prefetcher, commit_ends

    planned = plan(request, sources)
    for note in planned.index.notes:
        say(f"note: {note}")
    indented = lambda s: say(f"  {s}")  # noqa: E731
    mgr = EnvManager(cache_root(cache_dir), planned.env_options, planned.index, log=indented)
    pf = Prefetcher(mgr, request.dest, planned.target, log=indented)
    try:
        fill(pf, planned, request.tool, say)
        if planned.repo is not None and request.commits:
            pf.commits(planned.repo, request.package, *commit_ends(planned.repo, request.commits))
    finally:
        pf.close()
    return Fetched(tuple(pf.added), pf.dest, pf.size())


def fill(pf: Prefetcher, planned: Plan, tool: bool, say: Callable[[str], None]) -> None:
    """Fetch into ``pf``'s wheelhouse what the points, the two environments, dsbisect itself
    (``tool``) and the ``--extra`` requirements need."""
    for p in planned.points:
        say(f"{p.label}")
        pf.point(p)
    if planned.fetch is not None and planned.envs is not None:
        say(f"{planned.envs[0].source} -> {planned.envs[1].source}")
        for label in pf.environments(planned.fetch):
            say(f"  {label}: uv cannot install it in either environment's pins: not fetched")
    if tool:
        pf.tool()
    if planned.extras:
        pf.requirements(planned.extras)
