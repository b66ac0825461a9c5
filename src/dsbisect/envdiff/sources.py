"""Where an environment of ``bisect --good-env/--bad-env`` comes from, and the pins it resolves to.

An ENV is one of:

- ``FILE`` / ``VENV`` / ``PYTHON``: read as it is (``environments.read_environment``);
- ``SPEC@DATE``: ``SPEC`` (a requirements file of loose constraints, a ``pyproject.toml``, or
  requirement strings: ``'deepspeed transformers>=4.40'``) resolved as it would have been on
  ``DATE`` (``uv pip compile --exclude-newer``): ``YYYY-MM-DD`` means everything uploaded by the
  end of that day (UTC), an RFC 3339 time that instant, ``today`` now;
- ``git:REV:PATH``: ``PATH`` as it was in commit ``REV`` of the repository of the current folder
  (a freeze, a requirements file of pins, a ``uv.lock`` or ``pylock.toml``, read as a file is);
  ``git:REV:PATH@DATE`` resolves that file on ``DATE``;
- the environment dsbisect runs in (``--python``'s), the bad end when only ``--good-env`` is given.

``resolve_env`` gives the ``Environment`` and its freeze (one ``name==version`` a line), which
the caller writes beside the result so that the run can be repeated from files.  Bad input
(a malformed or future date, a requirement nothing released by then satisfies, a ref or path
not in the repository, a wheelhouse asked for a date) is an ``InputError``; nothing is created
but a temporary folder.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from dsbisect.core import proc
from dsbisect.core.errors import EnvBuildError, InputError
from dsbisect.core.model import IndexOptions
from dsbisect.core.files import read_small_text
from dsbisect.envdiff.environments import Environment, read_environment
from dsbisect.envs import gitrepo
from dsbisect.envs.base import Base
from dsbisect.envs.uv import Uv

CURRENT = "current"  # what the report calls the environment dsbisect runs in, as the bad end
_WHEN = re.compile(r"^(today|now|\d{4}-\d{2}-\d{2}([Tt ][0-9:.]+([Zz]|[+-]\d{2}:?\d{2})?)?)$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class Origin(enum.Enum):
    FILE = "file"        # read as it is
    DATED = "dated"      # resolved on a date
    GIT = "git"          # a file as it was in a commit
    CURRENT = "current"  # the environment dsbisect runs in


@dataclass(frozen=True)
class EnvSpec:
    """One ``--good-env``/``--bad-env`` as given, parsed."""

    text: str
    origin: Origin
    path: str = ""                 # the file (or, in a commit, its path); "" for requirement strings
    words: tuple[str, ...] = ()    # requirement strings given in place of a file
    rev: str | None = None         # git:REV:PATH
    when: datetime | None = None   # the cutoff: packages uploaded after it do not exist (UTC)

    @property
    def dated(self) -> bool:
        return self.when is not None


@dataclass(frozen=True)
class Resolved:
    """An environment and the freeze of it to write beside the result ("" when read from a file as it is)."""

    spec: EnvSpec
    environment: Environment
    freeze: str = ""
    notes: tuple[str, ...] = ()  # what a report should say of how it was made


def parse_spec(text: str, now: datetime) -> EnvSpec:
    """``text`` as an ENV (see the module); ``now`` decides ``today`` and what is in the future."""
    raw = text.strip()
    if not raw:
        raise InputError("--good-env/--bad-env: empty")
    head, when = raw, None
    if "@" in raw and not Path(raw).exists():
        head, tail = raw.rsplit("@", 1)
        if _WHEN.match(tail.strip()) or re.match(r"^\d", tail.strip()):
            when = parse_when(raw, tail.strip(), now)
            head = head.strip()
        else:
            head = raw
    if head.startswith("git:"):
        rev, sep, path = head[4:].partition(":")
        if not sep or not rev or not path:
            raise InputError(f"{raw}: give git:REV:PATH, e.g. git:HEAD~20:uv.lock")
        return EnvSpec(raw, Origin.GIT, path=path, rev=rev, when=when)
    if when is None:
        return EnvSpec(raw, Origin.FILE, path=head)
    if Path(head).exists():
        return EnvSpec(raw, Origin.DATED, path=head, when=when)
    return EnvSpec(raw, Origin.DATED, words=_requirement_words(raw, head), when=when)


def parse_when(spec: str, when: str, now: datetime) -> datetime:
    """The cutoff of ``@when``: the end of a ``YYYY-MM-DD`` (UTC), an RFC 3339 instant, or ``now``."""
    if when in ("today", "now"):
        return now
    try:
        if _DAY.match(when):
            cutoff = datetime.fromisoformat(when).replace(tzinfo=timezone.utc) + timedelta(days=1)
        else:
            cutoff = datetime.fromisoformat(when.replace("z", "Z").replace("Z", "+00:00"))
            cutoff = cutoff if cutoff.tzinfo else cutoff.replace(tzinfo=timezone.utc)
    except ValueError:
        raise InputError(f"{spec}: {when!r} is not a date (YYYY-MM-DD, an RFC 3339 time, or today)") from None
    if cutoff - (timedelta(days=1) if _DAY.match(when) else timedelta(0)) > now:
        raise InputError(f"{spec}: {when} is in the future (today is {now:%Y-%m-%d}): nothing was released then yet")
    return min(cutoff, now)


def _requirement_words(spec: str, head: str) -> tuple[str, ...]:
    words = tuple(w for w in re.split(r"[\s,]+(?![<>=!~])", head) if w)
    for w in words:
        try:
            req = Requirement(w)
        except InvalidRequirement:
            raise InputError(f"{spec}: {head} is neither a file nor requirement strings ({w!r} is not one)") from None
        if req.url:
            raise InputError(f"{spec}: {w} is a direct reference: a date cannot choose its version")
    return words


# ---------------------------------------------------------------------- resolving


@dataclass(frozen=True)
class Resolving:
    """What resolving a dated ENV needs: uv (its cache and index options), the interpreter the
    trials run, the held packages (``name==version`` at the base's: not moved by the date), and
    the repository ``git:`` reads."""

    uv: Uv
    python: str
    held: tuple[str, ...] = ()
    repo: Path = Path(".")
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def resolve_env(spec: EnvSpec, how: Resolving) -> Resolved:
    """The environment ``spec`` names, with its freeze (InputError on bad input)."""
    if spec.origin is Origin.FILE:
        return Resolved(spec, read_environment(Path(spec.path)))
    if spec.origin is Origin.CURRENT:
        env = read_environment(Path(how.python))
        return Resolved(spec, dataclasses.replace(env, source=spec.text), freeze_of(env))
    with tempfile.TemporaryDirectory(prefix="dsbisect-env-") as tmp:
        src = Path(spec.path) if spec.path and spec.origin is Origin.DATED else None
        if spec.origin is Origin.GIT:
            src = _from_git(spec, how.repo, Path(tmp))
        if spec.words:
            src = Path(tmp) / "requirements.in"
            src.write_text("\n".join(spec.words) + "\n")
        if spec.dated:
            src = _compile(spec, src, how, Path(tmp))
        env = read_environment(src)
    return Resolved(spec, dataclasses.replace(env, source=spec.text), freeze_of(env))


def freeze_of(env: Environment) -> str:
    """``env`` as a requirements file of its pins, one a line, sorted (what ``read_environment`` reads back)."""
    return "".join(p.requirement + "\n" for p in env.pins)


def _from_git(spec: EnvSpec, repo: Path, tmp: Path) -> Path:
    """``PATH`` as it was in ``REV``, written under ``tmp`` with its own name (a lock is told by it)."""
    if not gitrepo.git(repo, "rev-parse", "--git-dir").ok:
        raise InputError(f"{spec.text}: {repo.resolve()} is not in a git repository")
    try:
        commit = gitrepo.resolve(repo, spec.rev or "")
    except InputError as e:
        raise InputError(f"{spec.text}: {e}") from None
    rel = spec.path if spec.path.startswith(("./", "/")) else "./" + spec.path
    done = gitrepo.git(repo, "show", f"{commit}:{rel.lstrip('/')}", keep=proc.DATA)
    if not done.ok:
        raise InputError(f"{spec.text}: {spec.path} is not in commit {spec.rev} ({commit[:10]})")
    out = tmp / "git" / Path(spec.path).name
    out.parent.mkdir()
    out.write_text(done.stdout)
    return out


def _compile(spec: EnvSpec, src: Path, how: Resolving, tmp: Path) -> Path:
    """``src`` resolved as of ``spec.when`` by ``uv pip compile --exclude-newer``, as a freeze."""
    index = how.uv.index
    if index.offline or (index.find_links and not index.index_url and not index.extra_index_urls):
        raise InputError(f"{spec.text}: a wheelhouse (--find-links) cannot answer a date: its files carry no "
                         "upload times; resolve it where the index is reachable, or give a freeze")
    out = tmp / "resolved.txt"
    cutoff = spec.when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = ["pip", "compile", str(src), "-o", str(out), "--quiet", "--no-header", "--no-annotate",
            "--python", how.python, "--exclude-newer", cutoff, *index.uv_args()]
    if how.held:
        constraints = tmp / "held.txt"
        constraints.write_text("\n".join(how.held) + "\n")
        args += ["--constraint", str(constraints)]
        now = how.now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        args += [a for h in how.held for a in ("--exclude-newer-package", f"{Requirement(h).name}={now}")]
        # (a held package and what it requires: constraints at the base's versions, exempt from the date)
    try:
        how.uv.run(args)
    except EnvBuildError as e:
        raise InputError(f"{spec.text}: nothing resolves as of {cutoff}: {e}") from None
    return out


def specs(good: str, bad: str | None, now: datetime) -> tuple[EnvSpec, EnvSpec]:
    """The two ENVs as given; the bad one defaults to the environment dsbisect runs in."""
    return parse_spec(good, now), (parse_spec(bad, now) if bad else EnvSpec(CURRENT, Origin.CURRENT))


def held_pins(names: Sequence[str], base: Base) -> tuple[str, ...]:
    """``name==version`` at the base's version of each held name and of everything it requires
    there (torch held holds the sympy and typing-extensions it runs with: a date before them
    would otherwise have no resolution); names the base lacks are refused later, by the plan."""
    versions = {canonicalize_name(n): v for n, v, _ in base.dists}
    infos = {canonicalize_name(n): Path(info) for n, _, info in base.dists}
    todo, seen = [canonicalize_name(n) for n in names if canonicalize_name(n) in versions], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [d for d in _requires(infos[name]) if d in versions and d not in seen]
    return tuple(f"{n}=={versions[n]}" for n in sorted(seen))


def _requires(info: Path) -> list[str]:
    """The names a dist-info's METADATA requires here (markers evaluated, extras left out)."""
    try:
        text = read_small_text(info / "METADATA", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.split("\n\n", 1)[0].splitlines():
        if line.startswith("Requires-Dist:"):
            try:
                req = Requirement(line.split(":", 1)[1].strip())
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                out.append(canonicalize_name(req.name))
    return out


def without_base_only(bad: Resolved, good: Environment) -> Resolved:
    """This environment as the bad end, less the packages the good one does not have: every
    layered trial sees them (the base), so they are no change a trial could make (a note says so)."""
    env = bad.environment
    names = {p.name for p in good.pins}
    kept = tuple(p for p in env.pins if p.name in names)
    dropped = len(env.pins) - len(kept)
    if not dropped:
        return bad
    note = (f"{dropped} package(s) only {env.source} has are in the base every trial is layered on: importable in "
            "every trial, so not changes to bisect (their versions are in the freeze beside the result)")
    return dataclasses.replace(bad, environment=dataclasses.replace(env, pins=kept), notes=(*bad.notes, note))


def resolve_given(good: str, bad: str, index: IndexOptions, python: str | None = None,
                  hold: Sequence[str] = ()) -> tuple[Resolved, Resolved]:
    """Two ENVs as ``diff`` and ``prefetch`` take them (every form ``bisect --good-env`` takes):
    files read as they are; a date resolved against ``index`` (uv's cache in a temporary folder,
    nothing else created); a ``git:`` file read from the current folder's repository."""
    from dsbisect.envs.base import inspect_base

    now = datetime.now(timezone.utc)
    good_spec, bad_spec = parse_spec(good, now), parse_spec(bad, now)
    if good_spec.origin is bad_spec.origin is Origin.FILE:  # nothing to resolve: no interpreter asked
        return Resolved(good_spec, read_environment(Path(good))), Resolved(bad_spec, read_environment(Path(bad)))
    base = inspect_base(python)
    with tempfile.TemporaryDirectory(prefix="dsbisect-resolve-") as tmp:
        how = Resolving(Uv(Path(tmp) / "uv", index), base.python, held_pins(hold, base), Path.cwd(), now)
        return resolve_env(good_spec, how), resolve_env(bad_spec, how)
