"""The import check of a point's venv on this machine: the point's packages imported in it,
once per venv and import environment, and recorded in the store.

It is made inside the run by the venv's start-up hook where the run's first interpreter is the
venv's (``folds_check``: the hook imports the packages, writes the facts into the run folder,
and exits 125 when one fails; ``of_run`` reads what it found), else apart, before the launch
(``separate``).  ``import_check_key`` is what a recorded check depends on besides the venv.
"""

from __future__ import annotations

from dsbisect.core.model import Accelerator, Case, Point, check_wanted, digest
from dsbisect.core.proc import without_unset, writes_bytecode
from dsbisect.core.rundir import RunDir
from dsbisect.envs import facts
from dsbisect.envs.venvs import Env
from dsbisect.launch.launchers import line_for
from dsbisect.records.run import ImportCheck, RunFacts
from dsbisect.run.executor import Site
from dsbisect.run.launchline import base_env


def separate(site: Site, env: Env, case: Case, point: Point, accel: Accelerator) -> ImportCheck:
    """Import the point's packages in its venv, once per venv and import environment."""
    wanted = check_wanted(point)
    key = import_check_key(case, accel, wanted)
    cached = site.store.import_check(env.key, key)
    if cached:
        return cached
    site.progress("env", f"{case.name} · {point.label}: importing {', '.join(wanted)}")
    variables = without_unset(base_env(case, accel, site.envs) | dict(case.env))
    if site.envs.caches_bytecode(env):  # what it imports is cached (EnvManager.caches_bytecode)
        variables = writes_bytecode(variables)
    check = facts.import_check(env.python, wanted, variables)
    if not check.ok:
        check = ImportCheck(False, f"import check: {check.reason}", check.facts)
    site.store.put_import_check(env.key, key, check)
    return check


def of_run(site: Site, run: RunDir, env: Env, case: Case, point: Point, accel: Accelerator) -> ImportCheck:
    """The import check the run made (recorded for the venv like a separate one), or, when the
    run left none, a separate one."""
    found = facts.hook_check(run.import_facts)
    if found is None:
        return separate(site, env, case, point, accel)
    if accel is Accelerator.CUDA and found.facts.gpus is None:  # the hook leaves CUDA uninitialized
        found = ImportCheck(found.ok, found.reason, found.facts | RunFacts.of(gpus=site.gpus))
    if not found.ok:
        found = ImportCheck(False, f"import check: {found.reason}", found.facts)
    site.store.put_import_check(env.key, import_check_key(case, accel, check_wanted(point)), found)
    return found


def folds_check(case: Case) -> bool:
    """Whether the import check is made inside the run by the start-up hook: where the case's
    launch line says its first interpreter is the point venv's (not an executable or srun's
    tasks), not for a multi-node case (every node's venv is checked before the launch), not
    with ``DSBISECT_CHECK_IMPORTS=0`` in the case's env."""
    if case.nodes.multi or dict(case.env).get("DSBISECT_CHECK_IMPORTS") == "0":
        return False
    return line_for(case).folds_check


def import_check_key(case: Case, accel: Accelerator, wanted: list[str]) -> tuple[str, ...]:
    """What an import check depends on besides the venv: shims, case env, accelerator, dsbisect."""
    from dsbisect import __version__
    from dsbisect.envs.base import hook_source

    return (*case.compat, digest({"env": [list(e) for e in case.env], "accel": accel.value, "wanted": wanted,
                                  "dsbisect": __version__, "hook": hook_source()}))
