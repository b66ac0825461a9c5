"""One factory for what every command that runs points needs: store, venvs, runner, executor.

``run``, ``bisect`` and a Slurm job's ``run-one`` all get their ``Runner`` from here, so a
run is made the same way whichever command asked for it.  Everything is checked before
anything is created on disk.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import socket
from collections.abc import Callable
from pathlib import Path

from platformdirs import user_cache_dir

from dsbisect.envs import facts
from dsbisect.envs import indexes
from dsbisect.launch import reaper
from dsbisect.envs.venvs import EnvManager
from dsbisect.core.errors import InputError
from dsbisect.core.model import EnvOptions, IndexOptions, RunStatus
from dsbisect.run.executor import Place
from dsbisect.run.local import LocalExecutor
from dsbisect.run.runner import Runner, env_line
from dsbisect.store.store import Store, check_store_path

Progress = Callable[[str, str], None]


_GROUP: list[int] = []  # the --shared-group's gid, once given


def share_with(group: str | None) -> None:
    """Everything dsbisect (and the runs it starts) creates from now on is private to the user
    (umask 077), or shared with ``group`` (umask 007; roots made group-owned and setgid)."""
    if group is None:
        os.umask(0o077)
        return
    try:
        gid = grp.getgrnam(group).gr_gid if not group.isdigit() else int(group)
    except KeyError:
        raise InputError(f"--shared-group {group}: no such group") from None
    os.umask(0o007)
    _GROUP[:] = [gid]


def make_shared(folder: Path) -> None:
    """Give ``folder`` (a store or env root) to the shared group, setgid so what is created inside
    stays the group's.  Nothing to do without --shared-group."""
    if not _GROUP:
        return
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.chown(folder, -1, _GROUP[0])
        os.chmod(folder, 0o2770)
    except PermissionError as e:
        raise InputError(f"--shared-group: cannot give {folder} to the group ({e.strerror})") from None


def cache_root(cache_dir: Path | None) -> Path:
    """The env root: ``--cache-dir``, else the user's cache dir; an InputError when it, or the
    folder it would be made in, is a file."""
    root = (cache_dir or Path(user_cache_dir("dsbisect"))).expanduser()
    there = next((p for p in (root, *root.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise InputError(f"--cache-dir {root}: {there} is a file, not a folder")
    return root


def index_options(offline: bool, find_links: list[Path] | None, index_url: str | None,
                  extra: list[str] | None) -> IndexOptions:
    """Where packages come from, resolved once for listing releases, installing and building
    alike: the command line, then uv's environment and files, then pip's (indexes.resolve).
    ``origin`` is the line reports show; ``notes`` say which of the user's pip/uv settings were
    left out, then which configuration files were read (``open_runner`` says them)."""
    links = []
    for d in find_links or []:
        if not d.is_dir():
            raise InputError(f"--find-links {d}: no such folder")
        links.append(str(d.resolve()))
    given = IndexOptions(offline=offline, find_links=tuple(links), index_url=index_url,
                         extra_index_urls=tuple(extra or ()))
    resolved = indexes.resolve(given, os.environ, Path.cwd(), Path.home())
    ix = resolved.index
    if ix.offline and not ix.find_links:
        src = resolved.source("offline")
        raise InputError(f"{'--offline' if src == '--offline' else f'offline ({src})'} needs at least one "
                         "--find-links wheelhouse")
    return dataclasses.replace(ix, origin=resolved.describe(), notes=resolved.notes + (
        (f"index settings read from {', '.join(resolved.files)}",) if resolved.notes and resolved.files else ()))


def make_runner(store: Store, cache_dir: Path | None, env_options: EnvOptions, index: IndexOptions,
                progress: Progress, *, rerun: bool = False, jobs: int | None = None,
                place: Place = LocalExecutor) -> Runner:
    """The runner over ``store`` and the venvs under the cache, this machine's GPUs seen, its
    runs made by the executor ``place`` makes (here, unless told otherwise)."""
    envs = EnvManager(cache_root(cache_dir), env_options, index, log=lambda s: progress(*env_line(s)))
    return Runner(store=store, envs=envs, gpus=facts.gpus(), gpu_ids=facts.gpu_indices(), progress=progress,
                  rerun=rerun, jobs=jobs, place=place)


def open_runner(store_dir: Path, cache_dir: Path | None, env_options: EnvOptions, index: IndexOptions,
                progress: Progress, **kw) -> Runner:
    """The runner of ``run`` and ``bisect``: the store at ``store_dir``, venvs under the cache.
    What an earlier dsbisect of this store left running when it died is stopped first."""
    root = cache_root(cache_dir)  # checked before the store is made
    folder = check_store_path(store_dir)
    make_shared(folder)
    make_shared(root)
    store = Store(folder)
    for note in store.notes:
        progress("note", note)
    for note in index.notes:  # the input checked: said once, before anything runs
        progress("note", note)
    reap_orphans(store, progress)
    return make_runner(store, cache_dir, env_options, index, progress, **kw)


def reap_orphans(store: Store, progress: Progress) -> None:
    """Runs left ``running`` by a dsbisect that is gone (of this machine: stop what is left of
    them, found by their tag; of another host whose lease expired: say so) are recorded as
    interrupted, saying so.  A run whose record says it finished is indexed as it says."""
    here = socket.gethostname()
    for r in store.orphans():
        found = reaper.stop_tagged(r.run_dir) if r.run_dir and r.host == here else reaper.Reaped((), ())
        note = r.abandoned or f"the dsbisect that ran it (pid {r.pid}) died"
        if found.stopped:
            note += (f"; {len(found.stopped)} of its processes were still running and were stopped at the "
                     f"next start (pids {', '.join(map(str, found.stopped))})")
        kept = store.abandon_run(r.id, note)
        if kept.status is RunStatus.DONE:
            note = f"it had finished ({kept.outcome.value}); its result is kept from its run folder"
        progress("note", f"run {r.id} ({r.case_name} · {r.point.label}): {note}")
