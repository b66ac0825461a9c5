"""Which distribution a module came from, and the version of a distribution a folder holds now.

Read from a site folder's own ``*.dist-info`` and ``*.egg-info`` entries, not through
``importlib.metadata``: in a layered point venv the stubs of the base's distributions
(``base.write_stubs``, installer ``dsbisect-base``) come first there and keep the version the
base had when the venv was built, while the module is imported from the base as it is now.
Stubs are no distributions here.  A folder is read once per state (its mtime changes when a
distribution is installed, removed or upgraded: its ``.dist-info`` folder is renamed).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.envs.base import STUB_INSTALLER, name_version


def owners(folder: str | Path) -> Mapping[str, tuple[tuple[str, str], ...]]:
    """Top-level module -> ((canonical name, version), ...) of the distributions in ``folder``
    that provide it (a namespace package may have several); {} for no folder."""
    state = _state(folder)
    return _folder(str(folder), state)[1] if state is not None else {}


def version_in(folder: str | Path, name: str) -> str | None:
    """The version of distribution ``name`` installed in ``folder`` now, None when none is."""
    state = _state(folder)
    return _folder(str(folder), state)[0].get(canonicalize_name(name)) if state is not None else None


def _state(folder: str | Path) -> int | None:
    try:
        return os.stat(folder).st_mtime_ns
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def _folder(folder: str, mtime_ns: int) -> tuple[dict[str, str], dict[str, tuple[tuple[str, str], ...]]]:
    """({canonical name: version}, {top-level module: ((name, version), ...)}) of ``folder``."""
    versions: dict[str, str] = {}
    tops: dict[str, list[tuple[str, str]]] = {}
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return {}, {}
    for entry in entries:
        if not entry.endswith((".dist-info", ".egg-info")):
            continue
        info = Path(folder) / entry
        if _is_stub(info):
            continue
        name, version = _name_version(info)
        if not name or canonicalize_name(name) in versions:
            continue
        versions[canonicalize_name(name)] = version
        for top in _top_levels(info):
            tops.setdefault(top, []).append((canonicalize_name(name), version))
    return versions, {k: tuple(v) for k, v in tops.items()}


def _is_stub(info: Path) -> bool:
    try:
        return (info / "INSTALLER").read_text().strip() == STUB_INSTALLER
    except OSError:
        return False


def _name_version(info: Path) -> tuple[str, str]:
    for meta in (info / "METADATA", info / "PKG-INFO"):
        try:
            with open(meta, errors="replace") as f:
                return name_version(f.read(16 << 10))  # the header comes first
        except OSError:
            continue
    return "", ""


def _top_levels(info: Path) -> list[str]:
    """The top-level modules a distribution provides: its ``top_level.txt``, else its RECORD's
    first path parts."""
    try:
        return (info / "top_level.txt").read_text().split()
    except OSError:
        pass
    tops: set[str] = set()
    try:
        with open(info / "RECORD", errors="replace") as f:
            for line in f:
                first = line.split(",", 1)[0].split("/", 1)[0]
                if first and not first.endswith((".dist-info", ".data", ".pth")) and first not in ("..", "__pycache__"):
                    tops.add(first.removesuffix(".py").split(".", 1)[0])
    except OSError:
        pass
    return sorted(tops)
