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
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from . import gitrepo
from .envs import Base, EnvManager, _clean_env, _exact_version, base_metadata, inspect_base, write_stubs
from .errors import EnvBuildError, InputError
from .matrix import GitSource, Point

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
        "dists": [{"name": n, "version": v, "metadata": f["METADATA"]} for n, v, f in base_metadata(base)],
    }


def load_snapshot(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"--base-snapshot {path}: cannot read it ({e})") from None
    if data.get("format") != 1 or "dists" not in data:
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
        for p in self.platforms:
            args += ["--platform", p]
        return args


def _uv_platform(tag: str) -> str:
    m = re.match(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        return f"{m.group(3)}-manylinux_{m.group(1)}_{m.group(2)}"
    if tag.startswith("manylinux2014_"):
        return tag.split("_", 1)[1] + "-manylinux_2_17"
    return "linux"


@dataclass
class Prefetcher:
    mgr: EnvManager
    dest: Path
    target: Target = field(default_factory=Target)
    log: callable = lambda msg: None
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
        reqs = list(point.requirements())
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
        version = _exact_version(req)
        built_with_torch = {canonicalize_name(n) for n in self.mgr.options.build_with_torch}
        if not version or canonicalize_name(req.name) not in built_with_torch or self._have(req.name, version):
            return
        self.log(f"building {req.name}=={version} into a wheel")
        folder = self.mgr.release_wheel(req.name, version, self._context)
        for w in folder.glob("*.whl"):
            n, v, _, _ = parse_wheel_filename(w.name)
            if n == canonicalize_name(req.name) and str(v) == version:
                self._copy(w)

    def _resolve(self, reqs: list[str]) -> list[tuple[str, str]]:
        venv = self._resolution_venv()
        hold = self._hold(reqs)
        args = ["pip", "install", "--dry-run", "--python", str(venv / "bin" / "python"), *self.target.uv_args(),
                *self.mgr.index.uv_args(), "--find-links", str(self.dest)]
        if hold:
            c = venv / "hold.txt"
            c.write_text("\n".join(hold) + "\n")
            args += ["--constraint", str(c)]
        out = self.mgr._uv(args + reqs)
        return [(m.group(1), m.group(2)) for m in map(_WOULD.match, out.splitlines()) if m]

    def _hold(self, reqs: list[str]) -> list[str]:
        named = {canonicalize_name(Requirement(r).name) for r in reqs}
        torch = self._base_version("torch")
        return [f"torch=={torch}"] if torch and "torch" not in named else []

    def _base_version(self, name: str) -> str | None:
        if self.target.snapshot:
            for d in self.target.snapshot["dists"]:
                if canonicalize_name(d["name"]) == canonicalize_name(name):
                    return d["version"]
            return None
        return self.mgr.base.version_of(name)

    def _resolution_venv(self) -> Path:
        """A venv holding stubs of the target's base, to resolve against (never run)."""
        if self._resolver is None:
            venv = Path(self._tmp.name) / "resolve"
            self.mgr._uv(["venv", "--quiet", "--python", sys.executable, str(venv)])
            site = next((venv / "lib").glob("python3*/site-packages"))
            if self.target.snapshot:
                items = ((d["name"], d["version"], d["metadata"]) for d in self.target.snapshot["dists"])
            else:
                items = base_metadata(self.mgr.base)
            write_stubs(site, items)
            self._resolver = venv
        return self._resolver

    # -------------------------------------------------------------- downloads

    def _have(self, name: str, version: str) -> bool:
        for f in self.dest.iterdir():
            if _is(f.name, name, version):
                return True
        return False

    def _download(self, name: str, version: str) -> None:
        self.log(f"downloading {name}=={version}")
        pip = self._pip()
        base = [*pip, "download", "--no-deps", "--disable-pip-version-check", "-d", str(self.dest),
                *self.mgr.index.pip_args()]
        proc = subprocess.run([*base, *self.target.pip_args(), f"{name}=={version}"], capture_output=True,
                              text=True, env=_clean_env())
        if proc.returncode == 0:
            self._note_new(name, version)
            return
        # No wheel for the target: take the sdist and build it here (pure-Python packages).
        tmp = Path(self._tmp.name) / "sdists"
        proc = subprocess.run([*pip, "download", "--no-deps", "--no-binary=:all:", "-d", str(tmp),
                               *self.mgr.index.pip_args(), f"{name}=={version}"],
                              capture_output=True, text=True, env=_clean_env())
        sdists = [f for f in tmp.glob("*") if _is(f.name, name, version)] if tmp.is_dir() else []
        if proc.returncode != 0 or not sdists:
            raise EnvBuildError(f"cannot download {name}=={version}: {_last(proc)}")
        proc = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(self.dest), str(sdists[0])],
                              capture_output=True, text=True, env=_clean_env())
        if proc.returncode != 0:
            raise EnvBuildError(f"cannot build a wheel of {name}=={version}: {_last(proc)}")
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
            if _is(f.name, name, version) and f.name not in self.added:
                self.added.append(f.name)

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

    def close(self) -> None:
        self._tmp.cleanup()


def _is(filename: str, name: str, version: str) -> bool:
    try:
        if filename.endswith(".whl"):
            n, v, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            n, v = parse_sdist_filename(filename)
        else:
            return False
    except ValueError:
        return False
    return n == canonicalize_name(name) and str(v) == str(version)


def _last(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exit {proc.returncode}"


def describe_base(base: Base) -> str:
    return f"{base.python} (python {base.version}, {len(base.dists)} distributions)"
