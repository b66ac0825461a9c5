"""One uv venv per point: key, build, reuse, list, prune.

Two modes:

- *layered* (default when the interpreter has torch): the venv sees a base environment's
  site-packages after its own (a ``.pth`` that ``site.addsitedir``s it), so the
  cluster's CUDA torch is reused and only the point's packages are installed.  uv cannot
  see packages outside the venv, so the venv also holds *stubs* of the base's
  distributions (their METADATA, with an empty RECORD): uv resolves against what is
  really importable, keeps what satisfies the pins, and installs a shadowing copy of
  what does not (the stub is then removed, and the report names the shadowed package).
  torch is held at the base's version unless the point pins it.
- *isolated*: everything, torch included, comes from the index into the venv.

Packages whose releases are sdists that import torch in setup.py (DeepSpeed before
~0.14) are built once per version into a wheel cache by a *builder* venv that sees torch
and old enough setuptools (``build_pins``), with ``DS_BUILD_OPS=0``, then installed as
wheels.  Builds happen in ``<key>.tmp`` and are renamed into place after the marker
``dsbisect-env.json`` is written; only a venv with that marker is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from .errors import EnvBuildError, InputError
from .matrix import EnvOptions, GitSource, Point

ENV_FORMAT = 1
MARKER = "dsbisect-env.json"
STUB_INSTALLER = "dsbisect-base"

# ------------------------------------------------------------------ index options


@dataclass(frozen=True)
class IndexOptions:
    """Where packages come from: ``--offline``, ``--find-links``, ``--index-url``."""

    offline: bool = False
    find_links: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()

    def uv_args(self) -> list[str]:
        args: list[str] = []
        if self.offline:
            args += ["--offline", "--no-index"]
        else:
            if self.index_url:
                args += ["--index-url", self.index_url]
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for d in self.find_links:
            args += ["--find-links", d]
        return args

    def pip_args(self) -> list[str]:
        args: list[str] = []
        if self.offline:
            args.append("--no-index")
        elif self.index_url:
            args += ["--index-url", self.index_url]
        for url in () if self.offline else self.extra_index_urls:
            args += ["--extra-index-url", url]
        for d in self.find_links:
            args += ["--find-links", d]
        return args

    def with_find_links(self, *dirs: str) -> IndexOptions:
        return IndexOptions(self.offline, self.find_links + dirs, self.index_url, self.extra_index_urls)


# ----------------------------------------------------------------------- the base


_BASE_PROBE = r"""
import importlib.metadata as md, json, os, site, sys, sysconfig
dirs = []
for d in list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
    if d not in dirs and os.path.isdir(d):
        dirs.append(d)
dists, seen = [], set()
for d in md.distributions():
    name = d.metadata["Name"]
    path = getattr(d, "_path", None)
    if not name or name.lower() in seen or path is None:
        continue
    seen.add(name.lower())
    dists.append([name, d.version, str(path)])
print(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
                  "prefix": sys.prefix, "site": dirs, "dists": dists}))
"""


@dataclass(frozen=True)
class Base:
    """The interpreter (and, when layered, the environment) point venvs are made from."""

    python: str
    version: str
    site_dirs: tuple[str, ...]
    dists: tuple[tuple[str, str, str], ...]  # name, version, dist-info path

    @property
    def digest(self) -> str:
        listing = sorted(f"{canonicalize_name(n)}=={v}" for n, v, _ in self.dists)
        return _digest({"python": self.python, "site": list(self.site_dirs), "dists": listing})

    def version_of(self, name: str) -> str | None:
        for n, v, _ in self.dists:
            if canonicalize_name(n) == canonicalize_name(name):
                return v
        return None


def inspect_base(python: str | None) -> Base:
    exe = python or sys.executable
    found = shutil.which(exe) if not os.path.sep in exe else exe
    if not found or not Path(found).exists():
        raise InputError(f"python interpreter {exe!r} not found")
    proc = subprocess.run([found, "-c", _BASE_PROBE], capture_output=True, text=True, env=_clean_env())
    if proc.returncode != 0:
        raise InputError(f"cannot inspect {found}: {proc.stderr.strip().splitlines()[-1:]}")
    data = json.loads(proc.stdout)
    return Base(
        python=data["executable"],
        version=data["version"],
        site_dirs=tuple(data["site"]),
        dists=tuple(tuple(d) for d in data["dists"]),
    )


# --------------------------------------------------------------------- env records


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
        return _digest({"format": ENV_FORMAT} | asdict(self))


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


@dataclass
class _Paths:
    root: Path

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def builders(self) -> Path:
        return self.root / "builders"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def uv_cache(self) -> Path:
        return Path(os.environ.get("UV_CACHE_DIR") or self.root / "uv")


# ---------------------------------------------------------------------- the manager


@dataclass
class EnvManager:
    """Builds and reuses point venvs under ``root`` (one filesystem, so uv links files)."""

    root: Path
    options: EnvOptions = field(default_factory=EnvOptions)
    index: IndexOptions = field(default_factory=IndexOptions)
    log: callable = lambda msg: None
    _base: Base | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.paths = _Paths(self.root)
        for d in (self.paths.envs, self.paths.wheels, self.paths.builders, self.paths.locks):
            d.mkdir(parents=True, exist_ok=True)
        _mark_cache_dir(self.root)

    # -- public

    @property
    def base(self) -> Base:
        if self._base is None:
            self._base = inspect_base(self.options.python)
        return self._base

    @property
    def mode(self) -> str:
        if self.options.base != "auto":
            return self.options.base
        return "layered" if self.base.version_of("torch") else "isolated"

    def spec_for(self, point: Point) -> EnvSpec:
        reqs = tuple(sorted(point.requirements()))
        hold = self._hold(reqs)
        return EnvSpec(
            mode=self.mode,
            python=self.base.python,
            base_digest=self.base.digest if self.mode == "layered" else self.base.version,
            requirements=reqs,
            source=f"{point.source.package}@{point.source.commit}" if point.source else None,
            hold=hold,
            index=tuple(self.index.uv_args()),
        )

    def ensure(self, point: Point) -> Env:
        """The venv for ``point``, built if needed. Raises EnvBuildError with uv's reason."""
        spec = self.spec_for(point)
        final = self.paths.envs / spec.key
        with FileLock(str(self.paths.locks / f"{spec.key}.lock")):
            env = self._reuse(final, spec)
            if env:
                return env
            return self._build(point, spec, final)

    def existing(self) -> list[dict]:
        out = []
        for d in sorted(self.paths.envs.iterdir()):
            marker = d / MARKER
            if marker.is_file():
                data = json.loads(marker.read_text())
                data["path"] = str(d)
                data["bytes"] = _du(d)
                out.append(data)
        return out

    def prune(self, keep: set[str] | None = None, older_than_s: float | None = None) -> list[Path]:
        removed = []
        now = time.time()
        for d in sorted(self.paths.envs.iterdir()):
            marker = d / MARKER
            stale = d.name.endswith(".tmp") or not marker.is_file()
            if not stale and keep is not None and d.name in keep:
                continue
            if not stale and older_than_s is not None and now - marker.stat().st_mtime < older_than_s:
                continue
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        return removed

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
        install_hook(final)
        os.utime(marker)
        return Env(
            key=spec.key,
            path=final,
            spec=spec,
            seconds=0.0,
            reused=True,
            installed=tuple(tuple(x) for x in data.get("installed", [])),
            shadowed=tuple(tuple(x) for x in data.get("shadowed", [])),
        )

    # -- build

    def _hold(self, reqs: tuple[str, ...]) -> tuple[str, ...]:
        """Base packages held at their version in layered mode (torch, unless pinned)."""
        if self.mode != "layered":
            return ()
        named = {canonicalize_name(Requirement(r).name) for r in reqs}
        torch = self.base.version_of("torch")
        return (f"torch=={torch}",) if torch and "torch" not in named else ()

    def _build(self, point: Point, spec: EnvSpec, final: Path) -> Env:
        t0 = time.monotonic()
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.log(f"building env {spec.key} ({'; '.join(spec.requirements) or 'no pins'})")
        try:
            self._uv(["venv", "--quiet", "--relocatable", "--python", self.base.python, str(tmp)])
            site_dir = _site_packages(tmp)
            if spec.mode == "layered":
                _write_layer(site_dir, self.base.site_dirs)
                stubs = _write_stubs(site_dir, self.base)
            else:
                stubs = {}
                torch = [r for r in spec.requirements if canonicalize_name(Requirement(r).name) == "torch"]
                if not torch:
                    raise EnvBuildError("isolated mode needs a torch pin (add e.g. 'torch==2.1.2' to pins)")
                self._uv_install(tmp, list(torch), ())
            install_hook(tmp)
            reqs, links = self._prebuild(point, spec, tmp, site_dir)
            self._uv_install(tmp, reqs, spec.hold, extra_links=links)
            installed, shadowed = _inventory(site_dir, stubs)
            marker = {
                "format": ENV_FORMAT,
                "key": spec.key,
                "spec": asdict(spec),
                "installed": installed,
                "shadowed": shadowed,
                "seconds": round(time.monotonic() - t0, 3),
                "created": time.time(),
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=1))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Env(
            key=spec.key,
            path=final,
            spec=spec,
            seconds=time.monotonic() - t0,
            reused=False,
            installed=tuple(tuple(x) for x in installed),
            shadowed=tuple(tuple(x) for x in shadowed),
        )

    def _prebuild(self, point: Point, spec: EnvSpec, venv: Path, site_dir: Path) -> tuple[list[str], list[str]]:
        """Wheels for the sdists that need torch at build time; returns (requirements, find-links)."""
        torch_site = self.base.site_dirs if spec.mode == "layered" else (str(site_dir),)
        torchy = {canonicalize_name(n) for n in self.options.build_with_torch}
        context = tuple(r for r in spec.requirements if canonicalize_name(Requirement(r).name) not in torchy)
        reqs, links = list(spec.requirements), []
        for r in spec.requirements:
            req = Requirement(r)
            exact = _exact_version(req)
            if canonicalize_name(req.name) in torchy and exact and not self._find_wheel(req.name, exact):
                links.append(str(self.builds.release(req.name, exact, torch_site, context)))
        if point.source:
            wheel = self.builds.commit(point.source, torch_site, context)
            reqs.append(f"{point.source.package} @ {wheel.as_uri()}")
        return reqs, links

    def release_wheel(self, name: str, version: str, context: tuple[str, ...] = ()) -> Path:
        """The folder holding a wheel of ``name==version`` built with the base's torch."""
        return self.builds.release(name, version, self.base.site_dirs, context)

    def commit_wheel(self, src: GitSource, context: tuple[str, ...] = ()) -> Path:
        """A wheel of ``src.package`` built from ``src.commit``."""
        return self.builds.commit(src, self.base.site_dirs, context)

    def builder(self, context: tuple[str, ...] = ()) -> Path:
        return self.builds.builder(self.base.site_dirs, context)

    @property
    def builds(self):
        from .builds import Builds

        return Builds(self)

    def _find_wheel(self, name: str, version: str) -> Path | None:
        for d in self.index.find_links:
            for w in Path(d).glob("*.whl"):
                if _wheel_is(w, name, version):
                    return w
        return None

    def _uv_install(self, venv: Path, reqs: list[str], hold: tuple[str, ...], extra_links: list[str] = ()) -> None:
        args = ["pip", "install", "--python", str(venv / "bin" / "python"), *self.index.uv_args()]
        for d in extra_links:
            args += ["--find-links", d]
        if hold:
            cfile = venv / "dsbisect-hold.txt"
            cfile.write_text("\n".join(hold) + "\n")
            args += ["--constraint", str(cfile)]
        self._uv(args + list(reqs))

    def _uv(self, args: list[str]) -> str:
        env = _clean_env() | {"UV_NO_PROGRESS": "1", "UV_CACHE_DIR": str(self.paths.uv_cache), "DS_BUILD_OPS": "0"}
        proc = subprocess.run([uv_bin(), *args], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise EnvBuildError(_reason(proc.stderr or proc.stdout))
        return proc.stdout + proc.stderr  # uv reports what it would do on stderr


# ------------------------------------------------------------------------- helpers


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvBuildError("the uv binary was not found (pip install uv)") from None
        return found


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for k in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT"):
        env.pop(k, None)
    return env


def _reason(text: str) -> str:
    """The informative part of a resolver's or builder's error output, on one line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("hint:", "Using Python", "warning:"))]
    for ln in keep:
        if ln.startswith(("×", "error:", "ERROR:")) or "No solution" in ln or "not found" in ln:
            idx = keep.index(ln)
            return " ".join(keep[idx : idx + 4])[:600]
    return " ".join(keep[-3:])[:600] or "no output"


def _site_packages(venv: Path) -> Path:
    found = list((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise EnvBuildError(f"{venv} has no site-packages")
    return found[0]


def _write_layer(site_dir: Path, base_dirs: tuple[str, ...]) -> None:
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in base_dirs)
    (site_dir / "_dsbisect_base.pth").write_text(lines)


def _write_stubs(site_dir: Path, base: Base) -> dict[str, str]:
    """Stub dist-infos of the base's distributions, so uv resolves against them."""
    return write_stubs(site_dir, base_metadata(base))


STUB_FILES = ("METADATA", "entry_points.txt", "top_level.txt")


def base_metadata(base: Base):
    """(name, version, {file: text}) of each distribution of ``base``, for stubs."""
    for name, version, path in base.dists:
        files = dist_files(Path(path))
        if files:
            yield name, version, files


def dist_files(info: Path) -> dict[str, str]:
    """The metadata files a stub keeps: METADATA (or PKG-INFO) and the entry points.

    Entry points matter: setuptools finds its commands, pytest its plugins and torch its
    backends through them, and a stub is what importlib.metadata finds first.
    """
    files = {}
    meta = info / "METADATA" if (info / "METADATA").is_file() else info / "PKG-INFO"
    if not meta.is_file():
        return files
    files["METADATA"] = meta.read_text(errors="replace")
    for name in STUB_FILES[1:]:
        if (info / name).is_file():
            files[name] = (info / name).read_text(errors="replace")
    return files


def write_stubs(site_dir: Path, items) -> dict[str, str]:
    """Write stub dist-infos: (name, version, METADATA text or {file: text}) each."""
    stubs: dict[str, str] = {}
    for name, version, content in items:
        files = {"METADATA": content} if isinstance(content, str) else content
        info = f"{name.replace('-', '_')}-{version}.dist-info"
        d = site_dir / info
        d.mkdir(exist_ok=True)
        for fname, text in files.items():
            (d / fname).write_text(text)
        (d / "INSTALLER").write_text(STUB_INSTALLER + "\n")
        listed = [*files, "INSTALLER", "RECORD"]
        (d / "RECORD").write_text("".join(f"{info}/{f},,\n" for f in listed))
        stubs[canonicalize_name(name)] = version
    return stubs


def hook_source() -> str:
    return resources.files("dsbisect").joinpath("_hook/dsbisect_hook.py").read_text()


def install_hook(venv: Path) -> None:
    """(Re)write dsbisect's start-up hook into the venv; cheap, and keeps old envs current."""
    site_dir = _site_packages(venv)
    src = hook_source()
    target = site_dir / "dsbisect_hook.py"
    if not target.is_file() or target.read_text() != src:
        target.write_text(src)
    pth = site_dir / "dsbisect_hook.pth"
    if not pth.is_file():
        pth.write_text("import dsbisect_hook\n")


def _inventory(site_dir: Path, stubs: dict[str, str]) -> tuple[list, list]:
    """What the venv itself holds, and which base packages it shadows."""
    installed, shadowed = [], []
    for info in sorted(site_dir.glob("*.dist-info")):
        installer = info / "INSTALLER"
        if installer.is_file() and installer.read_text().strip() == STUB_INSTALLER:
            continue
        meta = info / "METADATA"
        if not meta.is_file():
            continue
        name, version = _name_version(meta.read_text(errors="replace"))
        installed.append([name, version])
        base_version = stubs.get(canonicalize_name(name))
        if base_version and base_version != version:
            shadowed.append([name, base_version, version])
    return installed, shadowed


def _name_version(metadata: str) -> tuple[str, str]:
    name = version = ""
    for line in metadata.splitlines():
        if line.startswith("Name:") and not name:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and not version:
            version = line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return name, version


def _exact_version(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _wheel_is(path: Path, name: str, version: str) -> bool:
    try:
        n, v, _, _ = parse_wheel_filename(path.name)
    except ValueError:
        return False
    return n == canonicalize_name(name) and str(v) == version


def _mark_cache_dir(root: Path) -> None:
    tag = root / "CACHEDIR.TAG"
    if not tag.exists():
        tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# dsbisect's venvs and wheels.\n")
    ignore = root / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")


def _du(path: Path) -> int:
    """Bytes used by ``path``, counting each hard-linked inode once."""
    seen, total = set(), 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
