"""What the tests share besides fixtures: the CLI in-process, a toy matrix, a case, the options
of an offline run, waiting for an event, a test's Slurm job, live pids, git and a toy package's commits.
``conftest`` re-exports them (the tests import them from there)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

import toypkg


def invoke_cli(*args: str, cwd: Path | None = None):
    """The Typer app in-process with a wide, colourless terminal (what ``cli`` calls; for
    session fixtures, which cannot take the function-scoped ``cli``)."""
    from dsbisect.cli import app

    old = Path.cwd()
    if cwd:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "220", "NO_COLOR": "1", "TERM": "dumb"},
                                  catch_exceptions=False)
    finally:
        os.chdir(old)


def cli_json(cli, *args: str, cwd: Path, exit_code: int = 0):
    """``dsbisect ARGS -q --format json`` through ``cli``: its exit code asserted, its report parsed
    (the result too, for its stderr).  The one way the tests read a command's JSON."""
    res = cli(args[0], "-q", "--format", "json", *args[1:], cwd=cwd)  # before any `-- COMMAND`
    assert res.exit_code == exit_code, res.output
    return json.loads(res.stdout), res


def offline(house: Path, cache_dir: Path | None = None) -> list[str]:
    """The options of a test's runs: packages from the local wheelhouse ``house`` only, venvs in
    the session's ``cache_dir``."""
    return ["--offline", "--find-links", str(house)] + (["--cache-dir", str(cache_dir)] if cache_dir else [])


def wait_until(predicate, timeout: float, what: str = "", every: float = 0.05):
    """``predicate()``'s first true value, asked every ``every`` s; fails the test after ``timeout``
    s (instead of a fixed sleep: as short as it can be, and long enough on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or predicate}")
        time.sleep(every)


def make_case(folder: Path, name: str = "c", script: str = "pass\n", **settings):
    """A case with a script of ``script``'s text in ``folder``, as ``--script`` would make it."""
    from dataclasses import replace

    from dsbisect.run.matrix import script_case

    path = folder / f"{name}.py"
    path.write_text(script)
    return replace(script_case(path, settings.pop("nproc", 2)), name=name, **settings)


def write_matrix(folder: Path, versions: list[str], *, name: str = "toy", extra: str = "",
                 package: str = "dsb-toy", collective_timeout: float = 6, timeout: float = 90,
                 nproc: int = 2, launcher: str = "direct") -> Path:
    """A matrix with one toy case over ``versions`` of the toy package, on 2 CPU ranks (or
    ``nproc``: 1 runs the rank without a launcher, 2-4 s less a run, for tests of the search
    that need no second rank: "ok", "raise", "import" and "broken" toys).

    ``launcher``: ``direct`` (dsbisect starts the two ranks itself) unless a test is about a
    launcher (``"deepspeed"``, ``"torchrun"``). The two ranks, their collectives and everything
    dsbisect does around them are the same under each; torchrun is one more process that
    imports torch (about 3.6 CPU-s and 2-3 s of a run's wall on 2 cores), DeepSpeed's launcher
    two that each import DeepSpeed. The tests that keep a launcher are those of its line, its
    hangs and signals, and its multi-node and Slurm forms."""
    toypkg.write_repro(folder)
    text = f"""\
defaults:
  collective_timeout: {collective_timeout}
  timeout: {timeout}
  accelerator: cpu
  nproc: {nproc}
  launcher: {launcher}
  env: {{OMP_NUM_THREADS: "1"}}
cases:
  {name}:
    script: toy_repro.py
    axes:
      {package}: [{", ".join(f'"{v}"' for v in versions)}]
{extra}"""
    path = folder / "matrix.yaml"
    path.write_text(text)
    return path


def slurm_job_under(folder: Path) -> str | None:
    """The newest Slurm job whose working folder is inside ``folder`` (a test's own: dsbisect
    gives each job its run's folder), None while there is none.  Told apart by folder, not by
    name: a suite beside this one runs the same tests, with jobs of the same names."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True).stdout
    mine = [job for job, _, where in (line.partition(" ") for line in out.splitlines())
            if where and Path(where).resolve().is_relative_to(folder.resolve())]
    return max(mine, key=int) if mine else None


def live_pids(pids) -> list[int]:
    """The pids among ``pids`` still running (not zombies)."""
    import psutil

    from dsbisect.core.proc import is_live

    alive = []
    for pid in pids:
        try:
            if is_live(psutil.Process(pid)):
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` with a fixed author, failing the test on error."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def pyproject(name: str, version: str, package: str) -> str:
    """The ``pyproject.toml`` of a setuptools package ``name`` of one import package."""
    return (f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "{version}"\n\n[tool.setuptools]\npackages = ["{package}"]\n')


def commit(repo: Path, message: str, files: dict[str, str] | None = None) -> str:
    """A commit of ``files`` (path in ``repo`` -> text); with none, a harmless one (a new notes
    file of its own).  Its hash."""
    if files is None:
        n = len(list((repo / "notes").glob("*"))) if (repo / "notes").is_dir() else 0
        files = {f"notes/{n}.md": message}
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def commit_toy(repo: Path, version: str, behaviour: str, message: str, name: str = "dsb-gittoy") -> str:
    """A commit of the toy package ``name`` (import package ``dsb_toy``) at ``version``, whose
    step does what ``toypkg.STEP[behaviour]`` does.  Its hash."""
    return commit(repo, message, {"pyproject.toml": pyproject(name, version, "dsb_toy"),
                                  "dsb_toy/__init__.py": f'__version__ = "{version}"\n{toypkg.DEVICE}'
                                                         f'{toypkg.STEP[behaviour]}',
                                  "NOTES.md": message + "\n"})


def requirements_history(folder: Path, *texts: str) -> Path:
    """A git repository ``folder/proj`` whose ``requirements.txt`` is each of ``texts`` in turn,
    a commit each (HEAD the last)."""
    repo = folder / "proj"
    repo.mkdir()
    git(repo, "init", "-q")
    for n, text in enumerate(texts, start=1):
        commit(repo, f"requirements {n}", {"requirements.txt": text})
    return repo


def stopped_dsbisect(args: list[str], cwd: Path, until, timeout: float, what: str,
                     sig: int = signal.SIGKILL) -> int:
    """``python -m dsbisect ARGS`` in ``cwd`` (the dsbisect under test), sent ``sig`` once
    ``until()`` holds (``wait_until``: up to ``timeout`` s) and waited for; its pid."""
    import dsbisect

    src = str(Path(dsbisect.__file__).parents[1])  # src, or a wheel's install
    proc = subprocess.Popen([sys.executable, "-m", "dsbisect", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=src))
    try:
        wait_until(until, timeout, what)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.pid


@dataclass(frozen=True)
class ToyHang:
    """One real run of the toy's deadlock (dsb-toy 1.3.0: rank 1 skips the all_reduce rank 0
    waits in) through the whole tool: matrix, point venv, the deepspeed launcher, 2 CPU ranks."""

    folder: Path  # the matrix's folder (its store is ``store``)
    store: Path
    run: dict  # the run's record, as ``run --format json`` gave it
    ended: float  # time.time() when ``run`` returned
    left: tuple[int, ...]  # the run's processes still alive just then (live_pids)


def toy_hang(folder: Path, house: Path, cache_dir: Path, collective_timeout: float, timeout: float,
              *extra: str) -> ToyHang:
    write_matrix(folder, ["1.3.0"], collective_timeout=collective_timeout, timeout=timeout,
                 launcher="deepspeed")
    res = invoke_cli("run", "matrix.yaml", *offline(house, cache_dir), "-q", "--format", "json", *extra, cwd=folder)
    ended = time.time()
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)["runs"]
    return ToyHang(folder, folder / ".dsbisect", run, ended, tuple(live_pids(run["evidence"]["pids"])))
