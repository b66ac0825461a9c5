"""Whether a recorded run may stand for a run now (``inputs`` has the rule and the record).

``Reuse.stale`` compares what a recorded run ran with what a run of the same point would run
here and now: the files it named or imported (their content now), the environment that would
reach the ranks, and the interpreter and base (python, torch, CUDA).  ``Reuse.record`` makes
the record of a run that just ended, for ``RunFacts.fingerprint``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from dsbisect.envs.base import torch_cuda
from dsbisect.envs.venvs import Env, EnvManager
from dsbisect.launch.launchers import added_options
from dsbisect.records.inputs import (
    Inputs,
    Interpreter,
    differences,
    digests,
    env_digests,
    imported_files,
    why_line,
)
from dsbisect.core.model import BaseMode, Case, Point
from dsbisect.core.proc import clean_env
from dsbisect.core.rundir import RunDir
from dsbisect.records.run import RunFacts, RunRecord
from dsbisect.store.store import Store

__all__ = ["Reuse", "digests", "named_paths", "rank_environment"]


@dataclass(frozen=True)
class Reuse:
    store: Store
    envs: EnvManager

    def stale(self, case: Case, point: Point, run: RunRecord, accelerator: str = "") -> str:
        """Why ``run`` is not what running ``point`` of ``case`` now (on ``accelerator``, "" when
        another machine decides) would run; "" when it is the same."""
        then = run.facts.ran
        if then is None:
            return f"recorded run {run.id} does not record its inputs (made by an older dsbisect)"
        reasons = differences(then, self.now(case, point, paths=[p for p, _ in then.files], accelerator=accelerator))
        return why_line(run.id, reasons) if reasons else ""

    def now(self, case: Case, point: Point, venv: Env | None = None, paths: list[str] | None = None,
            imported: tuple[tuple[str, str], ...] = (), accelerator: str = "") -> Inputs:
        """What a run of ``point`` runs now: the digests of the files the case names (or of
        ``paths``: those a recorded run holds), ``imported`` ones as they are, the environment,
        the interpreter, the accelerator."""
        files = dict(digests(named_paths(case) if paths is None else paths)) | dict(imported)
        added = added_options(case, accelerator == "cuda") if accelerator else ""
        return Inputs(tuple(sorted(files.items())), env_digests(rank_environment(case), self.store.inputs_key()),
                      self.interpreter(point, venv), accelerator, added)

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

    def record(self, case: Case, point: Point, venv: Env | None, run: RunDir | None = None,
               named: tuple[tuple[str, str], ...] = (), accelerator: str = "") -> dict:
        """What a run ran: its named files, the modules its interpreters imported (the start-up
        hook's lists in ``run``), its environment, its interpreter.  ``named``: the named files'
        digests as the run started; one the run wrote (it differs now, or the run made it) is an
        output, not an input, and is left out (a log or checkpoint named in the args would
        otherwise never match again)."""
        imported = imported_files(run.imports) if run is not None else ()
        ran = self.now(case, point, venv, imported=imported, accelerator=accelerator)
        if named:
            at_start, modules = dict(named), dict(imported)
            files = {p: d for p, d in ran.files if p in modules or at_start.get(p, d) == d}
            ran = replace(ran, files=tuple(sorted(files.items())))
        return ran.to_json()

    def adopt(self, case: Case, found: RunFacts) -> RunFacts:
        """A run's facts made elsewhere (a Slurm job, with a store of its own) as if made here:
        its environment digests become this side's, of the environment this dsbisect gave the job."""
        if found.fingerprint is None:
            return found
        env = [list(e) for e in env_digests(rank_environment(case), self.store.inputs_key())]
        return replace(found, fingerprint=dict(found.fingerprint) | {"env": env})


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
