"""The layout of the env root (``--cache-dir``): venvs, wheels, builders, ops, locks, uv's cache.

One filesystem for all of it, so uv links files instead of copying them.  The root is
marked with a ``CACHEDIR.TAG`` and a ``*`` ``.gitignore``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MARKER = "dsbisect-env.json"  # written last into a finished venv or builder


@dataclass(frozen=True)
class CachePaths:
    root: Path

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def commit_wheels(self) -> Path:
        return self.wheels / "commits"

    @property
    def builders(self) -> Path:
        return self.root / "builders"

    @property
    def ops(self) -> Path:
        """Just-in-time ops built once per digest of what they are built from (``_hook/dsbisect_ops.py``)."""
        return self.root / "ops"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    def lock(self, name: str) -> Path:
        return self.locks / f"{name}.lock"

    @property
    def uv_cache(self) -> Path:
        return Path(os.environ.get("UV_CACHE_DIR") or self.root / "uv")

    def create(self) -> None:
        for d in (self.envs, self.wheels, self.builders, self.locks, self.ops):
            d.mkdir(parents=True, exist_ok=True)
        tag = self.root / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# dsbisect's venvs and wheels.\n")
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")


def disk_usage(path: Path) -> int:
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
