"""Two independent regressions in one job: accelerate's tied-weights load_state and transformers'
checkpoint rename.  The zoo's case for dsbisect's every-cause search (issue 39, part 2).

The checks are the zoo's own scripts, run unchanged as child processes of this one, so each
keeps the truth established for it (their headers give the issues, PRs and how):

- ``accelerate_tied_load_state.py`` (1 process): save_state/load_state of a model with tied
  weights; last good accelerate 0.24.1, first bad 0.25.0 (#2120, e638b1e2);
- ``transformers_checkpoint_rename.py`` (2 ranks, under ``torch.distributed.run --standalone``):
  Trainer's checkpoint save on several ranks; last good transformers 4.35.2, first bad 4.36.0
  (#27820), fixed in 4.36.1 (#28009).

Neither script imports the other's package for its check (the accelerate one never imports
transformers; the Trainer uses accelerate, and 4.35.2/4.36.0 run with accelerate 0.24.1 and
0.25.0 alike), so each regression shows alone: the job fails when either does, and passes only
when neither does.  Truths of the pair, by hand: docs/how-to/last-month.md ("Every cause").

The verdict is the children's exit codes.  Their output is kept in files under the run folder
(``DSBISECT_RUN_DIR``/two-causes/NAME.log) and summed up here in one line each (both run
at once).  When a check fails with its own regression in its log, this script exits 1 with one
and the same message, whichever check failed: the failure dsbisect learns from the
bad end is then the same failure after either cause is reverted, as "the regression" (a child's
traceback printed here would make each cause a failure of its own).  A check that fails without
its regression in its log (another error, a timeout) makes this script raise a RuntimeError that
names it instead: another failure, which dsbisect steps around rather than counting it.

Environment: CPU only, launched as 1 process (the transformers check starts its own 2 ranks),
< 2 GB, 44-75 s a run on 2 shared cores at a load average near 20.  Pins: those of the two cases (numpy < 2, the hub of
each transformers release).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# what torchrun gives this process; a child that starts its own ranks, or none, must not see it
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                  "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
                  "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


def _child_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["DSBISECT_RUN_DIR"] = str(folder)  # where the scripts put their state and checkpoints
    return env


def _start(name: str, argv: list[str], folder: Path) -> tuple[subprocess.Popen, Path]:
    """Start one check; its whole output goes to ``folder/NAME.log`` (not echoed: an exception
    line of a child printed here would become this run's failure)."""
    work = folder / name
    work.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_child_env(work))
    return proc, log


def _wait(name: str, proc: subprocess.Popen, log: Path, deadline: float) -> bool:
    """Whether the check passed (exit 0 before the deadline; past it, it is killed: failed)."""
    try:
        code: int | None = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    print(f"{name}: {'pass' if code == 0 else 'timed out' if code is None else f'exit {code}'} ({log})", flush=True)
    return code == 0


# Each check's own regression, as its log shows it when the check fails (its header's truth):
# a failure without it is another failure, reported as one (dsbisect steps around it).
REGRESSION = {
    "accelerate_tied_load_state": ("Error(s) in loading state_dict", "load_state did not restore",
                                   "load_state untied"),
    "transformers_checkpoint_rename": ("tmp-checkpoint-", "checkpoints not where they belong"),
}


def _shows_regression(name: str, log: Path) -> bool:
    text = log.read_text(errors="replace")
    return any(mark in text for mark in REGRESSION[name])


def main() -> int:
    folder = Path(os.environ.get("DSBISECT_RUN_DIR") or tempfile.mkdtemp()) / "two-causes"
    timeout = float(os.environ.get("TWO_CAUSES_CHECK_TIMEOUT", "400"))
    checks = {
        "accelerate_tied_load_state": [sys.executable, str(HERE / "accelerate_tied_load_state.py")],
        "transformers_checkpoint_rename": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                           "--nproc_per_node", "2",
                                           str(HERE / "transformers_checkpoint_rename.py")],
    }
    # independent: both at once (one rank here, two in the Trainer check)
    started = {name: _start(name, argv, folder) for name, argv in checks.items()}
    deadline = time.monotonic() + timeout
    failed = [name for name, (proc, log) in started.items() if not _wait(name, proc, log, deadline)]
    other = [name for name in failed if not _shows_regression(name, started[name][1])]
    if other:  # not the regression: a failure of its own, named, with its own message
        raise RuntimeError(f"{', '.join(other)} failed otherwise than its regression (its log: the line above)")
    if failed:
        print(f"regressions shown: {', '.join(failed)}", flush=True)
        sys.stderr.write("two_causes: a regression shows (which: the lines above)\n")
        return 1
    print("ok: neither regression shows", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
