"""An environment bisection before anything runs: the request, what it resolves to, and uv's
answer for a set of exact pins against the base.

``plan_envs`` checks a request without touching the store or creating the cache (one line,
exit 2, on bad input): the environments differ, the held packages are in the base, both
environments resolve here.  ``Resolver`` is a uv dry run in a scratch venv of the base's stubs
(what a layered point venv resolves against); ``named_in`` reads which packages uv's error names.
"""

from __future__ import annotations

import re
import tempfile
import threading
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dsbisect.envs import base as base_env
from dsbisect.envs import gitrepo
from dsbisect.envs.cache import CachePaths
from dsbisect.envdiff.environments import Change, Environment, Kind, apply, diff
from dsbisect.core.errors import EnvBuildError, InputError
from dsbisect.core.files import read_small_text
from dsbisect.core.metric import MetricSpec
from dsbisect.core.mode import Mode
from dsbisect.core.model import BaseMode, Case, EnvOptions, IndexOptions, RegressOn, digest
from dsbisect.records.bisections import AskedFor
from dsbisect.records.results import Request
from dsbisect.envs.uv import Uv

if typing.TYPE_CHECKING:
    from dsbisect.envdiff.settingsplan import SettingsPlan

ALWAYS_HELD = ("dsbisect",)  # in a freeze of the env dsbisect runs in; the tool, not the job: the base's
ENV_PACKAGE = "environment"  # what the store's bisection row names as the package of a level-1 search
_WOULD = re.compile(r"^\s*\+\s+(\S+)==(\S+)\s*$")


@dataclass(frozen=True)
class EnvRequest:
    good_env: Environment
    bad_env: Environment
    case: Case
    hold: tuple[str, ...] = ()  # names kept at the base's version (torch): not changes, not installed
    regress_on: RegressOn = RegressOn.AUTO
    mode: Mode = Mode.REGRESSION
    repeat: int = 1
    signature: str | None = None
    git_repo: Path | None = None
    verify_commit_ends: bool = True
    confirm: int = 1
    width: int = 1
    any_failure: bool = False  # as bisect's: every failure of the rule's kind counts, not only the bad end's own
    prove: bool = True  # as bisect's: the revert proof after level 3
    argv: tuple[str, ...] = ()  # the command line, for `dsbisect log`; not in the key
    freezes: tuple[str, str] = ("", "")  # the good and bad env resolved (a date, a commit, this env): kept beside the result
    source_notes: tuple[str, ...] = ()  # how they were resolved, for the report's notes
    metric: MetricSpec | None = None  # --metric/--worse-if: trials called by their number (envdiff.numbers)
    metric_pattern: str | None = None
    settings: SettingsPlan | None = None  # configs, variables, flags that differ too (envdiff.settingsplan)

    @property
    def key(self) -> str:
        return digest({
            "envbisect": 1, "good": sorted(p.requirement for p in self.good_env.pins),
            "bad": sorted(p.requirement for p in self.bad_env.pins), "case": self.case.key,
            "hold": sorted(canonicalize_name(h) for h in self.hold), "regress_on": self.regress_on.value,
            "find_fix": self.mode.find_fix, "repeat": self.repeat, "signature": self.signature,
            "git": str(self.git_repo) if self.git_repo else None,
            **({"any_failure": True} if self.any_failure else {}),
            **({"metric": self.metric.describe(), "pattern": self.metric_pattern} if self.metric else {}),
            **({"settings": self.settings.key_fields()} if self.settings else {}),
        })

    def asked(self, cwd: str) -> AskedFor:
        """What the store keeps of the request (``params``); ``cwd``: where it runs."""
        return AskedFor(self.case.name, self.regress_on, self.mode, self.repeat, self.signature, hold=self.hold,
                        argv=self.argv, cwd=cwd if self.argv else None)

    def trial_request(self) -> Request:
        """The request level 1 runs its trials under (verdicts, repeats, signature as ``bisect``'s)."""
        return Request(package=ENV_PACKAGE, good=self.good_env.source, bad=self.bad_env.source, case=self.case,
                       regress_on=self.regress_on, mode=self.mode, repeat=self.repeat,
                       signature=self.signature, width=self.width, argv=self.argv, any_failure=self.any_failure,
                       metric=self.metric, metric_pattern=self.metric_pattern)


@dataclass(frozen=True)
class EnvPlan:
    """What a request resolves to before anything runs (``plan_envs``)."""

    changes: tuple[Change, ...]
    hold: tuple[str, ...]  # requirement strings of the held packages, at the base's version
    notes: tuple[str, ...]  # what the trials cost beyond the base, what cannot be removed
    repo: Path | None
    held_names: tuple[str, ...] = ()  # canonical names of the held packages (--hold, and dsbisect itself)


# ---------------------------------------------------------------------- planning


def plan_envs(req: EnvRequest, index: IndexOptions, options: EnvOptions, cache_dir: Path) -> EnvPlan:
    """Check a request without touching the store or creating the cache (InputError, exit 2):
    the environments differ, the held packages are in the base, the clone exists, and both
    environments resolve here (uv's dry run, against the base)."""
    changes = changes_of(req.good_env, req.bad_env)
    repo = gitrepo.check_repo(req.git_repo) if req.git_repo else None
    base = base_env.inspect_base(options.python)
    holding = hold_against(req.good_env, req.bad_env, changes, req.hold, base.version_of, base.python)
    moving, held, names, tool = holding.moving, holding.held, holding.names, holding.tool
    uv_cache = CachePaths(cache_dir).uv_cache
    with tempfile.TemporaryDirectory(prefix="dsbisect-plan-") as tmp:
        cache = uv_cache if uv_cache.is_dir() else Path(tmp) / "uv"
        with Resolver(Uv(cache, index), base, _layered(options, base)) as resolver:
            for env, word in ((req.good_env, "good"), (req.bad_env, "bad")):
                problem = resolver.check(requirements(env, (), held, names))
                if problem:
                    raise InputError(f"the {word} environment ({env.source}) cannot be installed here: {problem}"
                                     + _hold_hint(problem, env, base))
    notes = tuple(f"{n} is the tool, not the job: kept at the base's version in every trial" for n in tool)
    return EnvPlan(moving, held, notes + costs(moving, req, base, _layered(options, base), names), repo, names)


@dataclass(frozen=True)
class Holding:
    """What a base keeps of two environments: the held packages and the changes left to bisect."""

    moving: tuple[Change, ...]  # the changes a bisection applies (none of a held package)
    held: tuple[str, ...]       # requirement strings of the held packages, at the base's version
    names: tuple[str, ...]      # their canonical names (--hold, and dsbisect itself)
    tool: tuple[str, ...]       # those held because they are the tool, not the job


def changes_of(good: Environment, bad: Environment) -> tuple[Change, ...]:
    """``diff``, or an InputError when the two are the same pins."""
    changes = diff(good, bad)
    if not changes:
        raise InputError(f"{good.source} and {bad.source}: no difference (the same pins)")
    return changes


def hold_against(good: Environment, bad: Environment, changes: Sequence[Change], hold: Sequence[str],
                 version_of: Callable[[str], str | None], where: str) -> Holding:
    """What a base (``version_of`` its distributions; ``where``: its python, for errors) holds:
    ``hold`` and dsbisect itself where the base has it; InputError for a held name the base
    lacks, or when nothing but held packages changed."""
    tool = tuple(n for n in ALWAYS_HELD if version_of(n) and (good.get(n) or bad.get(n)))
    names = tuple(dict.fromkeys(canonicalize_name(h) for h in (*hold, *tool)))
    held = _held(names, version_of, where)
    moving = tuple(c for c in changes if canonicalize_name(c.name) not in names)
    if not moving:
        raise InputError(f"the only changes are of held packages ({', '.join(names)}): nothing to bisect")
    return Holding(moving, held, names, tool)


def _hold_hint(problem: str, env: Environment, base: base_env.Base) -> str:
    """``; --hold torch keeps the base's torch 2.13.0`` where uv's error names a package the base
    provides at another version (a CUDA torch of another build, say)."""
    names = [p.name for p in env.pins if base.version_of(p.name) not in (None, p.version)]
    found = sorted(named_in(problem, names))
    return "".join(f"; --hold {n} keeps the base's {n} {base.version_of(n)}" for n in found)


def _held(hold: Sequence[str], version_of: Callable[[str], str | None], where: str) -> tuple[str, ...]:
    out = []
    for name in hold:
        version = version_of(name)
        if version is None:
            raise InputError(f"--hold {name}: the base environment ({where}) has no {name} to keep")
        out.append(f"{canonicalize_name(name)}=={version}")
    return tuple(out)


def _layered(options: EnvOptions, base: base_env.Base) -> bool:
    if options.base is not BaseMode.AUTO:
        return options.base is BaseMode.LAYERED
    return base.version_of("torch") is not None


def requirements(env: Environment, changes: Iterable[Change], held: Sequence[str], hold: Sequence[str]) -> tuple[str, ...]:
    """The exact pins of ``env`` with ``changes`` applied, the held packages at the base's version."""
    names = {canonicalize_name(h) for h in hold}
    kept = tuple(r for r in apply(env, changes) if canonicalize_name(Requirement(r).name) not in names)
    return tuple(sorted(kept + tuple(held)))


def costs(changes: Sequence[Change], req: EnvRequest, base: base_env.Base, layered: bool,
           held: Sequence[str] = ()) -> tuple[str, ...]:
    """What the trials install beyond the base (a base package that differs: a copy in every
    venv), and the removals a layered venv cannot make (the base's copy stays importable)."""
    notes = [f"{env.source} was python {env.python}; the trials run python {base.version} ({base.python})"
             for env in (req.good_env, req.bad_env) if env.python and env.python.split(".")[:2] != base.version.split(".")[:2]]
    if not layered:
        return (*notes, "isolated venvs: every trial installs the whole environment (torch included) from the index")
    removed, copied = [], []
    for c in changes:
        have = base.version_of(c.name)
        if have is None:
            continue
        if c.kind is Kind.REMOVED:
            removed.append(f"{c.describe()}: the base has {c.name} {have}, which stays importable in every trial "
                           "(layered venvs): the removal cannot be tested as such")
        elif c.bad is not None and c.bad.version != have or c.good is not None and c.good.version != have:
            size = _installed_mb(base, c.name)
            cost = f" (~{size} MB in each venv that differs)" if size else ""
            copied.append((c, have, size, f"{c.describe()}: the base provides {c.name} {have}; trials install their "
                                          f"own{cost}; --hold {c.name} keeps the base's instead"))
    notes += removed if len(removed) <= GROUP else [
        f"{len(removed)} removed packages the base has stay importable in every trial (layered venvs): their removal "
        f"cannot be tested as such ({_some([c.split(':')[0].removeprefix('- ') for c in removed])})"]
    notes += [said for *_, said in copied] if len(copied) <= GROUP else [_copies(copied)]
    same = [p for p in req.good_env.pins if p.version and base.version_of(p.name) not in (None, p.version)
            and req.bad_env.get(p.name) == p and canonicalize_name(p.name) not in {*held, *map(canonicalize_name, req.hold)}]
    if same:
        notes.append(f"{len(same)} package(s) pinned alike in both environments differ from the base and are "
                     f"installed in every venv: " + ", ".join(f"{p.name} {p.version}" for p in same[:8])
                     + (" ..." if len(same) > 8 else ""))
    return tuple(notes)


GROUP = 2  # notes of one kind beyond which they are said as one


def _some(items: Sequence[str], n: int = 6) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _copies(copied: Sequence[tuple[Change, str, int, str]]) -> str:
    """The changes of packages the base provides at another version, as one note: what a trial
    installs over the base, and how to keep the base's."""
    mb = sum(size for _, _, size, _ in copied)
    largest = sorted(copied, key=lambda x: -x[2])[0][0].name
    return (f"the base provides {len(copied)} of the changed packages at other versions "
            f"({_some([f'{c.name} {have}' for c, have, _, _ in copied])}): trials install their own"
            + (f" (~{mb} MB in each venv that differs in all of them)" if mb else "")
            + f"; --hold NAME keeps the base's (e.g. --hold {largest})")


def _installed_mb(base: base_env.Base, name: str) -> int:
    """The size of a base distribution's files (its RECORD), in MB; 0 when unknown."""
    for n, _, info in base.dists:
        if canonicalize_name(n) == canonicalize_name(name):
            try:
                rows = read_small_text(Path(info) / "RECORD", errors="replace").splitlines()
            except OSError:
                return 0
            total = sum(int(r.rsplit(",", 1)[1]) for r in rows if r.rsplit(",", 1)[-1].isdigit())
            return total >> 20
    return 0


# ---------------------------------------------------------------------- resolving


class Resolver:
    """uv's answer for a set of requirements against the base, without installing: a dry run in
    a scratch venv holding stubs of the base's distributions (as point venvs do when layered)."""

    def __init__(self, uv: Uv, base: base_env.Base, layered: bool):
        self.uv, self.base, self.layered = uv, base, layered
        self._tmp = tempfile.TemporaryDirectory(prefix="dsbisect-resolve-")
        self._venv: Path | None = None
        self._lock = threading.Lock()  # dry runs go in parallel; the scratch venv is made once

    def __enter__(self) -> Resolver:
        return self

    def __exit__(self, *exc) -> None:
        self._tmp.cleanup()

    def _scratch(self) -> Path:
        with self._lock:
            if self._venv is None:
                venv = Path(self._tmp.name) / "venv"
                self.uv.venv(venv, self.base.python)
                if self.layered:
                    base_env.write_stubs(base_env.site_packages(venv), self.base.metadata())
                self._venv = venv
            return self._venv

    def check(self, reqs: Sequence[str]) -> str | None:
        """None when uv can satisfy ``reqs``; else uv's reason, on one line (a scratch venv
        that cannot be made is an EnvBuildError: no answer is not an answer)."""
        self._scratch()
        try:
            self.plan(reqs)
        except EnvBuildError as e:
            return str(e)
        return None

    def plan(self, reqs: Sequence[str]) -> tuple[tuple[str, str], ...]:
        """What uv would install for ``reqs`` ((name, version) each); EnvBuildError if it cannot."""
        named = {canonicalize_name(Requirement(r).name) for r in reqs}
        torch = self.base.version_of("torch")
        hold = [f"torch=={torch}"] if self.layered and torch and "torch" not in named else []
        out = self.uv.dry_run(self._scratch(), reqs, hold)
        return tuple((m.group(1), m.group(2)) for m in map(_WOULD.match, out.splitlines()) if m)


def named_in(reason: str, names: Iterable[str]) -> set[str]:
    """The canonical names among ``names`` that uv's error text mentions."""
    text = reason.lower().replace("_", "-")
    return {n for n in names if re.search(rf"(?<![\w.-]){re.escape(canonicalize_name(n))}(?![\w-])", text)}
