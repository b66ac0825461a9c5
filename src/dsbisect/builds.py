"""Wheels of sdists whose setup.py imports torch (DeepSpeed), and of commits of a clone.

DeepSpeed's setup.py imports torch and, through ``op_builder``, DeepSpeed itself, so its
sdists can only be built where torch and the point's other pins (e.g. ``pydantic<2``)
are importable, with setuptools old enough for a 2023 ``setup.cfg``.  A *builder* is a
venv layered on the torch of the point, holding the point's other requirements and the
build pins (``setuptools<75``, wheel, pip; installed without dependencies, so that torch's
own wish for a newer setuptools does not block them).  Builds run with ``DS_BUILD_OPS=0``
(a pure-Python wheel; ops compile just in time) and every compat shim on.  Release wheels
are cached per torch, commit wheels per commit hash (all commits between two tags carry
the same version, so never by name).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from filelock import FileLock
from packaging.utils import canonicalize_name

from . import envs as _envs
from .compat import SHIMS
from .errors import EnvBuildError
from .matrix import GitSource

# What DeepSpeed's setup.py needs from a checkout; a snapshot of the repository may lack
# the large media files elsewhere in the tree, so ``git archive`` takes only these.
SOURCE_PATHS = {
    "deepspeed": (
        "setup.py", "version.txt", "requirements", "deepspeed", "op_builder", "csrc",
        "accelerator", "bin", "README.md", "MANIFEST.in", "build_win.bat",
    ),
}


class Builds:
    def __init__(self, mgr: _envs.EnvManager):
        self.mgr = mgr
        self.paths = mgr.paths

    # ----------------------------------------------------------------- builder

    def builder(self, torch_site: tuple[str, ...], context: tuple[str, ...]) -> Path:
        """A venv that sees torch through ``torch_site`` and holds ``context`` and the build pins."""
        mgr = self.mgr
        key = _envs._digest({"python": mgr.base.python, "site": list(torch_site), "context": sorted(context),
                             "pins": list(mgr.options.build_pins), "index": mgr.index.uv_args()})
        path = self.paths.builders / key
        with FileLock(str(self.paths.locks / f"builder-{key}.lock")):
            if (path / _envs.MARKER).is_file():
                return path
            tmp = path.with_name(key + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                self._make_builder(tmp, torch_site, context)
                (tmp / _envs.MARKER).write_text(json.dumps({"key": key, "site": list(torch_site),
                                                            "context": list(context)}))
                shutil.rmtree(path, ignore_errors=True)
                tmp.rename(path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return path

    def _make_builder(self, tmp: Path, torch_site: tuple[str, ...], context: tuple[str, ...]) -> None:
        mgr = self.mgr
        mgr._uv(["venv", "--quiet", "--relocatable", "--python", mgr.base.python, str(tmp)])
        site = _envs._site_packages(tmp)
        _envs._write_layer(site, torch_site)
        _envs.write_stubs(site, _dists_in(torch_site))
        _envs.install_hook(tmp)
        if context:
            mgr._uv_install(tmp, list(context), mgr._hold(context))
        if mgr.options.build_pins:
            mgr._uv(["pip", "install", "--quiet", "--no-deps", "--python", str(tmp / "bin" / "python"),
                     *mgr.index.uv_args(), *mgr.options.build_pins])

    # ------------------------------------------------------------------ wheels

    def release(self, name: str, version: str, torch_site: tuple[str, ...], context: tuple[str, ...]) -> Path:
        """The folder (per torch) that holds a wheel of ``name==version``; built if missing."""
        out = self.paths.wheels / _envs._digest({"site": list(torch_site)})
        out.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.paths.locks / f"wheel-{out.name}-{name}-{version}.lock")):
            if not any(_envs._wheel_is(w, name, version) for w in out.glob("*.whl")):
                builder = self.builder(torch_site, context)
                self.mgr.log(f"building a wheel of {name}=={version} (its setup.py imports torch)")
                self._pip_wheel(builder, [f"{name}=={version}"], out)
        return out

    def commit(self, src: GitSource, torch_site: tuple[str, ...], context: tuple[str, ...]) -> Path:
        """A wheel of ``src.package`` at ``src.commit``: from a wheelhouse, the cache, or built."""
        for d in self.mgr.index.find_links:  # built ahead by ``dsbisect prefetch --git-repo``
            ready = sorted((Path(d) / "commits" / src.commit).glob("*.whl"))
            if ready:
                return ready[0]
        out = self.paths.wheels / "commits" / src.commit
        with FileLock(str(self.paths.locks / f"commit-{src.commit}.lock")):
            found = sorted(out.glob("*.whl")) if out.is_dir() else []
            if found:
                return found[0]
            builder = self.builder(torch_site, context)
            self.mgr.log(f"building {src.package} from commit {src.short}")
            return self._build_commit(src, builder, out)

    def _build_commit(self, src: GitSource, builder: Path, out: Path) -> Path:
        with tempfile.TemporaryDirectory(prefix="dsbisect-src-") as tmp:
            checkout = Path(tmp) / "src"
            export_commit(Path(src.repo), src.commit, checkout, SOURCE_PATHS.get(canonicalize_name(src.package), ()))
            staging = Path(tmp) / "wheel"
            self._pip_wheel(builder, [str(checkout)], staging)
            wheels = list(staging.glob("*.whl"))
            if len(wheels) != 1:
                raise EnvBuildError(f"building {src.package}@{src.short} gave {len(wheels)} wheels")
            out.mkdir(parents=True, exist_ok=True)
            dest = out / wheels[0].name
            shutil.move(str(wheels[0]), dest)
            return dest

    def _pip_wheel(self, builder: Path, what: list[str], out: Path) -> None:
        cmd = [str(builder / "bin" / "python"), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--disable-pip-version-check", "--wheel-dir", str(out), *self.mgr.index.pip_args(), *what]
        env = _envs._clean_env() | {"DS_BUILD_OPS": "0", "DSBISECT_COMPAT": ",".join(SHIMS)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise EnvBuildError(f"building {' '.join(what)} failed: {_build_error(proc.stdout + proc.stderr)}")


def _build_error(text: str) -> str:
    """The exception line of a failed setup.py, else the resolver-style summary."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Error " in ln) and not ln.startswith(("ERROR:", "error:", "note:", "hint:", "×", "╰")):
            return ln[:400]
    return _envs._reason(text)


def _dists_in(site_dirs: tuple[str, ...]):
    """(name, version, {file: text}) of the distributions installed in ``site_dirs``, first wins."""
    seen = set()
    for d in site_dirs:
        for info in sorted(Path(d).glob("*.dist-info")):
            files = _envs.dist_files(info)
            if not files:
                continue
            name, version = _envs._name_version(files["METADATA"])
            if name and canonicalize_name(name) not in seen:
                seen.add(canonicalize_name(name))
                yield name, version, files


def export_commit(repo: Path, commit: str, dest: Path, paths: tuple[str, ...]) -> None:
    """Write the tree of ``commit`` (only ``paths`` if given) into ``dest``."""
    dest.mkdir(parents=True)
    tree = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", commit], capture_output=True, text=True)
    if tree.returncode != 0:
        raise EnvBuildError(f"git cannot read {commit[:10]} in {repo}: {tree.stderr.strip()}")
    present = set(tree.stdout.split())
    chosen = [p for p in paths if p in present] if paths else []
    with tempfile.TemporaryFile() as buf:
        proc = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, *chosen],
                              stdout=buf, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            raise EnvBuildError(f"git archive {commit[:10]} failed: {proc.stderr.decode().strip()[-300:]}")
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            tar.extractall(dest, filter="data")
