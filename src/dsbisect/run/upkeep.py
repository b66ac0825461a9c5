"""Looking after what runs leave behind: a store opened to be read (reports, a log), a damaged
store's index rebuilt, and the cache of point venvs listed or pruned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import InputError
from dsbisect.envs.venvs import CachedEnv, EnvManager
from dsbisect.run.session import cache_root
from dsbisect.store.repair import repair
from dsbisect.store.store import Store, check_store_path


def read_store(path: Path) -> Store:
    """The store at ``path``, read-only: reports work on a store one may not write (a shared or
    committed one); an InputError when there is none."""
    return Store(check_store_path(path, writable=False), readonly=True)


def repair_store(path: Path) -> list[str]:
    """Rebuild a lost or damaged index from the records in the run folders; what to tell the user
    (where the damaged database went, rows that could not be read)."""
    rebuilt, moved = repair(path)
    rebuilt.close()
    said = [f"the damaged database was moved to {moved}"] if moved else []
    return said + list(rebuilt.notes)


def cached_envs(cache_dir: Path | None) -> list[CachedEnv]:
    """The point venvs of the cache, with their pins and size."""
    return EnvManager(cache_root(cache_dir)).existing()


@dataclass(frozen=True)
class Pruned:
    removed: tuple[Path, ...]
    busy: tuple[Path, ...]  # kept: being built or run from


def prune_envs(cache_dir: Path | None, everything: bool, older_than_days: float | None) -> Pruned:
    """Delete every cached venv (``everything``), or those unused for ``older_than_days``, and
    half-built ones; an InputError when neither (or both) is asked, or there is no cache."""
    if everything == (older_than_days is not None):
        raise InputError("say which venvs: --all, or --older-than DAYS")
    if older_than_days is not None and not math.isfinite(older_than_days):  # nan would prune every venv
        raise InputError(f"--older-than {older_than_days}: expected a number of days")
    root = cache_root(cache_dir)
    if not (root / "envs").is_dir():
        raise InputError(f"no venv cache in {root}")
    seconds = older_than_days * 86400 if older_than_days is not None else None
    removed, busy = EnvManager(root).prune(older_than_s=seconds)
    return Pruned(tuple(removed), tuple(busy))
