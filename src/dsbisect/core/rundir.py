"""The layout of one run's folder, written down once.

::

    <store>/runs/<id>/
      launcher.log                  the launcher's stdout and stderr
      ranks/**/*.log                each rank's output (the launcher's per-rank logs; a 1-rank
                                    run without a launcher writes ranks/rank0.log itself, and
                                    the start-up hook an accelerate launch rank's rank<R>.log)
      import_check.json             the point's import check made in the run by the start-up hook
                                    (versions, CUDA, NCCL; "error" when an import failed)
      stacks/pyspy.rank<R>.<tag>.txt       py-spy dumps (tag: quiet, idle, watchdog, deadline)
      stacks/rank<R>.pid<P>.txt            the faulthandler hook's dumps (also written by the
                                           hook in the point venv, which cannot import this)
      nccl_trace_rank_<R>           torch's flight-recorder dump of rank R
      fr/request.<n>                dsbisect's n-th request for the ranks' in-process state
                                    (early deadlock verdict); never deleted
      fr/rank<R>.<n>.json           rank R's answer (written by the hook in the point venv)
      fr/proof.json                 the deadlock proof and the requests it stands on
      fr/rounds.log                 what each round of two requests found
      .deepspeed_env                the run's variables for every node (multi-node)
      run.json                      the run's record (the store's index is rebuilt from these)
      inputs/NN-<name>              copies of the (small) files the command line named
      imports/pid<P>.json           the local modules process P imported (the start-up hook's)
      metrics.jsonl                 the numbers the script reported itself (``DSBISECT_METRICS``)
      measured/rank<R>.pid<P>.json  rank R's peak RSS, peak CUDA memory and step times (the hook's)

Standard library only: ``forensics`` reads run folders with it on machines without torch.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

FR_PREFIX = "nccl_trace_rank_"
_FH_NAME = re.compile(r"^rank(\d+)\.pid(\d+)\.txt$")
_PYSPY_NAME = re.compile(r"^pyspy\.rank(\d+)\.([\w-]+)\.txt$")
_FR_ANSWER = re.compile(r"^rank(\d+)\.(\d+)\.json$")


@dataclass(frozen=True)
class RunDir:
    path: Path

    RECORD = "run.json"  # the run's whole record, written by the store when the run ends

    @property
    def record(self) -> Path:
        return self.path / self.RECORD

    @property
    def launcher_log(self) -> Path:
        return self.path / "launcher.log"

    @property
    def ranks(self) -> Path:
        return self.path / "ranks"

    def rank_log(self, rank: int) -> Path:
        """The log of a rank that dsbisect starts itself (a 1-rank run without a launcher)."""
        return self.ranks / f"rank{rank}.log"

    @property
    def import_facts(self) -> Path:
        """What the start-up hook's import check found (also named in the hook, which cannot import this)."""
        return self.path / "import_check.json"

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

    def ranks_started(self) -> set[int]:
        """The ranks whose processes started here: the start-up hook registers a stack file for
        every process of the point venv with RANK set, before the script runs."""
        return {rank for rank, _, _ in self.faulthandler_dumps()}

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
    def fr_dir(self) -> Path:
        """Requests for the ranks' flight-recorder state and their answers (``fr/``)."""
        return self.path / "fr"

    def fr_request(self, n: int) -> Path:
        return self.fr_dir / f"request.{n}"

    def fr_answers(self, n: int) -> dict[int, Path]:
        """rank -> answer file, of request ``n``."""
        out = {}
        for path in sorted(self.fr_dir.glob(f"rank*.{n}.json")):
            m = _FR_ANSWER.match(path.name)
            if m and int(m.group(2)) == n:
                out[int(m.group(1))] = path
        return out

    @property
    def deadlock_proof(self) -> Path:
        return self.fr_dir / "proof.json"

    @property
    def fr_rounds(self) -> Path:
        """One line per round of the early deadlock verdict: proof, or each rank's state."""
        return self.fr_dir / "rounds.log"

    @property
    def inputs(self) -> Path:
        """Copies of the files the command line named (configs, the script)."""
        return self.path / "inputs"

    @property
    def imports(self) -> Path:
        """The local modules each interpreter of the run imported (``pid<P>.json``, written by the
        start-up hook in the point venv, which cannot import this)."""
        return self.path / "imports"

    @property
    def metrics(self) -> Path:
        """The JSON-lines file a script may write its numbers to (``DSBISECT_METRICS``)."""
        return self.path / "metrics.jsonl"

    @property
    def measured(self) -> Path:
        """What the start-up hook measured of each rank (``rank<R>.pid<P>.json``)."""
        return self.path / "measured"

    def measured_files(self) -> list[tuple[int, Path]]:
        """(rank, path) of every rank's measurement file."""
        out = []
        for path in sorted(self.measured.glob("rank*.pid*.json")):
            m = _FH_NAME.match(path.name.removesuffix(".json") + ".txt")
            if m:
                out.append((int(m.group(1)), path))
        return out

    @property
    def machine(self) -> Path:
        """What the machine did to the run: ``cuda.pid<P>.json`` per process whose CUDA
        initialisation failed (written by the start-up hook)."""
        return self.path / "machine"

    @property
    def deepspeed_env(self) -> Path:
        return self.path / ".deepspeed_env"

    def cap_logs(self) -> list[str]:
        """Cut the middle out of every oversized log (head and tail kept); what was cut, as notes."""
        notes = []
        for path in self.logs():
            cut = cap_log(path)
            if cut:
                notes.append(f"{path.relative_to(self.path)}: {cut / 1e6:.0f} MB cut from the middle "
                             f"(first {LOG_KEEP[0] >> 20} and last {LOG_KEEP[1] >> 20} MB kept)")
        return notes

    def tails(self, lines: int = 200, max_bytes: int = 256 << 10) -> tuple[str, dict[int, str]]:
        """Each log read once (at most ``max_bytes`` of its end, its last ``lines``): all of them
        in one text, rank logs first, and each rank's own by rank where the file's name says the
        rank: ``rank{N}.log`` (dsbisect's own), ``{time}_rank{N}.log`` (the deepspeed launcher's)
        or ``.../attempt_{k}/{N}/std{out,err}.log`` (torchrun's, by local rank)."""
        every: list[str] = []
        by_rank: dict[int, list[str]] = {}
        for path in [*self.rank_logs(), self.launcher_log]:
            text = tail_text(path, max_bytes)
            if text is None:
                continue
            every.append("\n".join(text.splitlines()[-lines:]))
            if (rank := rank_of_log(path)) is not None:
                by_rank.setdefault(rank, []).append(every[-1])
        return "\n".join(every), {rank: "\n".join(parts) for rank, parts in by_rank.items()}


class RankLogs(enum.Enum):
    """How a launcher names its ranks' logs under ``ranks/`` (the pattern gives the rank)."""

    DIRECT = r"(?:^|/)rank(\d+)\.log$"  # ranks/rank<R>.log: dsbisect's own, srun's --output=rank%t.log
    DEEPSPEED = r"_rank(\d+)\.log$"  # ranks/<stamp>_rank<R>.log: --enable_each_rank_log
    TORCHRUN = r"/attempt_\d+/(\d+)/std(?:out|err)\.log$"  # ranks/<id>/attempt_<k>/<local rank>/stdout.log
    NONE = r"(?!)"  # the ranks write to the launcher's output


_RANK_LOG = re.compile("|".join(f"(?:{n.value})" for n in RankLogs))


def rank_of_log(path: Path) -> int | None:
    """The rank a log belongs to, by its name (None: not a rank's own log)."""
    m = _RANK_LOG.search(path.as_posix())
    return next((int(g) for g in m.groups() if g is not None), None) if m else None


def flight_recorder_env(run: RunDir) -> dict[str, str]:
    """Variables that make torch's NCCL flight recorder dump into the run folder on a timeout."""
    prefix = run.fr_prefix
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
    }


LOG_KEEP = (4 << 20, 12 << 20)  # bytes kept of a large log: its head and its tail


def cap_log(path: Path, head: int = LOG_KEEP[0], tail: int = LOG_KEEP[1]) -> int:
    """Cut the middle out of a log larger than ``head + tail`` bytes, leaving a line that says
    how much was cut; the bytes cut (0 when the log was small enough).  Done in place (the
    tail moved forward in chunks over the cut, then the file truncated), so it needs no free
    space: a log that filled the disk is capped all the same."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    cut = size - head - tail
    line = f"\n[dsbisect: {cut} bytes ({cut / 1e6:.0f} MB) of this log were cut here]\n".encode()
    if cut <= len(line):
        return 0
    with open(path, "r+b") as f:
        f.seek(head)
        f.write(line)
        _move(f, size - tail, head + len(line), tail)
        f.truncate(head + len(line) + tail)
    return cut


def _move(f, src: int, dst: int, n: int, chunk: int = 1 << 20) -> None:
    """Copy ``n`` bytes of ``f`` from ``src`` to ``dst`` (< ``src``), front to back."""
    done = 0
    while done < n:
        f.seek(src + done)
        data = f.read(min(chunk, n - done))
        if not data:
            return
        f.seek(dst + done)
        f.write(data)
        done += len(data)


def tail_text(path: Path, max_bytes: int) -> str | None:
    """The end of a text file (None when it cannot be read)."""
    try:
        return read_tail(path, max_bytes)
    except OSError:
        return None


def read_tail(path: Path, max_bytes: int) -> str:
    """The last ``max_bytes`` of a text file, from its first whole line; OSError when it cannot
    be read.  The one tail reader of logs and stack dumps (``tails``, ``forensics``)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read()
    if size > max_bytes:
        data = data.split(b"\n", 1)[-1]  # drop the cut line
    return data.decode("utf-8", "replace")
