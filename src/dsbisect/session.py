"""One factory for what every command that runs points needs: store, venvs, runner, executor.

``run``, ``bisect`` and a Slurm job's ``run-one`` all get their ``Runner`` from here, so a
run is made the same way whichever command asked for it.  Everything is checked before
anything is created on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from platformdirs import user_cache_dir

from . import facts
from .envs import EnvManager
from .errors import InputError
from .model import EnvOptions, IndexOptions
from .runner import Executor, Runner
from .store import Store

Progress = Callable[[str, str], None]


def cache_root(cache_dir: Path | None) -> Path:
    """The env root: ``--cache-dir``, else the user's cache dir."""
    return (cache_dir or Path(user_cache_dir("dsbisect"))).expanduser()


def index_options(offline: bool, find_links: list[Path] | None, index_url: str | None,
                  extra: list[str] | None) -> IndexOptions:
    links = []
    for d in find_links or []:
        if not d.is_dir():
            raise InputError(f"--find-links {d}: no such folder")
        links.append(str(d.resolve()))
    if offline and not links:
        raise InputError("--offline needs at least one --find-links wheelhouse")
    return IndexOptions(offline=offline, find_links=tuple(links), index_url=index_url,
                        extra_index_urls=tuple(extra or ()))


def make_runner(store: Store, cache_dir: Path | None, env_options: EnvOptions, index: IndexOptions,
                progress: Progress, *, rerun: bool = False, jobs: int | None = None,
                executor: Executor | None = None) -> Runner:
    envs = EnvManager(cache_root(cache_dir), env_options, index, log=lambda s: progress("env", s))
    return Runner(store=store, envs=envs, gpus=facts.gpus(), gpu_ids=facts.gpu_indices(), progress=progress,
                  rerun=rerun, jobs=jobs, executor=executor)


def open_runner(store_dir: Path, cache_dir: Path | None, env_options: EnvOptions, index: IndexOptions,
                progress: Progress, **kw) -> Runner:
    """The runner of ``run`` and ``bisect``: the store at ``store_dir``, venvs under the cache."""
    return make_runner(Store(store_dir), cache_dir, env_options, index, progress, **kw)
