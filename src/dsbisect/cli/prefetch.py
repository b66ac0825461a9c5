"""``dsbisect prefetch`` (a wheelhouse for --offline use) and ``dsbisect snapshot-base`` (what a
compute node's base environment holds, for ``prefetch --base-snapshot``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli import writeguard
from dsbisect.cli.app import HelpCommand, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import CacheOpt, CasesOpt, SourceOpts
from dsbisect.cli.output import check_output, out, say, write_output
from dsbisect.core.outside import safe_text
from dsbisect.offline.wheelhouse import PrefetchRequest, prefetch as fill_wheelhouse


@dataclass(frozen=True)
class PrefetchOpts(PrefetchRequest):
    matrix: Annotated[Optional[Path], typer.Argument(help="The matrix file (default matrix.yaml; with --no-cases, read only when there).")] = None
    dest: Annotated[Path, typer.Option("--dest", help="The wheelhouse folder to fill.")] = Path("wheelhouse")
    case: CasesOpt = None
    versions: Annotated[Optional[list[str]], typer.Option("--versions", metavar="PKG=V1,V2", help="As run's with MATRIX: the cases at these versions of a package instead of their own (repeatable).")] = None
    with_candidates: Annotated[bool, typer.Option("--with-candidates", help="Also every release between the lowest and highest version of each axis (with --good-env: of each change).")] = False
    python_version: Annotated[Optional[str], typer.Option("--python-version", help="The target's Python, e.g. 3.12.")] = None
    platform_tag: Annotated[Optional[list[str]], typer.Option("--platform", help="The target's platform tags, e.g. manylinux_2_17_x86_64 (repeatable).")] = None
    base_snapshot: Annotated[Optional[Path], typer.Option("--base-snapshot", help="The target's base (from `dsbisect snapshot-base`): only what it lacks is fetched.")] = None
    tool: Annotated[bool, typer.Option("--tool", help="Also dsbisect's own dependencies.")] = False
    cases_too: Annotated[bool, typer.Option("--cases/--no-cases", help="Fetch what the cases need (default), or only --tool/--commits.")] = True
    extra: Annotated[Optional[list[str]], typer.Option("--extra", help="Another requirement to fetch, e.g. 'setuptools<75' for building commits offline (repeatable).")] = None
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="Build wheels of commits of this clone (with --commits).")] = None
    commits: Annotated[Optional[str], typer.Option("--commits", help="Tags or hashes; every first-parent commit in between (with --git-repo).")] = None
    package: Annotated[str, typer.Option("--package", help="The package the clone builds (with --git-repo).")] = "deepspeed"
    good_env: Annotated[Optional[str], typer.Option("--good-env", metavar="ENV", help="With --bad-env: what `bisect --good-env/--bad-env` installs: every pin of both (level 1); with --with-candidates every release between each change's two versions (level 2). The matrix's cases only with --case. Any ENV bisect takes: a file, SPEC@DATE, git:REV:PATH.")] = None
    bad_env: Annotated[Optional[str], typer.Option("--bad-env", metavar="ENV", help="The broken environment (with --good-env).")] = None
    hold: Annotated[Optional[list[str]], typer.Option("--hold", metavar="NAME", help="As bisect's: keep this package at the target base's version, not fetched (repeatable).")] = None


@app.command("snapshot-base", cls=HelpCommand)
def snapshot_base(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the snapshot (JSON).")],
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter whose environment to describe.")] = None,
) -> None:
    """Write what this (compute node's) base environment holds, for `prefetch --base-snapshot`."""
    from dsbisect.offline.prefetch import snapshot

    with user_errors():
        check_output(output)
        data = snapshot(python)
        write_output(json.dumps(data), output)
        say(f"{len(data['dists'])} distributions of {data['python']} (python {data['python_version']}, "
            f"{data['platform']}) written to {output}")


@app.command(cls=HelpCommand)
@grouped
def prefetch(*, request: PrefetchOpts, cache_dir: CacheOpt = None, sources: SourceOpts) -> None:
    """Download (and build) everything the matrix's points (or two environments) need into a wheelhouse for --offline use."""
    with user_errors():
        if not sources.offline:  # --offline is refused first, by the prefetch itself
            writeguard.check_output(request.dest, "--dest", folder=True)
        fetched = fill_wheelhouse(request, cache_dir, sources, say)
        say(f"{len(fetched.added)} file(s) added; {fetched.dest} holds {fetched.size / 1e6:.1f} MB")
        for name in fetched.added:
            out.print(safe_text(name))
