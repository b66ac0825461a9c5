"""The base environment point venvs are made from, and what a venv borrows from it.

- ``inspect_base``: the interpreter's version, site-packages and distributions.
- *Layering*: a ``.pth`` that ``site.addsitedir``s the base's site-packages after the
  venv's own, so the cluster's CUDA torch is reused.
- *Stubs*: uv cannot see packages outside the venv, so a layered venv holds stub
  dist-infos of the base's distributions (METADATA and entry points, empty RECORD): uv
  resolves against what is really importable and installs a shadowing copy of what does
  not satisfy a pin.
- The start-up hook (``_hook/dsbisect_hook.py``) that every point venv carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.core import proc
from dsbisect.core.errors import EnvBuildError, InputError
from dsbisect.core.model import digest

STUB_INSTALLER = "dsbisect-base"
STUB_FILES = ("METADATA", "entry_points.txt", "top_level.txt")

_BASE_QUERY = r"""
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
        return digest({"python": self.python, "site": list(self.site_dirs), "dists": listing})

    def version_of(self, name: str) -> str | None:
        for n, v, _ in self.dists:
            if canonicalize_name(n) == canonicalize_name(name):
                return v
        return None

    def metadata(self) -> Iterator[tuple[str, str, dict[str, str]]]:
        """(name, version, {file: text}) of each distribution, for stubs."""
        for name, version, path in self.dists:
            files = dist_files(Path(path))
            if files:
                yield name, version, files


def find_python(python: str | None) -> str:
    """The interpreter ``--python`` names (default: dsbisect's own), or an InputError."""
    exe = python or sys.executable
    found = shutil.which(exe) if os.path.sep not in exe else exe
    if not found or not Path(found).exists():
        raise InputError(f"python interpreter {exe!r} not found")
    return found


def inspect_base(python: str | None) -> Base:
    found = find_python(python)
    done = proc.run([found, "-c", _BASE_QUERY], env=proc.clean_env())
    if not done.ok:
        raise InputError(f"cannot inspect {found}: {done.last_line()}")
    data = json.loads(done.stdout)
    return Base(python=data["executable"], version=data["version"], site_dirs=tuple(data["site"]),
                dists=tuple(tuple(d) for d in data["dists"]))


# What every rank of a torch job imports (torchrun's module, and torch._dynamo, which DeepSpeed
# imports): about 1,600 of torch's 6,300 modules.
RANK_IMPORTS = ("torch", "torch.distributed.run", "torch._dynamo")


def missing_bytecode(base: Base) -> bool:
    """Whether the base's torch has no bytecode cached for the base's interpreter: installed with
    ``pip install --no-compile`` (as README command 1 does: pip compiles all 6,300 of torch's
    modules, 31 s on 2 cores, where a rank imports a quarter of them)."""
    major, minor = base.version.split(".")[:2]
    for d in base.site_dirs:
        init = Path(d) / "torch" / "__init__.py"
        if init.exists():
            return not (init.parent / "__pycache__" / f"__init__.cpython-{major}{minor}.pyc").exists()
    return False


def cache_bytecode(base: Base, log=lambda msg: None, timeout: float = 600) -> bool:
    """Have Python cache the bytecode of what a rank imports from the base's torch, where it is
    missing: one import of ``RANK_IMPORTS`` in the base, with bytecode writing allowed (without
    it, under ``PYTHONDONTWRITEBYTECODE``, every launcher and rank of every run would compile
    those modules again: 3 CPU-s each). True if it ran and succeeded. A base it cannot write to
    (a system Python) is left as it is: Python skips bytecode it cannot write."""
    if not missing_bytecode(base):
        return False
    log("caching the bytecode of the base's torch for its ranks (installed without it; once)")
    env = proc.writes_bytecode(proc.clean_env())
    script = ("import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n"
              "    except Exception:\n        pass\n" % (RANK_IMPORTS,))  # torch < 2 has no _dynamo
    done = proc.run([base.python, "-c", script], env=env, timeout=timeout)
    if not done.ok:
        log(f"could not cache the base's bytecode: {done.last_line()}")
    return done.ok


_TORCH_CUDA = re.compile(r"""^cuda\s*(?::[^=]*)?=\s*(?:None|['"]([^'"]*)['"])""", re.MULTILINE)


def torch_cuda(site_dirs: Iterable[str | Path]) -> str | None:
    """``torch.version.cuda`` of the first torch in ``site_dirs``, read from its ``version.py``
    without importing it: "12.1", "" for a build without CUDA, None when no torch is there."""
    for d in site_dirs:
        try:
            text = (Path(d) / "torch" / "version.py").read_text(errors="replace")
        except OSError:
            continue
        m = _TORCH_CUDA.search(text)
        return (m[1] or "") if m else None
    return None


def torch_identity(site_dirs: Iterable[str | Path]) -> str | None:
    """A digest of the first torch in ``site_dirs``, from its ``version.py`` (its version, git
    commit, CUDA, HIP) without importing it; None when no torch is there. Two bases holding the
    same torch build (a second clone's venv, a re-created one) have the same identity."""
    for d in site_dirs:
        try:
            data = (Path(d) / "torch" / "version.py").read_bytes()
        except OSError:
            continue
        return hashlib.sha256(data).hexdigest()[:24]
    return None


# ------------------------------------------------------------------- a venv's site


def site_packages(venv: Path) -> Path:
    found = list((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise EnvBuildError(f"{venv} has no site-packages")
    return found[0]


def has_module(venv: Path, module: str) -> bool:
    """Whether the venv's Python finds top-level ``module`` in its site-packages or in a folder
    a ``.pth`` there adds (the base's layer, ``write_layer``, and the base's own ``.pth`` folders),
    read from the files, without running it.  True, as unknown, for a venv that sees the
    system's site-packages."""
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file() and re.search(r"^include-system-site-packages\s*=\s*true", cfg.read_text(), re.M | re.I):
        return True
    try:
        todo = [site_packages(venv)]
    except EnvBuildError:
        return False
    seen: set[Path] = set()
    while todo and len(seen) < 64:
        folder = todo.pop()
        if folder in seen or not folder.is_dir():
            continue
        seen.add(folder)
        if (folder / module / "__init__.py").is_file() or (folder / f"{module}.py").is_file():
            return True
        todo += _pth_folders(folder)
    return False


def _pth_folders(folder: Path) -> list[Path]:
    """The folders the ``.pth`` files of a site folder add: plain lines and ``site.addsitedir``."""
    out = []
    for pth in folder.glob("*.pth"):
        try:
            text = pth.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = re.search(r"addsitedir\((['\"])(.+?)\1\)", line)
            if m:
                out.append(Path(m[2]))
            elif line.strip() and not line.startswith(("#", "import ", "import\t")):
                out.append(folder / line.strip())
    return out


def write_layer(site_dir: Path, base_dirs: Iterable[str]) -> None:
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in base_dirs)
    (site_dir / "_dsbisect_base.pth").write_text(lines)


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


def dists_in(site_dirs: Iterable[str]) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(name, version, {file: text}) of the distributions installed in ``site_dirs``, first wins."""
    seen = set()
    for d in site_dirs:
        for info in sorted(Path(d).glob("*.dist-info")):
            files = dist_files(info)
            if not files:
                continue
            name, version = name_version(files["METADATA"])
            if name and canonicalize_name(name) not in seen:
                seen.add(canonicalize_name(name))
                yield name, version, files


def write_stubs(site_dir: Path, items: Iterable[tuple[str, str, str | dict[str, str]]]) -> dict[str, str]:
    """Write stub dist-infos: (name, version, METADATA text or {file: text}) each.
    Returns {canonical name: version} of the stubs."""
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


def inventory(site_dir: Path, stubs: dict[str, str]) -> tuple[list[list[str]], list[list[str]]]:
    """What the venv itself holds ([name, version]), and which base packages it shadows
    ([name, base version, point version])."""
    installed, shadowed = [], []
    for info in sorted(site_dir.glob("*.dist-info")):
        installer = info / "INSTALLER"
        if installer.is_file() and installer.read_text().strip() == STUB_INSTALLER:
            continue
        meta = info / "METADATA"
        if not meta.is_file():
            continue
        name, version = name_version(meta.read_text(errors="replace"))
        installed.append([name, version])
        base_version = stubs.get(canonicalize_name(name))
        if base_version and base_version != version:
            shadowed.append([name, base_version, version])
    return installed, shadowed


def name_version(metadata: str) -> tuple[str, str]:
    name = version = ""
    for line in metadata.splitlines():
        if line.startswith("Name:") and not name:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and not version:
            version = line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return name, version


# ------------------------------------------------------------------------ the hook


def hook_source(name: str = "dsbisect_hook") -> str:
    return resources.files("dsbisect").joinpath(f"_hook/{name}.py").read_text()


def install_launchers(venv: Path, entries: Mapping[str, str]) -> None:
    """``bin/NAME`` running ``python -m MODULE`` with the venv's python for each of ``entries``
    (``launchers.VENV_ENTRIES``: torchrun, deepspeed, accelerate), where the venv has none of its own."""
    for name, module in entries.items():
        entry = venv / "bin" / name
        if not entry.exists():
            entry.write_text(f'#!/bin/sh\nexec "$(dirname "$0")/python" -m {module} "$@"\n')
            entry.chmod(0o755)


def install_hook(venv: Path, entries: Mapping[str, str]) -> None:
    """(Re)write dsbisect's start-up hook and the launchers' ``entries`` into the venv; cheap, and
    keeps old envs current."""
    install_launchers(venv, entries)
    site_dir = site_packages(venv)
    # the hook, and what it imports when asked
    for name in ("dsbisect_hook", "dsbisect_ops", "dsbisect_trace", "dsbisect_measure"):
        src = hook_source(name)
        target = site_dir / f"{name}.py"
        if not target.is_file() or target.read_text() != src:
            target.write_text(src)
    pth = site_dir / "dsbisect_hook.pth"
    if not pth.is_file():
        pth.write_text("import dsbisect_hook\n")
