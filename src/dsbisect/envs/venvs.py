"""One uv venv per point: key, build, reuse, list, prune.

Two modes (``base.py`` has the details of the first):

- *layered* (default when the interpreter has torch): the venv sees the base
  environment's site-packages after its own and holds stubs of its distributions, so
  the cluster's CUDA torch is reused and only the point's packages are installed.  torch
  is held at the base's version unless the point pins it.
- *isolated*: everything, torch included, comes from the index into the venv.

Sdists whose setup.py imports torch (DeepSpeed before ~0.14) become wheels first
(``builds.py``).  Builds happen in ``<key>.tmp`` and are renamed into place after the
marker ``dsbisect-env.json`` is written; only a venv with that marker is reused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import psutil
from filelock import FileLock, Timeout
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsbisect.envs import base as base_env
from dsbisect.core import disk, waits
from dsbisect.envs.builds import Builds
from dsbisect.envs.cache import MARKER, CachePaths, disk_usage
from dsbisect.core.errors import EnvBuildError
from dsbisect.launch.launchers import VENV_ENTRIES
from dsbisect.core.model import BaseMode, EnvOptions, GitSource, IndexOptions, Point, digest
from dsbisect.core.redact import mask_text, redact
from dsbisect.envs.uv import Uv
from dsbisect.envs.versions import exact_version, file_is

ENV_FORMAT = 2  # 2: keys are model.digest (compact JSON)


@dataclass(frozen=True)
class EnvSpec:
    mode: str
    python: str
    base_digest: str
    requirements: tuple[str, ...]
    source: str | None
    hold: tuple[str, ...]
    index: tuple[str, ...]

    @property
    def key(self) -> str:
        return digest({"format": ENV_FORMAT} | self.shown())

    def shown(self) -> dict:
        """The spec as the cache keeps it (the group may read it): a pin's URL credentials masked
        (uv gets them; the key is of the masked text, so a rotated credential keeps the venv)."""
        return asdict(self) | {"requirements": tuple(mask_text(r) for r in self.requirements)}


@dataclass(frozen=True)
class Env:
    key: str
    path: Path
    spec: EnvSpec
    seconds: float
    reused: bool
    installed: tuple[tuple[str, str], ...] = ()
    shadowed: tuple[tuple[str, str, str], ...] = ()  # name, base version, point version

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def version_of(self, name: str) -> str | None:
        for n, v in self.installed:
            if canonicalize_name(n) == canonicalize_name(name):
                return v
        return None


@dataclass(frozen=True)
class CachedEnv:
    """A finished venv of the cache, for ``dsbisect envs list``."""

    key: str
    path: Path
    mode: str
    requirements: tuple[str, ...]
    source: str | None  # package@commit
    shadowed: tuple[tuple[str, str, str], ...]
    bytes: int
    seconds: float  # how long it took to build


@dataclass
class EnvManager:
    """Builds and reuses point venvs under ``root`` (one filesystem, so uv links files)."""

    root: Path
    options: EnvOptions = field(default_factory=EnvOptions)
    index: IndexOptions = field(default_factory=IndexOptions)
    log: Callable[[str], None] = lambda msg: None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.paths = CachePaths(self.root)
        self.paths.create()
        self.uv = Uv(self.paths.uv_cache, self.index)

    # -- public

    @cached_property
    def base(self) -> base_env.Base:
        base = base_env.inspect_base(self.options.python)
        # The base's torch without bytecode (pip install --no-compile): its rank imports are cached
        # first, in one process (the two venvs a run builds at once would each compile them), and
        # remembered, so that a run's import check caches what its packages import besides
        # (caches_bytecode).
        if base_env.cache_bytecode(base, self.log):
            self._lazy_marker(base).parent.mkdir(parents=True, exist_ok=True)
            self._lazy_marker(base).touch()
        return base

    def _lazy_marker(self, base: base_env.Base) -> Path:
        """There when dsbisect found ``base``'s torch without bytecode (``pip install --no-compile``)."""
        return self.paths.root / "bytecode" / base.digest

    @property
    def mode(self) -> BaseMode:
        if self.options.base is not BaseMode.AUTO:
            return self.options.base
        return BaseMode.LAYERED if self.base.version_of("torch") else BaseMode.ISOLATED

    @cached_property
    def builds(self) -> Builds:
        return Builds(self.uv, self.paths, self.base.python, self.options, self.log)

    def spec_for(self, point: Point) -> EnvSpec:
        reqs = tuple(sorted(point.requirements()))
        layered = self.mode is BaseMode.LAYERED
        return EnvSpec(
            mode=self.mode.value,
            python=self.base.python,
            base_digest=self.base.digest if layered else self.base.version,
            requirements=reqs,
            source=f"{point.source.package}@{point.source.ident}" if point.source else None,
            hold=self.hold(reqs),
            # the index as the marker shows it (the group reads it): credentials masked; uv gets them
            index=tuple(redact(a) for a in self.index.uv_args()),
        )

    def ensure(self, point: Point) -> Env:
        """The venv for ``point``, built if needed. Raises EnvBuildError with uv's reason."""
        spec = self.spec_for(point)
        final = self.paths.envs / spec.key
        try:
            with waits.held(self.paths.lock(spec.key), f"the venv of {point.label} (env {spec.key[:16]})"):
                reused = self._reuse(final, spec)
                if reused is None:
                    return self._build(point, spec, final)
            if spec.mode == BaseMode.LAYERED.value and base_env.missing_bytecode(self.base):
                with waits.held(self.paths.lock("bytecode"), "the bytecode cache of the base environment"):
                    base_env.cache_bytecode(self.base, self.log)
            return reused
        except OSError as e:  # a full cache disk: the point cannot be tested here (a SKIP), said in one line
            if not disk.is_full(e):
                raise
            raise EnvBuildError(disk.message(e.filename or final)) from None

    def built(self, point: Point) -> Env | None:
        """The finished venv of ``point`` if the cache holds it (nothing is built or changed)."""
        spec = self.spec_for(point)
        marker = self.paths.envs / spec.key / MARKER
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != spec.key:
            return None
        return Env(key=spec.key, path=marker.parent, spec=spec, seconds=0.0, reused=True,
                   installed=tuple(tuple(x) for x in data.get("installed", [])),
                   shadowed=tuple(tuple(x) for x in data.get("shadowed", [])))

    def hold(self, reqs: tuple[str, ...]) -> tuple[str, ...]:
        """Base packages held at their version in layered mode (torch, unless pinned)."""
        if self.mode is not BaseMode.LAYERED:
            return ()
        named = {canonicalize_name(Requirement(r).name) for r in reqs}
        torch = self.base.version_of("torch")
        return (f"torch=={torch}",) if torch and "torch" not in named else ()

    def existing(self) -> list[CachedEnv]:
        out = []
        for d in sorted(self.paths.envs.iterdir()):
            marker = d / MARKER
            if marker.is_file():
                data = json.loads(marker.read_text())
                spec = data.get("spec", {})
                out.append(CachedEnv(d.name, d, spec.get("mode", "?"), tuple(spec.get("requirements", ())),
                                     spec.get("source"), tuple(tuple(x) for x in data.get("shadowed", [])),
                                     disk_usage(d), float(data.get("seconds", 0.0))))
        return out

    def prune(self, older_than_s: float | None = None) -> tuple[list[Path], list[Path]]:
        """Delete venvs (all, or those unused for ``older_than_s``) and stale half-built ones.
        A venv that a build holds (its lock) or a live process runs from is kept.
        Returns (removed, kept because in use)."""
        removed, busy = [], []
        now = time.time()
        in_use = _venvs_in_use(self.paths.envs)
        for d in sorted(self.paths.envs.iterdir()):
            marker = d / MARKER
            finished = marker.is_file() and not d.name.endswith(".tmp")
            if finished and older_than_s is not None and now - marker.stat().st_mtime < older_than_s:
                continue
            lock = FileLock(str(self.paths.lock(d.name.removesuffix(".tmp"))), timeout=0)
            try:
                with lock:
                    if d.name in in_use:
                        busy.append(d)
                        continue
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d)
            except Timeout:  # being built (or reused) right now
                busy.append(d)
        return removed, busy

    # -- wheels built with the base's torch (prefetch uses these)

    def release_wheel(self, name: str, version: str, context: tuple[str, ...] = ()) -> Path:
        """The folder holding a wheel of ``name==version`` built with the base's torch."""
        return self.builds.release(name, version, self.base.site_dirs, context, self.hold(context))

    def commit_wheel(self, src: GitSource, context: tuple[str, ...] = ()) -> Path:
        """A wheel of ``src.package`` built from ``src.commit``."""
        return self.builds.commit(src, self.index.find_links, self.base.site_dirs, context, self.hold(context))

    def builder(self, context: tuple[str, ...] = ()) -> Path:
        return self.builds.builder(self.base.site_dirs, context, self.hold(context))

    # -- reuse

    def _reuse(self, final: Path, spec: EnvSpec) -> Env | None:
        marker = final / MARKER
        if not marker.is_file():
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            return None
        data = json.loads(marker.read_text())
        if data.get("key") != spec.key:
            shutil.rmtree(final, ignore_errors=True)
            return None
        base_env.install_hook(final, VENV_ENTRIES)
        os.utime(marker)
        return Env(key=spec.key, path=final, spec=spec, seconds=0.0, reused=True,
                   installed=tuple(tuple(x) for x in data.get("installed", [])),
                   shadowed=tuple(tuple(x) for x in data.get("shadowed", [])))

    # -- build

    def _build(self, point: Point, spec: EnvSpec, final: Path) -> Env:
        t0 = time.monotonic()
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.log(f"building env {spec.key} ({'; '.join(spec.shown()['requirements']) or 'no pins'})")
        try:
            self.uv.venv(tmp, self.base.python)
            site_dir = base_env.site_packages(tmp)
            if spec.mode == BaseMode.LAYERED.value:
                base_env.write_layer(site_dir, self.base.site_dirs)
                stubs = base_env.write_stubs(site_dir, self.base.metadata())
            else:
                stubs = {}
                torch = [r for r in spec.requirements if canonicalize_name(Requirement(r).name) == "torch"]
                if not torch:
                    raise EnvBuildError("isolated mode needs a torch pin (add e.g. 'torch==2.1.2' to pins)")
                self.uv.install(tmp, torch)
            base_env.install_hook(tmp, VENV_ENTRIES)
            reqs, links = self._prebuild(point, spec, site_dir)
            if reqs:  # none: the base as it is (a trial of settings alone)
                self.uv.install(tmp, reqs, spec.hold, extra_links=links)
            installed, shadowed = base_env.inventory(site_dir, stubs)
            marker = {"format": ENV_FORMAT, "key": spec.key, "spec": spec.shown(), "installed": installed,
                      "shadowed": shadowed, "seconds": round(time.monotonic() - t0, 3), "created": time.time()}
            (tmp / MARKER).write_text(json.dumps(marker, indent=1))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Env(key=spec.key, path=final, spec=spec, seconds=time.monotonic() - t0, reused=False,
                   installed=tuple(tuple(x) for x in installed), shadowed=tuple(tuple(x) for x in shadowed))

    def caches_bytecode(self, env: Env) -> bool:
        """Whether a run's import check in ``env`` may have Python cache the bytecode of what it
        imports: a layered venv on a base whose torch came without bytecode (README command 1's
        ``pip install --no-compile``), also under PYTHONDONTWRITEBYTECODE. What the point's
        packages import from the base (DeepSpeed <= 0.19.5 imports torch._inductor: 2,400
        modules, where base.RANK_IMPORTS caches 1,600) is then compiled once, by the check
        every new venv's first run makes anyway, not by the launcher and every rank of every
        run; a new venv needs no import of its own at its build (one fewer import of DeepSpeed
        before the first run, 8 CPU-s)."""
        return env.spec.mode == BaseMode.LAYERED.value and self._lazy_marker(self.base).exists()

    def _prebuild(self, point: Point, spec: EnvSpec, site_dir: Path) -> tuple[list[str], list[str]]:
        """Wheels for the sdists that need torch at build time; returns (requirements, find-links)."""
        layered = spec.mode == BaseMode.LAYERED.value
        torch_site = self.base.site_dirs if layered else (str(site_dir),)
        torchy = {canonicalize_name(n) for n in self.options.build_with_torch}
        context = tuple(r for r in spec.requirements if canonicalize_name(Requirement(r).name) not in torchy)
        hold = self.hold(context)
        reqs, links = list(spec.requirements), []
        for r in spec.requirements:
            req = Requirement(r)
            exact = exact_version(req)
            if canonicalize_name(req.name) in torchy and exact and not self._in_wheelhouse(req.name, exact) \
                    and not (layered and self._base_has(req.name, exact)):
                links.append(str(self.builds.release(req.name, exact, torch_site, context, hold)))
        if point.source:
            wheel = self.builds.commit(point.source, self.index.find_links, torch_site, context, hold)
            reqs.append(f"{point.source.package} @ {wheel.as_uri()}")
        return reqs, links

    def _base_has(self, name: str, version: str) -> bool:
        """The base holds ``name==version``: its stub satisfies the pin and uv installs nothing,
        so a wheel built for it would never be used (a whole DeepSpeed sdist build)."""
        found = self.base.version_of(name)
        try:
            return found is not None and Version(found) == Version(version)
        except InvalidVersion:
            return found == version

    def _in_wheelhouse(self, name: str, version: str) -> bool:
        return any(file_is(w.name, name, version) for d in self.index.find_links for w in Path(d).glob("*.whl"))


EXTENSIONS = "torch_extensions"  # TORCH_EXTENSIONS_DIR of a point's runs: JIT ops built once per venv


def clear_stale_build_locks(venv: Path) -> list[Path]:
    """Remove the ``lock`` files that a killed just-in-time build (torch.utils.cpp_extension, e.g.
    DeepSpeed's CPU shm op) left in the venv's extensions folder, when no live process runs from
    the venv.  torch waits for such a file forever: the next run in this venv would wait in its
    ranks' import until the wall timeout and read as a HANG it did not produce.
    Returns the files removed."""
    locks = sorted((venv / EXTENSIONS).glob("*/lock"))
    if not locks or venv.name in _venvs_in_use(venv.parent):
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    return locks


def _venvs_in_use(envs: Path) -> set[str]:
    """Names of the venvs under ``envs`` that a live process runs from (its executable there)."""
    names = set()
    for p in psutil.process_iter(["exe", "cmdline"]):
        for path in (p.info.get("exe") or "", *(p.info.get("cmdline") or [])[:1]):
            if path.startswith(str(envs) + "/"):
                names.add(Path(path).relative_to(envs).parts[0])
    return names
