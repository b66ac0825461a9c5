"""The command line: parse, call, print, map errors to exit codes.

stdout is the report; stderr is progress and errors.  A DsbisectError becomes one red
line and its exit code (0 done, 1 domain failure, 2 bad input, 130 interrupted).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from platformdirs import user_cache_dir
from rich.console import Console

from . import __version__, facts
from . import matrix as matrix_mod
from . import report as rep
from .envs import EnvManager, IndexOptions
from .errors import DsbisectError, InputError, Interrupted
from .matrix import Case, EnvOptions
from .runner import Runner
from .store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Find the release (and commit) of DeepSpeed, Transformers or Accelerate that broke a distributed job.")
envs_app = typer.Typer(no_args_is_help=True, help="List or prune the cached point venvs.")
app.add_typer(envs_app, name="envs")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except DsbisectError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        err.print("[bold red]interrupted[/]")
        raise typer.Exit(Interrupted.exit_code) from None


# ------------------------------------------------------------------ options

StoreOpt = Annotated[Path, typer.Option("--store", help="Folder of the SQLite store and run logs.", envvar="DSBISECT_STORE")]
CacheOpt = Annotated[Optional[Path], typer.Option("--cache-dir", "--env-root", help="Where venvs, wheels and uv's cache live (default: the user cache dir; on a cluster, shared storage).", envvar="DSBISECT_CACHE_DIR")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="No network: packages come from --find-links only.")]
FindLinksOpt = Annotated[Optional[list[Path]], typer.Option("--find-links", help="A local wheelhouse (repeatable).")]
IndexUrlOpt = Annotated[Optional[str], typer.Option("--index-url", help="Package index (PEP 503/691 simple API).", envvar="DSBISECT_INDEX_URL")]
ExtraIndexOpt = Annotated[Optional[list[str]], typer.Option("--extra-index-url", help="Extra package index (repeatable).")]
FormatOpt = Annotated[Format, typer.Option("--format", help="Report format on stdout.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the report to this file.")]
PythonOpt = Annotated[Optional[str], typer.Option("--python", help="Interpreter (and, layered, environment) the point venvs are made from.")]
JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Points at once (default: one per free GPU slice, or per nproc CPU cores; 8 Slurm jobs with --executor slurm).")]
BaseOpt = Annotated[Optional[str], typer.Option("--base", help="layered | isolated | auto (default from matrix.yaml, else auto).")]


class Executor(str, Enum):
    local = "local"
    slurm = "slurm"


ExecutorOpt = Annotated[Executor, typer.Option("--executor", help="Where runs go: here, or one Slurm job per run (sbatch).")]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Slurm partition of the jobs (--executor slurm).")]
SlurmTimeOpt = Annotated[Optional[int], typer.Option("--slurm-time", min=1, help="Slurm time limit per job, minutes (default: the case timeout + 30).")]
GpusPerJobOpt = Annotated[Optional[int], typer.Option("--gpus-per-job", min=0, help="GPUs per node of each Slurm job (default: nproc for accelerator: cuda, else 0).")]
SlurmArgOpt = Annotated[Optional[list[str]], typer.Option("--slurm-arg", help="Another sbatch argument, e.g. --slurm-arg=--account=abc (repeatable).")]
HostfileOpt = Annotated[Optional[Path], typer.Option("--hostfile", help="Multi-node: the deepspeed launcher's hostfile (overrides the matrix).")]
NumNodesOpt = Annotated[Optional[int], typer.Option("--num-nodes", min=1, help="Multi-node: use the first N hosts of the hostfile.")]
BackendOpt = Annotated[Optional[str], typer.Option("--launcher-backend", help="Multi-node: pdsh | openmpi | mvapich | mpich | impi | slurm.")]
MasterAddrOpt = Annotated[Optional[str], typer.Option("--master-addr", help="Multi-node: address of the node of rank 0.")]
IncludeOpt = Annotated[Optional[str], typer.Option("--include", help="The deepspeed launcher's --include, e.g. 'node1@node2:0,1'.")]
ExcludeOpt = Annotated[Optional[str], typer.Option("--exclude", help="The deepspeed launcher's --exclude.")]


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


def cache_root(cache_dir: Path | None) -> Path:
    return (cache_dir or Path(user_cache_dir("dsbisect"))).expanduser()


class ProgressUI:
    """Progress on stderr: one line per finished step, a spinner for the current one."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.status = None

    def __call__(self, kind: str, text: str) -> None:
        if self.quiet:
            return
        if kind in ("done", "reused", "note"):
            err.print(f"  {text}", highlight=False)
            if self.status:
                self.status.update("")
        elif self.status is not None:
            self.status.update(text)
        else:
            err.print(f"  {text}", highlight=False, style="dim")

    @contextmanager
    def running(self) -> Iterator[None]:
        if err.is_terminal and not self.quiet:
            with err.status("starting") as status:
                self.status = status
                try:
                    yield
                finally:
                    self.status = None
        else:
            yield


def emit(text: str, output: Path | None) -> None:
    out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")
    if output:
        output.write_text(text)


# ---------------------------------------------------------------------- run


@app.command()
def run(
    matrix: Annotated[Path, typer.Argument(help="The matrix file.")] = Path("matrix.yaml"),
    case: Annotated[Optional[list[str]], typer.Option("--case", help="Run only this case (repeatable).")] = None,
    rerun: Annotated[bool, typer.Option("--rerun", help="Run points again even if the store has them.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs per point (for intermittent hangs).")] = 1,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Wall timeout per run, seconds (overrides the matrix).")] = None,
    collective_timeout: Annotated[Optional[float], typer.Option("--collective-timeout", help="Collective timeout passed to the scripts, seconds.")] = None,
    idle_timeout: Annotated[Optional[float], typer.Option("--idle-timeout", help="Hang if no output for this long, seconds.")] = None,
    store: StoreOpt = Path(".dsbisect"),
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexOpt = None,
    python: PythonOpt = None,
    base: BaseOpt = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = Executor.local,
    partition: PartitionOpt = None,
    slurm_time: SlurmTimeOpt = None,
    gpus_per_job: GpusPerJobOpt = None,
    slurm_arg: SlurmArgOpt = None,
    hostfile: HostfileOpt = None,
    num_nodes: NumNodesOpt = None,
    launcher_backend: BackendOpt = None,
    master_addr: MasterAddrOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
) -> None:
    """Run every case of MATRIX at every version point and print the pass/fail/hang/skip grid."""
    with user_errors():
        m = matrix_mod.load(matrix)
        cases = [m.case(n) for n in case] if case else list(m.cases)
        cases = [_override(c, timeout, collective_timeout, idle_timeout) for c in cases]
        cases = [_nodes(c, hostfile, num_nodes, launcher_backend, master_addr, include, exclude) for c in cases]
        where = _executor(executor, jobs, partition, slurm_time, gpus_per_job, slurm_arg)
        index = index_options(offline, find_links, index_url, extra_index_url)
        env_opts = _env_options(m.env, python, base)
        from .versions import check_points

        check_points(cases, index)
        st = Store(store)
        ui = ProgressUI(quiet)
        runner = Runner(store=st, envs=EnvManager(cache_root(cache_dir), env_opts, index, log=lambda s: ui("env", s)),
                        gpus=facts.gpus(), gpu_ids=facts.gpu_indices(), progress=ui, rerun=rerun, jobs=jobs,
                        executor=where)
        records = []
        with ui.running():
            for c in cases:
                _note_slots(runner, c, ui)
                for rs in runner.run_many(c, list(c.points), want=repeat):
                    records += rs
        _print_grid(records, f"dsbisect run {matrix.name}", fmt, output, cases)


def _note_slots(runner: Runner, case: Case, ui) -> None:
    slots = runner.slots(case)
    if runner.executor is not None:
        ui("note", f"{case.name}: up to {len(slots)} Slurm job(s) at once")
        return
    if len(slots) > 1:
        where = ", ".join(",".join(map(str, s.devices)) for s in slots if s.devices) or "CPU"
        ui("note", f"{case.name}: {len(slots)} points at once ({where})")
    cores = os.cpu_count() or 1
    if runner.accelerator(case) == "cpu" and len(slots) * case.nproc > cores:
        ui("note", f"{case.name}: {len(slots)} jobs x {case.nproc} ranks on {cores} cores: oversubscribed")


def _override(c: Case, timeout, collective, idle) -> Case:
    changes = {}
    if timeout is not None:
        changes["timeout"] = timeout
    if collective is not None:
        changes["collective_timeout"] = collective
    if idle is not None:
        changes["idle_timeout"] = idle
    return replace(c, **changes) if changes else c


def _executor(executor: Executor, jobs: int | None, partition: str | None, minutes: int | None,
              gpus: int | None, args: list[str] | None):
    """None (run here), or the Slurm executor with the CLI's job settings."""
    if executor is Executor.local:
        if partition or minutes or gpus is not None or args:
            raise InputError("--partition, --slurm-time, --gpus-per-job and --slurm-arg need --executor slurm")
        return None
    from .slurm import SlurmExecutor, SlurmOptions

    return SlurmExecutor(SlurmOptions(partition=partition, time=minutes, gpus=gpus, args=tuple(args or ()),
                                      jobs=jobs or 8))


def _nodes(c: Case, hostfile, num_nodes, backend, master_addr, include, exclude) -> Case:
    """The case with the multi-node options of the command line, checked as the matrix's are."""
    given = {"hostfile": hostfile.resolve() if hostfile else None, "num_nodes": num_nodes,
             "launcher_backend": backend, "master_addr": master_addr, "include": include, "exclude": exclude}
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return c
    if backend is not None and backend not in matrix_mod.LAUNCHER_BACKENDS:
        raise InputError(f"--launcher-backend {backend}: expected one of {', '.join(matrix_mod.LAUNCHER_BACKENDS)}")
    c = replace(c, **given)
    matrix_mod.check_multinode(c, "command line")
    return c


def _env_options(opts: EnvOptions, python: str | None, base: str | None) -> EnvOptions:
    if base is not None and base not in ("auto", "layered", "isolated"):
        raise InputError(f"--base {base}: expected layered, isolated or auto")
    return replace(opts, python=python or opts.python, base=base or opts.base)


def _print_grid(records, title: str, fmt: Format, output: Path | None, cases: list[Case]) -> None:
    g = rep.grid(records)
    compat = tuple(dict.fromkeys(s for c in cases for s in c.compat))
    if fmt is Format.json:
        emit(json.dumps(rep.grid_json(g, compat), indent=2) + "\n", output)
    elif fmt is Format.markdown:
        emit(rep.grid_markdown(g, title, compat), output)
    else:
        out.print(rep.grid_renderable(g, title))
        if output:
            output.write_text(rep.grid_markdown(g, title, compat))


# ------------------------------------------------------------------- report


@app.command()
def report(
    store: StoreOpt = Path(".dsbisect"),
    case: Annotated[Optional[list[str]], typer.Option("--case", help="Only this case (repeatable).")] = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """Print the grid of every recorded run again, from the store."""
    with user_errors():
        st = _open_store(store)
        records = st.runs(case)
        if not records:
            raise DsbisectError(f"no runs recorded in {store}" + (f" for {', '.join(case)}" if case else ""))
        _print_grid(records, "dsbisect report", fmt, output, [])


@app.command()
def show(
    run_id: Annotated[int, typer.Argument(help="A run id, as printed in reports.")],
    store: StoreOpt = Path(".dsbisect"),
    lines: Annotated[int, typer.Option("--lines", help="Log lines to show per log.")] = 30,
) -> None:
    """Print one run: outcome, environment, hang signature, stacks and log tails."""
    with user_errors():
        from .show import render_run

        st = _open_store(store)
        record = st.run(run_id)
        if record is None:
            raise InputError(f"no run {run_id} in {store}")
        out.print(render_run(record, lines))


def _open_store(store: Path) -> Store:
    if not (store / "dsbisect.sqlite3").is_file():
        raise InputError(f"no dsbisect store in {store} (run 'dsbisect run' first, or pass --store)")
    return Store(store)


# --------------------------------------------------------------------- envs


@envs_app.command("list")
def envs_list(cache_dir: CacheOpt = None) -> None:
    """List the cached point venvs with their pins and size."""
    with user_errors():
        mgr = EnvManager(cache_root(cache_dir))
        from rich.table import Table

        table = Table(header_style="bold")
        for col in ("key", "mode", "requirements", "shadows", "MB", "built in"):
            table.add_column(col)
        for e in mgr.existing():
            spec = e["spec"]
            shadows = ", ".join(f"{n} {b}→{p}" for n, b, p in e.get("shadowed", []))
            table.add_row(e["key"], spec["mode"], "; ".join(spec["requirements"]) + (f" @{spec['source']}" if spec.get("source") else ""),
                          shadows, f"{e['bytes'] / 1e6:.0f}", f"{e.get('seconds', 0):.1f} s")
        out.print(table)


@envs_app.command("prune")
def envs_prune(
    cache_dir: CacheOpt = None,
    older_than: Annotated[Optional[float], typer.Option("--older-than", help="Only venvs unused for this many days.")] = None,
) -> None:
    """Delete cached point venvs (all, or those unused for --older-than days) and half-built ones."""
    with user_errors():
        mgr = EnvManager(cache_root(cache_dir))
        removed = mgr.prune(older_than_s=older_than * 86400 if older_than is not None else None)
        err.print(f"removed {len(removed)} venv(s)")


class Regress(str, Enum):
    hang = "hang"
    fail = "fail"
    any = "any"


@app.command()
def bisect(
    package: Annotated[str, typer.Argument(help="The package whose releases move (deepspeed, transformers, accelerate, ...).")],
    good: Annotated[str, typer.Argument(help="A release that works (with --find-fix: the old broken one).")],
    bad: Annotated[str, typer.Argument(help="A later release that is broken (with --find-fix: the fixed one).")],
    case: Annotated[Optional[str], typer.Option("--case", help="A case of the matrix file.")] = None,
    script: Annotated[Optional[Path], typer.Option("--script", help="Run this script instead of a case.")] = None,
    matrix: Annotated[Path, typer.Option("--matrix", help="Matrix file that defines --case.")] = Path("matrix.yaml"),
    pin: Annotated[Optional[list[str]], typer.Option("--pin", help="Hold another package, e.g. transformers==4.39.2 (repeatable).")] = None,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="Ranks, with --script.")] = 2,
    accelerator: Annotated[str, typer.Option("--accelerator", help="cpu | cuda | auto, with --script.")] = "auto",
    regress_on: Annotated[Regress, typer.Option("--regress-on", help="What counts as bad.")] = Regress.hang,
    find_fix: Annotated[bool, typer.Option("--find-fix", help="Find the first release that fixed it instead.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs per point; bad if any run is bad.")] = 1,
    confirm: Annotated[int, typer.Option("--confirm", min=1, help="At the end, run the last good and first bad points until each has this many runs; the answer stands only if all agree.")] = 1,
    signature: Annotated[Optional[str], typer.Option("--signature", help="Only hangs/failures whose signature contains this are bad.")] = None,
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="A clone of the package's repository: go on into the commits.")] = None,
    verify_commit_ends: Annotated[bool, typer.Option("--verify-commit-ends/--no-verify-commit-ends", help="Build and test both tags from source before the commit search.")] = True,
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases among the candidates.")] = False,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Wall timeout per run, seconds.")] = None,
    collective_timeout: Annotated[Optional[float], typer.Option("--collective-timeout", help="Collective timeout for the scripts, seconds.")] = None,
    idle_timeout: Annotated[Optional[float], typer.Option("--idle-timeout", help="Hang if no output for this long, seconds.")] = None,
    store: StoreOpt = Path(".dsbisect"),
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexOpt = None,
    python: PythonOpt = None,
    base: BaseOpt = None,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    jobs: JobsOpt = None,
    executor: ExecutorOpt = Executor.local,
    partition: PartitionOpt = None,
    slurm_time: SlurmTimeOpt = None,
    gpus_per_job: GpusPerJobOpt = None,
    slurm_arg: SlurmArgOpt = None,
    hostfile: HostfileOpt = None,
    num_nodes: NumNodesOpt = None,
    launcher_backend: BackendOpt = None,
    master_addr: MasterAddrOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
) -> None:
    """Find the first release of PACKAGE between GOOD and BAD that breaks the case (then the commit)."""
    import shlex
    import sys

    from .bisection import Bisection, Request, dumps
    from .outcome import RegressOn

    with user_errors():
        the_case, env_opts = _bisect_case(case, script, matrix, nproc, accelerator)
        the_case = _override(the_case, timeout, collective_timeout, idle_timeout)
        the_case = _nodes(the_case, hostfile, num_nodes, launcher_backend, master_addr, include, exclude)
        where = _executor(executor, jobs, partition, slurm_time, gpus_per_job, slurm_arg)
        pins = _check_pins(pin or [], package)
        index = index_options(offline, find_links, index_url, extra_index_url)
        req = Request(package=package, good=good, bad=bad, case=the_case, pins=pins,
                      regress_on=RegressOn(regress_on.value), find_fix=find_fix, repeat=repeat,
                      signature=signature, pre=pre, git_repo=git_repo, verify_commit_ends=verify_commit_ends,
                      confirm=confirm)
        st = Store(store)
        ui = ProgressUI(quiet)
        runner = Runner(store=st, envs=EnvManager(cache_root(cache_dir), _env_options(env_opts, python, base), index,
                                                  log=lambda s: ui("env", s)),
                        gpus=facts.gpus(), gpu_ids=facts.gpu_indices(), progress=ui, jobs=jobs, executor=where)
        req = replace(req, width=len(runner.slots(the_case)))
        with ui.running():
            result = Bisection(runner, index, req).run()
        command = "dsbisect " + shlex.join(reproduce_args(sys.argv[1:])) if sys.argv and "dsbisect" in sys.argv[0] \
            else "dsbisect bisect " + shlex.join([package, good, bad])
        if fmt is Format.json:
            emit(dumps(result) + "\n", output)
        elif fmt is Format.markdown:
            emit(rep.bisect_markdown(result, command), output)
        else:
            out.print(rep.bisect_renderable(result, command))
            if output:
                output.write_text(rep.bisect_markdown(result, command))
        if result.exit_code:
            err.print(f"[bold red]{result.verdict}:[/] {result.message}", highlight=False)
            raise typer.Exit(result.exit_code)


def reproduce_args(argv: list[str]) -> list[str]:
    """The command line without the options that only shape the output."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--format", "-o", "--output"):
            skip = True
            continue
        if a in ("-q", "--quiet") or a.startswith(("--format=", "--output=")):
            continue
        out.append(a)
    return out


def _bisect_case(case: str | None, script: Path | None, matrix: Path, nproc: int, accelerator: str):
    if case and script:
        raise InputError("give either --case or --script, not both")
    if script:
        if accelerator not in ("cpu", "cuda", "auto"):
            raise InputError(f"--accelerator {accelerator}: expected cpu, cuda or auto")
        return matrix_mod.script_case(script, nproc, accelerator=accelerator), EnvOptions()
    m = matrix_mod.load(matrix)
    if case:
        return m.case(case), m.env
    if len(m.cases) == 1:
        return m.cases[0], m.env
    raise InputError(f"{matrix.name} has {len(m.cases)} cases: pick one with --case (or use --script)")


def _check_pins(pins: list[str], package: str) -> tuple[str, ...]:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    out = []
    for p in pins:
        try:
            r = Requirement(p)
        except InvalidRequirement:
            raise InputError(f"--pin {p!r} is not a requirement (expected NAME==VERSION)") from None
        if package and canonicalize_name(r.name) == canonicalize_name(package):
            raise InputError(f"--pin {p}: {package} is the package being bisected")
        out.append(str(r))
    return tuple(out)


@app.command()
def versions(
    package: Annotated[str, typer.Argument(help="A package name.")],
    good: Annotated[Optional[str], typer.Argument(help="From this release...")] = None,
    bad: Annotated[Optional[str], typer.Argument(help="...to this one, inclusive.")] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases.")] = False,
    offline: OfflineOpt = False,
    find_links: FindLinksOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexOpt = None,
) -> None:
    """List the releases a bisection of PACKAGE would test, oldest first."""
    from .versions import candidates, releases

    with user_errors():
        index = index_options(offline, find_links, index_url, extra_index_url)
        if (good is None) != (bad is None):
            raise InputError("give both GOOD and BAD, or neither")
        if good is None:
            rels = [r.version for r in releases(package, index) if not r.yanked and (pre or not r.version.is_prerelease)]
            if not rels:
                raise InputError(f"{package}: no releases found")
        else:
            rels = candidates(package, good, bad, index, pre)
        for v in rels:
            out.print(str(v), highlight=False)


@app.command("run-one", hidden=True)
def run_one(
    spec: Annotated[Path, typer.Argument(help="The job.json that `--executor slurm` wrote.")],
) -> None:
    """Do one run here, as a Slurm job of `--executor slurm` does (progress on stderr)."""
    from .slurm import run_job

    with user_errors():
        record = run_job(spec, ProgressUI())
        err.print(f"run {record.id}: {record.outcome.value}" + (f" ({record.reason})" if record.reason else ""),
                  highlight=False)


@app.command("snapshot-base")
def snapshot_base(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the snapshot (JSON).")],
    python: PythonOpt = None,
) -> None:
    """Write what this (compute node's) base environment holds, for `prefetch --base-snapshot`."""
    from .prefetch import snapshot

    with user_errors():
        data = snapshot(python)
        output.write_text(json.dumps(data))
        err.print(f"{len(data['dists'])} distributions of {data['python']} (python {data['python_version']}, "
                  f"{data['platform']}) written to {output}")


@app.command()
def prefetch(
    matrix: Annotated[Path, typer.Argument(help="The matrix file.")] = Path("matrix.yaml"),
    dest: Annotated[Path, typer.Option("--dest", help="The wheelhouse folder to fill.")] = Path("wheelhouse"),
    case: Annotated[Optional[list[str]], typer.Option("--case", help="Only this case (repeatable).")] = None,
    with_candidates: Annotated[bool, typer.Option("--with-candidates", help="Also every release between the lowest and highest version of each axis.")] = False,
    python_version: Annotated[Optional[str], typer.Option("--python-version", help="The target's Python, e.g. 3.12.")] = None,
    platform_tag: Annotated[Optional[list[str]], typer.Option("--platform", help="The target's platform tags, e.g. manylinux_2_17_x86_64 (repeatable).")] = None,
    base_snapshot: Annotated[Optional[Path], typer.Option("--base-snapshot", help="The target's base (from `dsbisect snapshot-base`): only what it lacks is fetched.")] = None,
    tool: Annotated[bool, typer.Option("--tool", help="Also dsbisect's own dependencies.")] = False,
    cases_too: Annotated[bool, typer.Option("--cases/--no-cases", help="Fetch what the cases need (default), or only --tool/--commits.")] = True,
    extra: Annotated[Optional[list[str]], typer.Option("--extra", help="Another requirement to fetch, e.g. 'setuptools<75' for building commits offline (repeatable).")] = None,
    git_repo: Annotated[Optional[Path], typer.Option("--git-repo", help="Build wheels of commits of this clone (with --commits).")] = None,
    commits: Annotated[Optional[str], typer.Option("--commits", help="OLD..NEW: tags or hashes; every first-parent commit in between.")] = None,
    package: Annotated[str, typer.Option("--package", help="The package the clone builds (with --git-repo).")] = "deepspeed",
    cache_dir: CacheOpt = None,
    index_url: IndexUrlOpt = None,
    extra_index_url: ExtraIndexOpt = None,
    find_links: FindLinksOpt = None,
) -> None:
    """Download (and build) everything the matrix's points need into a wheelhouse for --offline use."""
    from . import gitrepo
    from .prefetch import Prefetcher, Target, load_snapshot

    with user_errors():
        m = matrix_mod.load(matrix)
        cases = [m.case(n) for n in case] if case else list(m.cases)
        index = index_options(False, find_links, index_url, extra_index_url)
        points = _prefetch_points(cases, index, with_candidates) if cases_too else []
        target = Target(python_version, tuple(platform_tag or ()), load_snapshot(base_snapshot) if base_snapshot else None)
        mgr = EnvManager(cache_root(cache_dir), m.env, index, log=lambda s: err.print(f"  {s}", highlight=False))
        pf = Prefetcher(mgr, dest, target, log=lambda s: err.print(f"  {s}", highlight=False))
        try:
            for p in points:
                err.print(f"{p.label}", highlight=False)
                pf.point(p)
            if tool:
                pf.tool()
            if extra:
                pf.requirements(_check_pins(extra, ""))
            if git_repo or commits:
                if not (git_repo and commits and ".." in commits):
                    raise InputError("--git-repo and --commits OLD..NEW go together")
                old, new = commits.split("..", 1)
                pf.commits(gitrepo.check_repo(git_repo), package, old, new)
        finally:
            pf.close()
        size = sum(f.stat().st_size for f in pf.dest.rglob("*") if f.is_file())
        err.print(f"{len(pf.added)} file(s) added; {pf.dest} holds {size / 1e6:.1f} MB")
        for name in pf.added:
            out.print(name, highlight=False)


def _prefetch_points(cases, index, with_candidates: bool):
    from packaging.version import Version

    from .matrix import Point
    from .versions import releases

    points = {}
    for c in cases:
        for p in c.points:
            points[p.key] = p
        if not with_candidates:
            continue
        first = c.points[0]
        for name, _ in first.versions:
            versions = sorted({Version(v) for p in c.points for n, v in p.versions if n == name})
            for r in releases(name, index):
                if versions[0] <= r.version <= versions[-1] and not r.yanked and not r.version.is_prerelease:
                    moved = tuple((n, str(r.version) if n == name else v) for n, v in first.versions)
                    q = Point(versions=moved, pins=first.pins)
                    points.setdefault(q.key, q)
    return list(points.values())


def version_callback(value: bool) -> None:
    if value:
        out.print(f"dsbisect {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")] = False,
) -> None:
    pass


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
