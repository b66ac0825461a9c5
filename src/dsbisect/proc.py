"""The one way dsbisect runs a short command and reads what it printed.

Every outside program that is run to completion (uv, pip, git, py-spy, nvidia-smi, ssh,
sbatch...) goes through ``run``; only ``launch`` starts the long-lived launcher itself.
``run`` never raises for a failing command: the caller reads ``Completed`` and decides.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Variables of dsbisect's own environment that must not leak into the venvs it runs.
_NOT_INHERITED = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT")


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int | None  # None: it ran past its timeout (and was killed) or could not start
    stdout: str
    stderr: str
    error: str = ""  # why it did not run to its end ("not found", "timed out after 20 s")

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def last_line(self, default: str = "") -> str:
        """The last non-empty line of stderr (else stdout), else the error or ``default``."""
        return last_line(self.stderr or self.stdout) or self.error or default or f"exit {self.returncode}"


def run(argv: Sequence[str | Path], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float | None = None, stdout=None) -> Completed:
    """Run ``argv`` to its end with stdin closed; output captured as text (or into ``stdout``)."""
    args = tuple(str(a) for a in argv)
    try:
        proc = subprocess.run(args, env=dict(env) if env is not None else None, cwd=cwd, timeout=timeout,
                              stdin=subprocess.DEVNULL, capture_output=stdout is None,
                              stdout=stdout, stderr=subprocess.PIPE if stdout is not None else None)
    except subprocess.TimeoutExpired as e:
        return Completed(args, None, _text(e.stdout), _text(e.stderr), f"no answer within {timeout:g} s")
    except OSError as e:
        return Completed(args, None, "", "", f"{args[0]}: {e.strerror or e}")
    return Completed(args, proc.returncode, _text(proc.stdout), _text(proc.stderr))


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what would confuse a venv's python or uv."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    return env | dict(extra or {})


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _text(data) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
