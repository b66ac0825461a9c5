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
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock
from packaging.utils import canonicalize_name

from dsbisect.envs import base as base_env
from dsbisect.core import proc
from dsbisect.envs import gitrepo
from dsbisect.envs.cache import MARKER, CachePaths
from dsbisect.core.compat import SHIMS
from dsbisect.core.errors import EnvBuildError
from dsbisect.envs.indexes import pip_child_env
from dsbisect.launch.launchers import VENV_ENTRIES
from dsbisect.core.model import EnvOptions, GitSource, digest
from dsbisect.envs.uv import Uv, reason
from dsbisect.envs.versions import file_is

# What DeepSpeed's setup.py needs from a checkout; a snapshot of the repository may lack
# the large media files elsewhere in the tree, so ``git archive`` takes only these.
SOURCE_PATHS = {
    "deepspeed": (
        "setup.py", "version.txt", "requirements", "deepspeed", "op_builder", "csrc",
        "accelerator", "bin", "README.md", "MANIFEST.in", "build_win.bat",
    ),
}


class Builds:
    """Builders and the wheels they make, under the env root's ``builders/`` and ``wheels/``."""

    def __init__(self, uv: Uv, paths: CachePaths, python: str, options: EnvOptions,
                 log: Callable[[str], None] = lambda msg: None):
        self.uv, self.paths, self.python, self.options, self.log = uv, paths, python, options, log

    # ----------------------------------------------------------------- builder

    def builder(self, torch_site: tuple[str, ...], context: tuple[str, ...], hold: tuple[str, ...]) -> Path:
        """A venv that sees torch through ``torch_site`` and holds ``context`` and the build pins."""
        key = digest({"python": self.python, "site": list(torch_site), "context": sorted(context),
                      "pins": list(self.options.build_pins), "index": self.uv.index.uv_args()})
        path = self.paths.builders / key
        with FileLock(str(self.paths.lock(f"builder-{key}"))):
            if (path / MARKER).is_file():
                return path
            tmp = path.with_name(key + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                self._make_builder(tmp, torch_site, context, hold)
                (tmp / MARKER).write_text(json.dumps({"key": key, "site": list(torch_site),
                                                      "context": list(context)}))
                shutil.rmtree(path, ignore_errors=True)
                tmp.rename(path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return path

    def _make_builder(self, tmp: Path, torch_site: tuple[str, ...], context: tuple[str, ...],
                      hold: tuple[str, ...]) -> None:
        self.uv.venv(tmp, self.python)
        site = base_env.site_packages(tmp)
        base_env.write_layer(site, torch_site)
        base_env.write_stubs(site, base_env.dists_in(torch_site))
        base_env.install_hook(tmp, VENV_ENTRIES)
        if context:
            self.uv.install(tmp, context, hold)
        if self.options.build_pins:
            self.uv.install(tmp, self.options.build_pins, no_deps=True)

    # ------------------------------------------------------------------ wheels

    def release(self, name: str, version: str, torch_site: tuple[str, ...], context: tuple[str, ...],
                hold: tuple[str, ...]) -> Path:
        """The folder (per interpreter and torch build) that holds a wheel of ``name==version``;
        built if missing. Keyed by what the build reads of torch (its version.py: version, git
        commit, CUDA), not by where the base lies: keyed by its path, every new venv dsbisect was
        installed in (a second clone, a re-created venv) built each DeepSpeed sdist again."""
        torch = base_env.torch_identity(torch_site)
        key = {"python": os.path.realpath(self.python), "torch": torch} if torch else {"site": list(torch_site)}
        out = self.paths.wheels / digest(key)
        out.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.paths.lock(f"wheel-{out.name}-{name}-{version}"))):
            if not any(file_is(w.name, name, version) for w in out.glob("*.whl")):
                builder = self.builder(torch_site, context, hold)
                self.log(f"building a wheel of {name}=={version} (its setup.py imports torch)")
                self._pip_wheel(builder, [f"{name}=={version}"], out)
        return out

    def commit(self, src: GitSource, wheelhouses: tuple[str, ...], torch_site: tuple[str, ...],
               context: tuple[str, ...], hold: tuple[str, ...]) -> Path:
        """A wheel of ``src.package`` at ``src.commit`` (with ``src.reverted`` reverted, for the
        revert proof): from a wheelhouse, the cache, or built."""
        for d in wheelhouses:  # built ahead by ``dsbisect prefetch --git-repo``
            ready = sorted((Path(d) / "commits" / src.ident).glob("*.whl"))
            if ready:
                return ready[0]
        out = self.paths.commit_wheels / src.ident
        with FileLock(str(self.paths.lock(f"commit-{src.ident}"))):
            found = sorted(out.glob("*.whl")) if out.is_dir() else []
            if found:
                return found[0]
            builder = self.builder(torch_site, context, hold)
            what = f"{src.commit[:10]} with {src.reverted[:10]} reverted" if src.reverted else src.short
            self.log(f"building {src.package} from commit {what}")
            return self._build_commit(src, builder, out)

    def _build_commit(self, src: GitSource, builder: Path, out: Path) -> Path:
        with tempfile.TemporaryDirectory(prefix="dsbisect-src-") as tmp:
            checkout = Path(tmp) / "src"
            if src.reverted and not src.tree:
                raise EnvBuildError(f"{src.package}@{src.short}: the tree of the revert is not known "
                                    "(it is made by the bisection's revert proof)")
            export_commit(Path(src.repo), src.tree or src.commit, checkout,
                          SOURCE_PATHS.get(canonicalize_name(src.package), ()))
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
        cmd = [builder / "bin" / "python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--disable-pip-version-check", "--wheel-dir", out, *self.uv.index.pip_args(), *what]
        # the bytecode of what setup.py imports (the base's torch) is cached, as the venv's later is
        env = proc.writes_bytecode(pip_child_env(proc.clean_env({"DS_BUILD_OPS": "0", "DSBISECT_COMPAT": ",".join(SHIMS)})))
        done = proc.run(cmd, env=env)
        if not done.ok:
            raise EnvBuildError(f"building {' '.join(what)} failed: {build_error(done.output or done.error)}")


def build_error(text: str) -> str:
    """The exception line of a failed setup.py, else the resolver-style summary."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Error " in ln) and not ln.startswith(("ERROR:", "error:", "note:", "hint:", "×", "╰")):
            return ln[:400]
    return reason(text)


def export_commit(repo: Path, commit: str, dest: Path, paths: tuple[str, ...]) -> None:
    """Write the tree of ``commit`` (a commit or a tree object; only ``paths`` if given) into ``dest``."""
    dest.mkdir(parents=True)
    tree = gitrepo.git(repo, "ls-tree", "--name-only", commit, keep=proc.DATA)
    if not tree.ok or tree.cut:
        raise EnvBuildError(f"git cannot read {commit[:10]} in {repo}: {tree.last_line()}")
    present = set(tree.stdout.split())
    chosen = [p for p in paths if p in present] if paths else []
    with tempfile.TemporaryFile() as buf:
        done = gitrepo.git(repo, "archive", "--format=tar", commit, *chosen, stdout=buf)
        if not done.ok:
            raise EnvBuildError(f"git archive {commit[:10]} failed: {done.stderr.strip()[-300:] or done.error}")
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            tar.extractall(dest, filter="data")
