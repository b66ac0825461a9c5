"""Options that several commands share: each declared once, as an ``Annotated`` alias, and
gathered into frozen groups (``groups.grouped``) that the commands receive.

The groups of the settings every command that runs points shares subclass ``run.settings``'s
values, adding only how each field is spelled on the command line: a command hands them on as
they are.  ``Shown`` (the report's format and file) is the command line's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli import writeguard
from dsbisect.core.errors import InputError
from dsbisect.core.model import BaseMode, LauncherBackend
from dsbisect.run.settings import ExecutorKind, Limits, Nodes, Placement, Settings, Sources, Venvs

MAX_COUNT = 100_000  # a --repeat, --confirm or --jobs beyond this is a typo, not a plan

StoreOpt = Annotated[Path, typer.Option("--store", help="Folder of the SQLite store and run logs.", envvar="DSBISECT_STORE", readable=False)]  # dsbisect says "permission denied" itself
CasesOpt = Annotated[Optional[list[str]], typer.Option("--case", help="Only this case (repeatable).")]
RepeatOpt = Annotated[int, typer.Option("--repeat", min=1, max=MAX_COUNT, help="Runs per point (for intermittent hangs); bad if any run is bad.")]
CacheOpt = Annotated[Optional[Path], typer.Option("--cache-dir", "--env-root", help="Where venvs, wheels and uv's cache live (default: the user cache dir; on a cluster, shared storage).", envvar="DSBISECT_CACHE_DIR")]

OfflineOpt = Annotated[bool, typer.Option("--offline", help="No network: packages come from --find-links only.")]
FindLinksOpt = Annotated[Optional[list[Path]], typer.Option("--find-links", metavar="DIR", help="A local wheelhouse (repeatable).")]
IndexUrlOpt = Annotated[Optional[str], typer.Option("--index-url", metavar="URL", help="Package index (PEP 503/691 simple API).", envvar="DSBISECT_INDEX_URL")]
ExtraIndexUrlOpt = Annotated[Optional[list[str]], typer.Option("--extra-index-url", metavar="URL", help="Extra package index (repeatable).")]

PythonOpt = Annotated[Optional[str], typer.Option("--python", help="Interpreter (and, layered, environment) the point venvs are made from.")]
BaseOpt = Annotated[Optional[BaseMode], typer.Option("--base", help="How point venvs see that environment (default from matrix.yaml, else auto).")]

TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", help="Wall time a run may take (overrides the matrix).")]
CollectiveTimeoutOpt = Annotated[Optional[float], typer.Option("--collective-timeout", help="The ranks' collective timeout: the default of torch's process groups and of deepspeed.init_distributed (a script that sets its own keeps it).")]
IdleTimeoutOpt = Annotated[Optional[float], typer.Option("--idle-timeout", help="A hang when no log grows and no rank's stack moves for this long.")]
NoEarlyHangOpt = Annotated[bool, typer.Option("--no-early-hang", help="Wait for the collective timeout even when the ranks' state proves a deadlock.")]

HostfileOpt = Annotated[Optional[Path], typer.Option("--hostfile", help="Multi-node: the deepspeed launcher's hostfile (overrides the matrix).")]
NumNodesOpt = Annotated[Optional[int], typer.Option("--num-nodes", min=1, max=MAX_COUNT, help="Multi-node: use the first N hosts of the hostfile.")]
LauncherBackendOpt = Annotated[Optional[LauncherBackend], typer.Option("--launcher-backend", help="Multi-node back end of the deepspeed launcher.")]
MasterAddrOpt = Annotated[Optional[str], typer.Option("--master-addr", help="Multi-node: address of the node of rank 0.")]
IncludeOpt = Annotated[Optional[str], typer.Option("--include", help="The deepspeed launcher's --include, e.g. 'node1@node2:0,1'.")]
ExcludeOpt = Annotated[Optional[str], typer.Option("--exclude", help="The deepspeed launcher's --exclude.")]

JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, max=MAX_COUNT, help="Points at once (default: one per free GPU slice, or per nproc CPU cores; 8 Slurm jobs with --executor slurm).")]
ExecutorOpt = Annotated[ExecutorKind, typer.Option("--executor", help="Where runs go: here, or one Slurm job per run (sbatch).")]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Slurm partition of the jobs (--executor slurm).")]
SlurmTimeOpt = Annotated[Optional[int], typer.Option("--slurm-time", min=1, max=10**7, help="Slurm time limit per job, minutes (default: the case timeout + 30).")]
GpusPerJobOpt = Annotated[Optional[int], typer.Option("--gpus-per-job", min=0, max=MAX_COUNT, help="GPUs per node of each Slurm job (default: nproc for accelerator: cuda, else 0).")]
SlurmArgOpt = Annotated[Optional[list[str]], typer.Option("--slurm-arg", help="Another sbatch argument, e.g. --slurm-arg=--account=abc (repeatable).")]


class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"
    html = "html"  # dsbisect report and dsbisect show only (Shown.check)
    github = "github"  # dsbisect bisect only: a GitHub Actions step's summary, outputs, annotations (cli.github)


FormatOpt = Annotated[Format, typer.Option("--format", help="Report format on stdout.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the report to this file.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")]


@dataclass(frozen=True)
class LimitOpts(Limits):
    timeout: TimeoutOpt = None
    collective_timeout: CollectiveTimeoutOpt = None
    idle_timeout: IdleTimeoutOpt = None
    no_early_hang: NoEarlyHangOpt = False


@dataclass(frozen=True)
class SourceOpts(Sources):
    offline: OfflineOpt = False
    find_links: FindLinksOpt = None
    index_url: IndexUrlOpt = None
    extra_index_url: ExtraIndexUrlOpt = None


@dataclass(frozen=True)
class VenvOpts(Venvs):
    cache_dir: CacheOpt = None
    python: PythonOpt = None
    base: BaseOpt = None


@dataclass(frozen=True)
class PlacementOpts(Placement):
    jobs: JobsOpt = None
    executor: ExecutorOpt = ExecutorKind.local
    partition: PartitionOpt = None
    slurm_time: SlurmTimeOpt = None
    gpus_per_job: GpusPerJobOpt = None
    slurm_arg: SlurmArgOpt = None


@dataclass(frozen=True)
class NodeOpts(Nodes):
    hostfile: HostfileOpt = None
    num_nodes: NumNodesOpt = None
    launcher_backend: LauncherBackendOpt = None
    master_addr: MasterAddrOpt = None
    include: IncludeOpt = None
    exclude: ExcludeOpt = None


@dataclass(frozen=True)
class SettingsOpts(Settings):
    """``--store``, then the limits, sources, venvs, placement and nodes of a command that runs points."""

    store: StoreOpt = Path(".dsbisect")
    limits: LimitOpts = field(default_factory=LimitOpts)
    sources: SourceOpts = field(default_factory=SourceOpts)
    venvs: VenvOpts = field(default_factory=VenvOpts)
    placement: PlacementOpts = field(default_factory=PlacementOpts)
    nodes: NodeOpts = field(default_factory=NodeOpts)


@dataclass(frozen=True)
class Shown:
    """The report's format on stdout, the file it is also written to, and whether progress is shown."""

    fmt: FormatOpt = Format.table
    output: OutputOpt = None
    quiet: QuietOpt = False

    def check(self, html: bool = False, github: bool = False) -> None:
        """--output checked before anything runs (a bisection's hours are not lost to a typo)."""
        if self.fmt is Format.github and not github:
            raise InputError("--format github is for dsbisect bisect (a GitHub Actions step's summary and outputs)")
        if self.fmt is Format.html and not html:
            raise InputError("--format html is for dsbisect report and dsbisect show; run dsbisect report "
                             "--format html -o FILE when this is done")
        if self.output is not None:
            writeguard.check_output(self.output, "--output")
