"""``dsbisect store repair`` (a lost or damaged index rebuilt), ``dsbisect envs list`` and
``dsbisect envs prune`` (the cache of point venvs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import HelpCommand, envs_app, store_app, user_errors
from dsbisect.cli.options import CacheOpt, StoreOpt
from dsbisect.cli.output import out, say
from dsbisect.render.report import envs_table
from dsbisect.run import upkeep


@store_app.command("repair", cls=HelpCommand)
def store_repair(store: StoreOpt = Path(".dsbisect")) -> None:
    """Rebuild a lost or damaged dsbisect.sqlite3 from the records in the run folders."""
    with user_errors():
        for line in upkeep.repair_store(store):
            say(line)


@envs_app.command("list", cls=HelpCommand)
def envs_list(cache_dir: CacheOpt = None) -> None:
    """List the cached point venvs with their pins and size."""
    with user_errors():
        out.print(envs_table(upkeep.cached_envs(cache_dir)))


@envs_app.command("prune", cls=HelpCommand)
def envs_prune(
    cache_dir: CacheOpt = None,
    everything: Annotated[bool, typer.Option("--all", help="Every venv of the cache.")] = False,
    older_than: Annotated[Optional[float], typer.Option("--older-than", metavar="DAYS", min=0, help="Only venvs unused for this many days.")] = None,
) -> None:
    """Delete cached point venvs (--all, or those unused for --older-than days) and half-built ones.
    Venvs being built or run from are kept."""
    with user_errors():
        pruned = upkeep.prune_envs(cache_dir, everything, older_than)
        say(f"removed {len(pruned.removed)} venv(s)" + (f"; kept {len(pruned.busy)} in use" if pruned.busy else ""))
