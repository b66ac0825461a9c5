"""Whether a recorded run may stand for a run now (``records.inputs`` has the rule and the record).

``Reuse.present`` makes, once per point, what a run of it would use here and now, with the
answers every recorded run asks of it (the digests now of the files it lists, the programs it
started resolved along the ``PATH`` a run gets now, the versions now of the distributions it
imported, the names now in the folders it listed), besides the environment that would reach
the ranks and the interpreter and base (python, torch, CUDA); ``stale`` compares one record
with it, without I/O.  ``Reuse.started`` and ``Reuse.record`` make the record of a run: what
its command line named as it started, and, when it ended, what the start-up hook saw it use.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.envs import dists as installed
from dsbisect.envs.base import torch_cuda
from dsbisect.envs.toolchain import rank_path
from dsbisect.envs.venvs import Env, EnvManager
from dsbisect.launch.launchers import added_options
from dsbisect.records.inputs import (
    MISSING,
    UNKNOWN,
    Dist,
    Inputs,
    Interpreter,
    Present,
    asked,
    env_digests,
    incomplete,
    stale_reasons,
    why_line,
)
from dsbisect.records.traces import Trace, digests, file_sha, listing_digest, read_trace, used_files, used_listings
from dsbisect.core.model import BaseMode, Case, Point
from dsbisect.core.proc import clean_env
from dsbisect.core.rundir import RunDir
from dsbisect.records.run import RunFacts, RunRecord
from dsbisect.store.store import Store

__all__ = ["Reuse", "Start", "digests", "named_paths", "rank_environment", "stale"]


@dataclass(frozen=True)
class Start:
    """What a run's record takes from its start: the named files' digests then (what changes
    under the run is its output), and the wall-clock time of the launch (what the run made)."""

    named: tuple[tuple[str, str], ...] = ()
    at_ns: int | None = None


def stale(run: RunRecord, now: Present) -> str:
    """Why ``run`` may not stand for a run now (``now``: ``Reuse.present``); "" when it may."""
    then = run.facts.ran
    if then is None:
        return f"recorded run {run.id} does not record its inputs (made by an older dsbisect)"
    short = incomplete(then)
    if short:
        return f"recorded run {run.id} cannot be compared: {short}"
    reasons = stale_reasons(then, now)
    return why_line(run.id, reasons) if reasons else ""


@dataclass(frozen=True)
class Reuse:
    store: Store
    envs: EnvManager

    def present(self, case: Case, point: Point, runs: Iterable[RunRecord], accelerator: str = "") -> Present:
        """What a run of ``point`` of ``case`` would use now (on ``accelerator``, "" when another
        machine decides), with what ``runs`` ask of it: all the I/O of a reuse decision, once."""
        recorded = [r for r in (run.facts.ran for run in runs) if r is not None]
        files, programs, dists, folders = asked(recorded)
        venv = self.envs.built(point)
        path = rank_environment(case).get("PATH", os.defpath)
        if venv is not None:  # as the run's PATH was: dsbisect's ninja, the venv's bin/ (base_env)
            path = rank_path(path, self.envs.paths.root, venv.path / "bin" if case.command else None)
        return Present(self._inputs(case, point, venv, accelerator), dict(digests(files)),
                       {n: program_identity(shutil.which(n, path=path)) for n in programs},
                       {(n, f): self._version_now(n, f, venv) for n, f in dists},
                       {f: listing_digest(f) for f in folders})

    def _inputs(self, case: Case, point: Point, venv: Env | None, accelerator: str) -> Inputs:
        """The named files' digests now, the environment, the interpreter, the accelerator."""
        added = added_options(case, accelerator == "cuda") if accelerator else ""
        return Inputs(digests(named_paths(case)), env_digests(rank_environment(case), self.store.inputs_key()),
                      self.interpreter(point, venv), accelerator, added)

    def _version_now(self, name: str, folder: str, venv: Env | None) -> str:
        """The version of ``name`` a run would import now where a run imported it from ``folder``:
        from the point venv (UNKNOWN when it is not built), or from the base (the venv's own copy
        first: it comes first on the path), or from that folder."""
        own = _site_dir(venv)
        if _under(folder, self.envs.paths.root):
            return (installed.version_in(_in_site(own, folder), name) or MISSING) if own else UNKNOWN
        base = {os.path.realpath(d) for d in self.envs.base.site_dirs}
        if own and self.envs.mode is BaseMode.LAYERED and os.path.realpath(folder) in base:
            found = installed.version_in(own, name)
            if found:
                return found
        return installed.version_in(folder, name) or MISSING

    def interpreter(self, point: Point, venv: Env | None = None) -> Interpreter:
        """The base python, and torch with its CUDA where they are known before a run: from the
        point's venv (built, or ``venv``), else from the base a layered venv takes them from."""
        base = self.envs.base
        venv = venv or self.envs.built(point)
        own = venv.version_of("torch") if venv else None
        if own:
            return Interpreter(base.python, base.version, own, torch_cuda(venv.path.glob("lib/python3*/site-packages")))
        moves_torch = any(canonicalize_name(n) == "torch" for n, _ in point.versions)
        if self.envs.mode is BaseMode.LAYERED and (venv is not None or not moves_torch):
            return Interpreter(base.python, base.version, base.version_of("torch"), torch_cuda(base.site_dirs))
        return Interpreter(base.python, base.version)

    def started(self, case: Case) -> Start:
        """Taken just before the launch: the named files' digests, the time."""
        return Start(digests(named_paths(case)), time.time_ns())

    def record(self, case: Case, point: Point, venv: Env | None, run: RunDir | None = None,
               start: Start = Start(), accelerator: str = "") -> dict:
        """What a run used: the files its command line names (less those that changed since
        ``start``: a log or checkpoint named in the args is an output), and what the start-up
        hook saw its interpreters use (``run``'s ``imports/``), its environment, its interpreter."""
        ran = self._inputs(case, point, venv, accelerator)
        at_start = dict(start.named)
        files = {p: d for p, d in ran.files if at_start.get(p, d) == d}
        if run is not None:
            ran = replace(ran, **self._used(case, venv, read_trace(run.imports), start, files))
        else:
            ran = replace(ran, files=tuple(sorted(files.items())), programs=self._own_program(case, venv))
        return ran.to_json()

    def _used(self, case: Case, venv: Env | None, trace: Trace, start: Start, named: dict[str, str]) -> dict:
        """The parts of a record the hook's ``trace`` gives (with the ``named`` files)."""
        own = (self.envs.paths.root,)
        files = named | dict(used_files(trace, start.at_ns))
        dists: dict[str, Dist] = {}
        for module, folder in trace.site_modules:
            found = installed.owners(folder).get(module)
            for name, version in found or ():
                dists.setdefault(name, Dist(name, version, folder))
            if not found and not _under(folder, *own):  # a module no distribution claims: its file
                files |= {str(p): file_sha(p) for p in _module_files(folder, module)}
        programs = {n: program_identity(p) for n, p in trace.programs if not (p and _under(p, *own))}
        programs |= dict(self._own_program(case, venv))
        return {"files": tuple(sorted(files.items())), "dists": tuple(sorted(dists.values(), key=lambda d: d.name)),
                "programs": tuple(sorted(programs.items())), "listings": used_listings(trace, start.at_ns),
                "capped": trace.capped}

    def _own_program(self, case: Case, venv: Env | None) -> tuple[tuple[str, str], ...]:
        """The program a command line starts by name, as the caller's PATH resolves it (one the
        point venv has, like ``python`` or ``deepspeed``, is the venv's: not recorded)."""
        name = case.command.argv[0] if case.command and case.command.argv else ""
        if not name or os.sep in name or (venv is not None and (venv.path / "bin" / name).exists()):
            return ()
        return ((name, program_identity(shutil.which(name, path=rank_environment(case).get("PATH", os.defpath)))),)

    def adopt(self, case: Case, found: RunFacts) -> RunFacts:
        """A run's facts made elsewhere (a Slurm job, with a store of its own) as if made here:
        its environment digests become this side's, of the environment this dsbisect gave the job."""
        if found.fingerprint is None:
            return found
        env = [list(e) for e in env_digests(rank_environment(case), self.store.inputs_key())]
        return replace(found, fingerprint=dict(found.fingerprint) | {"env": env})


def program_identity(path: str | None) -> str:
    """What a program found on PATH is: its file's digest, and, in a virtual environment's
    ``bin/`` (a python there imports that environment's packages), that environment; MISSING
    for none."""
    if not path:
        return MISSING
    env = Path(os.path.abspath(path)).parent.parent
    return file_sha(path) + (f"@{env}" if (env / "pyvenv.cfg").is_file() else "")


def _site_dir(venv: Env | None) -> Path | None:
    found = sorted(venv.path.glob("lib/python3*/site-packages")) if venv is not None else []
    return found[0] if found else None


def _in_site(own: Path, folder: str) -> Path:
    """Where in the site folder ``own`` a run would import from now what a run imported from
    ``folder`` (a point venv's site folder, or a folder inside it: a package's vendored
    distributions that it puts on ``sys.path``, as ``pkg_resources`` does with setuptools'
    ``_vendor``): the same place below ``site-packages``."""
    parts = Path(folder).parts
    below = parts[len(parts) - parts[::-1].index("site-packages"):] if "site-packages" in parts else ()
    return own.joinpath(*below)


def _under(path: str, *roots: Path) -> bool:
    return any(os.path.realpath(path).startswith(os.path.join(os.path.realpath(r), "")) for r in roots)


def _module_files(folder: str, module: str) -> list[Path]:
    return [p for p in (Path(folder) / f"{module}.py", Path(folder) / module / "__init__.py") if p.is_file()]


def named_paths(case: Case) -> list[Path]:
    """The files a run of ``case`` names: its script, the files of a command line (``case.inputs``)
    and the existing files its args and launcher args name (relative to the case's folder)."""
    from dsbisect.core.command import named_files

    where = case.cwd or case.script.parent
    found = [case.script] if case.script_digest != "none" else []
    found += [Path(p) for p, _ in case.inputs]
    found += named_files((*case.launcher_args, *case.args), where)
    return [p.resolve() for p in found]


def rank_environment(case: Case) -> dict[str, str]:
    """The variables of dsbisect's environment and the case's ``env:`` that reach the ranks
    (dsbisect's own additions follow from the case and the machine, and are left out)."""
    return clean_env() | dict(case.env)
