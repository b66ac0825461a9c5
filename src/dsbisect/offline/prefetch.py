"""Offline wheelhouses: everything a matrix's points need, for machines with no network.

GPU clusters usually have no internet on their compute nodes and torch preinstalled.
``dsbisect snapshot-base`` on a compute node writes what its environment holds (every
distribution's METADATA); ``dsbisect prefetch`` on a machine with a network resolves each
point against that snapshot, as the layered venv on the compute node will, and downloads
exactly what is missing there, for the target's Python and platform.  Sdists whose
setup.py imports torch (DeepSpeed) are built into wheels here; so are the commits of a
``--git-repo`` range (into ``<dest>/commits/<hash>/``).  ``--offline --find-links DEST``
then works on the compute node.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from dsbisect.envs import gitrepo
from dsbisect.core import proc
from dsbisect.envs.base import inspect_base, site_packages, write_stubs
from dsbisect.envdiff.environments import Environment, Kind
from dsbisect.envdiff.plan import Holding, changes_of, hold_against, requirements
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import EnvBuildError, InputError
from dsbisect.core.files import DATA_LIMIT, read_small
from dsbisect.envs.indexes import pip_child_env
from dsbisect.core.model import Case, GitSource, IndexOptions, Point
from dsbisect.envs.versions import candidates, exact_version, file_is, releases

_WOULD = re.compile(r"^\s*\+\s+(\S+)==(\S+)\s*$")


# ------------------------------------------------------------------- snapshots


def snapshot(python: str | None) -> dict:
    """What a base environment holds, for resolving against it elsewhere."""
    base = inspect_base(python)
    return {
        "format": 1,
        "python": base.python,
        "python_version": base.version,
        "platform": sysconfig.get_platform(),
        "libc": "-".join(platform.libc_ver()),
        "dists": [{"name": n, "version": v, "metadata": f["METADATA"]} for n, v, f in base.metadata()],
    }


def load_snapshot(path: Path) -> dict:
    try:
        data = json.loads(read_small(path, DATA_LIMIT))
    except OSError as e:
        raise InputError(f"--base-snapshot {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # not JSON, not UTF-8
        raise InputError(f"--base-snapshot {path}: cannot read it ({e})") from None
    if not isinstance(data, dict) or data.get("format") != 1 or "dists" not in data:
        raise InputError(f"--base-snapshot {path}: not a dsbisect base snapshot")
    return data


# ---------------------------------------------------------------------- target


@dataclass(frozen=True)
class Target:
    python_version: str | None = None  # e.g. "3.12"
    platforms: tuple[str, ...] = ()    # pip platform tags, e.g. manylinux_2_17_x86_64
    snapshot: dict | None = None

    def uv_args(self) -> list[str]:
        args = []
        if self.python_version:
            args += ["--python-version", self.python_version]
        if self.platforms:
            args += ["--python-platform", _uv_platform(self.platforms[0])]
        return args

    def pip_args(self) -> list[str]:
        if not (self.python_version or self.platforms):
            return []
        args = ["--only-binary=:all:", "--implementation", "cp"]
        if self.python_version:
            args += ["--python-version", self.python_version]
        for p in compatible_platforms(self.platforms):
            args += ["--platform", p]
        return args


_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def compatible_platforms(tags: tuple[str, ...]) -> list[str]:
    """Every platform tag a machine of ``tags`` also runs, as pip wants them listed: a
    manylinux_2_28 machine runs manylinux_2_27 ... manylinux_2_5 wheels, and the legacy names
    (manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5) too."""
    out: list[str] = []
    for tag in tags:
        m = re.match(r"manylinux_2_(\d+)_(\w+)$", tag)
        if not m:
            out.append(tag)
            continue
        glibc, arch = int(m.group(1)), m.group(2)
        for minor in range(glibc, 4, -1):
            out.append(f"manylinux_2_{minor}_{arch}")
            if minor in _LEGACY:
                out.append(f"{_LEGACY[minor]}_{arch}")
    return list(dict.fromkeys(out))


def _uv_platform(tag: str) -> str:
    m = re.match(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        return f"{m.group(3)}-manylinux_{m.group(1)}_{m.group(2)}"
    if tag.startswith("manylinux2014_"):
        return tag.split("_", 1)[1] + "-manylinux_2_17"
    return "linux"


def commit_ends(repo: Path, commits: str) -> tuple[str, str]:
    """``--commits OLD..NEW`` checked against the clone (both ends are commits of it) before
    anything is created: an InputError naming the one that is not."""
    old, sep, new = commits.partition("..")
    if not sep or not old or not new:
        raise InputError(f"--commits {commits!r}: expected OLD..NEW (tags or hashes)")
    gitrepo.resolve(repo, old)
    gitrepo.resolve(repo, new)
    return old, new


@dataclass
class Prefetcher:
    mgr: EnvManager
    dest: Path
    target: Target = field(default_factory=Target)
    log: Callable[[str], None] = lambda msg: None
    added: list[str] = field(default_factory=list)
    _context: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.dest = Path(self.dest).resolve()
        self.dest.mkdir(parents=True, exist_ok=True)
        self._resolver: Path | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="dsbisect-prefetch-")

    # ---------------------------------------------------------------- points

    def point(self, point: Point) -> list[tuple[str, str]]:
        """Put into ``dest`` every distribution ``point`` needs beyond the target's base."""
        return self._fetch(list(point.requirements()))

    def _fetch(self, reqs: list[str]) -> list[tuple[str, str]]:
        """Every distribution ``reqs`` resolve to beyond the target's base (torch sdists built)."""
        torchy = {canonicalize_name(n) for n in self.mgr.options.build_with_torch}
        self._context = tuple(r for r in reqs if canonicalize_name(Requirement(r).name) not in torchy)
        for r in reqs:
            self._build_if_torch_sdist(Requirement(r))
        needed = self._resolve(reqs)
        for name, version in needed:
            if not self._have(name, version):
                self._download(name, version)
        return needed

    def _build_if_torch_sdist(self, req: Requirement) -> None:
        version = exact_version(req)
        built_with_torch = {canonicalize_name(n) for n in self.mgr.options.build_with_torch}
        if not version or canonicalize_name(req.name) not in built_with_torch or self._have(req.name, version):
            return
        self.log(f"building {req.name}=={version} into a wheel")
        folder = self.mgr.release_wheel(req.name, version, self._context)
        for w in folder.glob("*.whl"):
            if file_is(w.name, req.name, version):
                self._copy(w)

    def _resolve(self, reqs: list[str]) -> list[tuple[str, str]]:
        venv = self._resolution_venv()
        out = self.mgr.uv.dry_run(venv, reqs, self._hold(reqs),
                                  extra=[*self.target.uv_args(), "--find-links", str(self.dest)])
        return [(m.group(1), m.group(2)) for m in map(_WOULD.match, out.splitlines()) if m]

    def _hold(self, reqs: list[str]) -> list[str]:
        named = {canonicalize_name(Requirement(r).name) for r in reqs}
        torch = self._base_version("torch")
        return [f"torch=={torch}"] if torch and "torch" not in named else []

    def _base_version(self, name: str) -> str | None:
        if self.target.snapshot:
            return snapshot_version(self.target.snapshot, name)
        return self.mgr.base.version_of(name)

    def _resolution_venv(self) -> Path:
        """A venv holding stubs of the target's base, to resolve against (never run)."""
        if self._resolver is None:
            venv = Path(self._tmp.name) / "resolve"
            self.mgr.uv.venv(venv, sys.executable)
            if self.target.snapshot:
                items = ((d["name"], d["version"], d["metadata"]) for d in self.target.snapshot["dists"])
            else:
                items = self.mgr.base.metadata()
            write_stubs(site_packages(venv), items)
            self._resolver = venv
        return self._resolver

    # -------------------------------------------------------------- downloads

    def _have(self, name: str, version: str) -> bool:
        return any(file_is(f.name, name, version) for f in self.dest.iterdir())

    def _download(self, name: str, version: str) -> None:
        self.log(f"downloading {name}=={version}")
        pip = self._pip()
        base = [*pip, "download", "--no-deps", "--disable-pip-version-check", "-d", str(self.dest),
                *self.mgr.index.pip_args()]
        done = proc.run([*base, *self.target.pip_args(), f"{name}=={version}"], env=pip_child_env(proc.clean_env()))
        if done.ok:
            self._note_new(name, version)
            return
        # No wheel for the target: take the sdist and build it here (pure-Python packages).
        tmp = Path(self._tmp.name) / "sdists"
        done = proc.run([*pip, "download", "--no-deps", "--no-binary=:all:", "-d", str(tmp),
                         *self.mgr.index.pip_args(), f"{name}=={version}"], env=pip_child_env(proc.clean_env()))
        sdists = [f for f in tmp.glob("*") if file_is(f.name, name, version)] if tmp.is_dir() else []
        if not done.ok or not sdists:
            raise EnvBuildError(f"cannot download {name}=={version}: {done.last_line()[:300]}")
        done = proc.run([*pip, "wheel", "--no-deps", "-w", str(self.dest), str(sdists[0])], env=pip_child_env(proc.clean_env()))
        if not done.ok:
            raise EnvBuildError(f"cannot build a wheel of {name}=={version}: {done.last_line()[:300]}")
        self._note_new(name, version)

    def _pip(self) -> list[str]:
        builder = self.mgr.builder()
        return [str(builder / "bin" / "python"), "-m", "pip"]

    def _copy(self, path: Path) -> None:
        target = self.dest / path.name
        if not target.exists():
            shutil.copy2(path, target)
            self.added.append(path.name)

    def _note_new(self, name: str, version: str) -> None:
        for f in self.dest.iterdir():
            if file_is(f.name, name, version) and f.name not in self.added:
                self.added.append(f.name)

    # ----------------------------------------------------------- environments

    def environments(self, fetch: EnvFetch) -> list[str]:
        """What an environment bisection of ``fetch`` installs (``EnvFetch``); the releases that
        resolve in none of their contexts are returned (level 2 skips them there too)."""
        for reqs, word in zip(fetch.ends, ("good", "bad")):
            self.log(f"the {word} environment ({len(reqs)} pins)")
            self._fetch(list(reqs))
        skipped = []
        for c in fetch.releases:
            reqs = next((ctx for ctx in c.contexts if self._resolves(ctx)), None)
            if reqs is None:
                skipped.append(c.label)
                continue
            self.log(f"{c.label}")
            self._fetch(list(reqs))
        return skipped

    def _resolves(self, reqs: tuple[str, ...]) -> bool:
        try:
            self._resolve(list(reqs))
        except EnvBuildError:
            return False
        return True

    # ---------------------------------------------------------------- commits

    def commits(self, repo: Path, package: str, old: str, new: str) -> list[str]:
        """Wheels of every first-parent commit from ``old`` to ``new`` (tags or hashes)."""
        chain = [gitrepo.commit(repo, old), *gitrepo.commits_between(repo, old, new)]
        for c in chain:
            out = self.dest / "commits" / c.hash
            if out.is_dir() and any(out.glob("*.whl")):
                continue
            self.log(f"building {package} at {c.short} {c.subject[:60]}")
            wheel = self.mgr.commit_wheel(GitSource(package, str(repo), c.hash, c.describe, c.subject))
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(wheel, out / wheel.name)
            self.added.append(f"commits/{c.hash}/{wheel.name}")
        return [c.hash for c in chain]

    # ------------------------------------------------------------------ tool

    def requirements(self, reqs: tuple[str, ...]) -> None:
        """Any other requirements (resolved together against the target's base)."""
        for name, version in self._resolve(list(reqs)):
            if not self._have(name, version):
                self._download(name, version)

    def tool(self) -> None:
        """dsbisect itself and what it needs, to install it on the target with no network."""
        from importlib.metadata import distribution

        dist = distribution("dsbisect")
        reqs = [r for r in (dist.requires or []) if "extra ==" not in r]
        for name, version in self._resolve(reqs):
            if not self._have(name, version):
                self._download(name, version)

    def size(self) -> int:
        """Bytes in the wheelhouse."""
        return sum(f.stat().st_size for f in self.dest.rglob("*") if f.is_file())

    def close(self) -> None:
        self._tmp.cleanup()


def points_to_fetch(cases: list[Case], index: IndexOptions, with_candidates: bool) -> list[Point]:
    """The points of ``cases`` and, ``with_candidates``, every release a bisection between the
    lowest and highest version of each axis could test (final, not yanked)."""
    points: dict[str, Point] = {}
    for c in cases:
        for p in c.points:
            points[p.key] = p
        if not with_candidates:
            continue
        first = c.points[0]
        for name, _ in first.versions:
            versions = sorted({Version(v) for p in c.points for n, v in p.versions if n == name})
            for r in releases(name, index):
                if versions[0] <= r.version <= versions[-1] and not r.yanked and not r.version.is_prerelease:
                    moved = tuple((n, str(r.version) if n == name else v) for n, v in first.versions)
                    q = Point(versions=moved, pins=first.pins)
                    points.setdefault(q.key, q)
    return list(points.values())


def snapshot_version(snap: dict, name: str) -> str | None:
    """The version of ``name`` in a base snapshot; None when it has none."""
    return next((d["version"] for d in snap["dists"] if canonicalize_name(d["name"]) == canonicalize_name(name)), None)


# --------------------------------------------------------------- environments


@dataclass(frozen=True)
class Candidate:
    """One release a level-2 bisection may install, with the pins around it to resolve it in."""

    label: str                            # "dsb-c 1.2"
    contexts: tuple[tuple[str, ...], ...]  # tried in order; the first uv can satisfy is fetched


@dataclass(frozen=True)
class EnvFetch:
    """What an environment bisection installs, as requirement sets.

    Level 1: both ends and every trial are the good environment with a subset of the changes
    applied, so each trial is a mix of the two environments' exact pins (held packages at the
    base's version) and the union of what the two ends resolve to is enough, for a full freeze
    or lock.  A requirements file that leaves a transitive dependency unpinned gets it at the
    version either end resolves to: a mix that needs a third version of it is untestable offline.
    Level 2 (``with_candidates``): every release between the good and the bad version of each
    bisectable change, in the good environment's pins, else the bad's, else alone (uv picks
    what it needs), as the release bisection moves what a release forces to move.
    Direct references (URLs, paths, editables) are not downloaded: the target must reach them.
    """

    ends: tuple[tuple[str, ...], tuple[str, ...]]
    releases: tuple[Candidate, ...] = ()


def env_fetch(good: Environment, bad: Environment, holding: Holding, index: IndexOptions,
              with_candidates: bool) -> EnvFetch:
    ends = tuple(requirements(env, (), holding.held, holding.names) for env in (good, bad))
    if not with_candidates:
        return EnvFetch(ends)
    found: list[Candidate] = []
    for c in holding.moving:
        if c.kind is not Kind.CHANGED or not c.bisectable:
            continue
        low, high = sorted((c.good.version, c.bad.version), key=Version)
        pre = Version(low).is_prerelease or Version(high).is_prerelease
        try:
            listed = candidates(c.name, low, high, index, pre)
        except InputError:  # an end the index does not list (a local build): the ends only
            continue
        for v in listed:
            if v in (Version(low), Version(high)):
                continue  # the ends are in the environments already
            mine = f"{canonicalize_name(c.name)}=={v}"
            around = [tuple(r for r in reqs if canonicalize_name(Requirement(r).name) != c.name) for reqs in ends]
            found.append(Candidate(f"{c.name} {v}", (*((*a, mine) for a in around), (*holding.held, mine))))
    return EnvFetch(ends, tuple(found))


def env_holding(good: Environment, bad: Environment, hold: tuple[str, ...], target: Target,
                python: str | None) -> Holding:
    """``envplan``'s holding against the target's base: its snapshot's, else this machine's
    (InputError: the same pins, a held name the base lacks, only held packages changed)."""
    changes = changes_of(good, bad)
    if target.snapshot:
        snap = target.snapshot
        return hold_against(good, bad, changes, hold, lambda n: snapshot_version(snap, n),
                            str(snap.get("python", "the snapshot")))
    base = inspect_base(python)
    return hold_against(good, bad, changes, hold, base.version_of, base.python)
