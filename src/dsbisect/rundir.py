"""The layout of one run's folder, written down once.

::

    <store>/runs/<id>/
      launcher.log                  the launcher's stdout and stderr
      ranks/**/*.log                each rank's output (the launcher's per-rank logs)
      stacks/pyspy.rank<R>.<tag>.txt       py-spy dumps (tag: quiet, idle, watchdog, deadline)
      stacks/rank<R>.pid<P>.txt            the faulthandler hook's dumps (also written by the
                                           hook in the point venv, which cannot import this)
      nccl_trace_rank_<R>           torch's flight-recorder dump of rank R
      .deepspeed_env                the run's variables for every node (multi-node)

Standard library only: ``forensics`` reads run folders with it on machines without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FR_PREFIX = "nccl_trace_rank_"
_FH_NAME = re.compile(r"^rank(\d+)\.pid(\d+)\.txt$")
_PYSPY_NAME = re.compile(r"^pyspy\.rank(\d+)\.([\w-]+)\.txt$")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def launcher_log(self) -> Path:
        return self.path / "launcher.log"

    @property
    def ranks(self) -> Path:
        return self.path / "ranks"

    def rank_logs(self) -> list[Path]:
        return sorted(self.ranks.rglob("*.log")) if self.ranks.is_dir() else []

    def logs(self) -> list[Path]:
        """Every log of the run: the launcher's first, then the ranks'."""
        return [self.launcher_log, *self.rank_logs()]

    @property
    def stacks(self) -> Path:
        return self.path / "stacks"

    def pyspy(self, rank: str | int, tag: str) -> Path:
        return self.stacks / f"pyspy.rank{rank}.{tag}.txt"

    def pyspy_dumps(self) -> list[tuple[int | None, str, Path]]:
        """(rank, tag, path) of every py-spy dump (rank None: the name holds no rank number)."""
        out = []
        for path in sorted(self.stacks.glob("pyspy.rank*.txt")):
            m = _PYSPY_NAME.match(path.name)
            out.append((int(m.group(1)), m.group(2), path) if m else (None, "", path))
        return out

    def faulthandler(self, rank: str | int, pid: int) -> Path:
        return self.stacks / f"rank{rank}.pid{pid}.txt"

    def faulthandler_dumps(self) -> list[tuple[int, int, Path]]:
        """(rank, pid, path) of every faulthandler file."""
        out = []
        for path in sorted(self.stacks.glob("rank*.pid*.txt")):
            m = _FH_NAME.match(path.name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), path))
        return out

    @property
    def fr_prefix(self) -> str:
        """What torch's flight recorder appends the rank to (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``)."""
        return str(self.path / FR_PREFIX)

    def fr_dumps(self) -> list[tuple[int | None, Path]]:
        """(rank, path) of every flight-recorder dump (rank None: a name that is not a rank)."""
        out = []
        for path in sorted(self.path.glob(FR_PREFIX + "*")):
            tail = path.name.removeprefix(FR_PREFIX)
            out.append((int(tail) if tail.isdigit() else None, path))
        return out

    @property
    def deepspeed_env(self) -> Path:
        return self.path / ".deepspeed_env"

    def log_tail(self, lines: int = 200, max_bytes: int = 256 << 10) -> str:
        """The last ``lines`` of every log, rank logs first (at most ``max_bytes`` read of each)."""
        parts = []
        for path in [*self.rank_logs(), self.launcher_log]:
            text = tail_text(path, max_bytes)
            if text is not None:
                parts.append("\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)


def tail_text(path: Path, max_bytes: int) -> str | None:
    """The end of a text file (None when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return None
    if size > max_bytes:
        data = data.split(b"\n", 1)[-1]  # drop the cut line
    return data.decode("utf-8", "replace")
