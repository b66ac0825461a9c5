"""PyTorch's flight recorder, as its dumps write it: one reader of a dump and its entries for
``forensics`` (the ``nccl_trace_rank_<R>`` files a hung run leaves) and ``deadlock`` (the
dumps the start-up hook answers with, already plain JSON).

A dump is a mapping with ``entries`` (one per collective or point-to-point op: the process
group, the sequence number, the profiling name, tensor sizes, state, whether it is
``retired``, a stack), ``pg_status`` (per group, the last completed collective) and
``pg_config`` (per group, its ranks).  An entry's ``process_group`` is
``[name, description]`` (``["0", "default_pg"]``, ``["1", "undefined"]`` for a ``new_group``
given no description, ``["2", "mine"]``: read from the dumps of torch 2.13's gloo and NCCL
recorders); ``pg_id`` is the recorder's own counter, which torch's analyzer says matches
nothing, and is only read when an entry has no ``process_group``.  A description the entry
does not give is "" (unknown): never the group's name, and never the default group.

A pickled dump is loaded with an unpickler that refuses every class, so a crafted file
cannot run code.  Standard library only.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.files import DATA_LIMIT, read_small
from dsbisect.forensics.stacks import Frame

DEFAULT_PG = "default_pg"
_OPS = {  # flight-recorder profiling name -> the watchdog's OpType
    "broadcast": "BROADCAST", "all_reduce": "ALLREDUCE", "reduce": "REDUCE",
    "all_gather": "ALLGATHER", "_all_gather_base": "_ALLGATHER_BASE", "gather": "GATHER",
    "reduce_scatter": "REDUCE_SCATTER", "_reduce_scatter_base": "_REDUCE_SCATTER_BASE",
    "scatter": "SCATTER",
}


@dataclass(frozen=True)
class Entry:
    """One collective (or point-to-point op) a rank's recorder holds."""

    pg: str  # the process group's name: "0", "1", a hash
    desc: str  # its description: "default_pg", "undefined", a group_desc; "" when the entry gives none
    backend: str  # "gloo", "nccl" (the profiling name's prefix), "?" when it has none
    seq: int  # collective_seq_id (p2p_seq_id for a point-to-point op)
    op: str  # the watchdog's OpType where known ("_ALLGATHER_BASE"), else the profiling name's
    numel_in: tuple[int, ...]  # element count of each input tensor; () when the sizes cannot be read
    numel_out: tuple[int, ...]
    state: str  # "scheduled", "started", "completed"
    p2p: bool
    retired: bool | None  # None: the recorder does not say (older torch)
    frames: tuple[Frame, ...]  # innermost first

    @property
    def group(self) -> str:
        """The group as the watchdog and the reports name it: its description, else 'pg <name>'."""
        return self.desc or f"pg {self.pg}"

    @property
    def first_in(self) -> int | None:
        """The first input tensor's element count (what the watchdog's NumelIn says)."""
        return self.numel_in[0] if self.numel_in else None

    @property
    def first_out(self) -> int | None:
        return self.numel_out[0] if self.numel_out else None


@dataclass(frozen=True)
class Dump:
    """One recorder's dump."""

    entries: tuple[Entry, ...]
    last_completed: tuple[tuple[str, int | None], ...]  # (group name, pg_status' last completed collective)
    ranks: tuple[tuple[str, tuple[int, ...]], ...]  # (group name, its ranks) where pg_config lists them


class _DataOnly(pickle.Unpickler):
    """Loads plain containers and scalars only: every class or function lookup is refused."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")


LOAD_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError,
               KeyError, AttributeError, OverflowError, RecursionError, MemoryError)


def load(path: Path) -> object:
    """A dump file's data (pickle or JSON); OSError or one of ``LOAD_ERRORS`` when it cannot be read."""
    data = read_small(path, DATA_LIMIT)
    if data.lstrip()[:1] == b"{":  # torch can also write the dump as JSON
        return json.loads(data)
    return _DataOnly(io.BytesIO(data)).load()


def dump(data: object) -> Dump | None:
    """The dump in ``data`` (a loaded file, or a dump of the hook's answer); None when it has no entries."""
    entries = data.get("entries") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        return None
    status = data.get("pg_status") if isinstance(data.get("pg_status"), Mapping) else {}
    config = data.get("pg_config") if isinstance(data.get("pg_config"), Mapping) else {}
    ranks = {str(pg): r for pg, c in config.items() for r in [_ranks(c)] if r is not None}
    return Dump(entries=tuple(e for e in map(entry, entries) if e is not None),
                last_completed=tuple((str(pg), _last_completed(st)) for pg, st in status.items()),
                ranks=tuple(sorted(ranks.items())))


def entry(data: object) -> Entry | None:
    """One entry of a dump; None when it names no sequence number or profiling name."""
    if not isinstance(data, Mapping):
        return None
    p2p = data.get("is_p2p") is True
    seq = as_int(data.get("p2p_seq_id" if p2p else "collective_seq_id"))
    name = data.get("profiling_name")
    if seq is None or not isinstance(name, str):
        return None
    pg, desc = process_group(data.get("process_group"), data.get("pg_id"))
    return Entry(pg=pg, desc=desc, backend=name.split(":", 1)[0] if ":" in name else "?", seq=seq,
                 op=op_name(name), numel_in=_numels(data.get("input_sizes")),
                 numel_out=_numels(data.get("output_sizes")), state=str(data.get("state")), p2p=p2p,
                 retired=None if "retired" not in data else data["retired"] is True,
                 frames=_frames(data.get("frames")))


def process_group(value: object, pg_id: object) -> tuple[str, str]:
    """(name, description) of an entry's process group: ``["0", "default_pg"]`` -> ("0", "default_pg");
    a description the entry does not give (a bare name, ``[name]``, ``[name, None]``) is ""."""
    if isinstance(value, (list, tuple)) and value:
        desc = value[1] if len(value) > 1 and value[1] is not None else ""
        return str(value[0]), str(desc)
    return str(value if value is not None else pg_id), ""


def op_name(profiling_name: str) -> str:
    """'nccl:_all_gather_base' -> '_ALLGATHER_BASE'; names without an obvious OpType stay."""
    bare = re.sub(r"^\w+:", "", profiling_name)
    return _OPS.get(bare, bare)


def as_int(value: object) -> int | None:
    """An int, or a string of one ("12", " -3 "); None for anything else (True included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _numels(sizes: object) -> tuple[int, ...]:
    """[[2, 1024], [8]] -> (2048, 8); () when any size cannot be read."""
    if not isinstance(sizes, list):
        return ()
    out = []
    for dims in sizes:
        if not isinstance(dims, (list, tuple)):
            return ()
        ints = [as_int(d) for d in dims]
        if any(d is None for d in ints):
            return ()
        out.append(math.prod(ints))
    return tuple(out)


def _frames(frames: object) -> tuple[Frame, ...]:
    if not isinstance(frames, list):
        return ()
    return tuple(Frame(str(f.get("name", "?")), str(f.get("filename", "?")), as_int(f.get("line")))
                 for f in frames if isinstance(f, dict))


def _last_completed(status: object) -> int | None:
    if not isinstance(status, Mapping):
        return None
    return as_int(status.get("last_completed_collective"))


def _ranks(config: object) -> tuple[int, ...] | None:
    """'[0, 1]' (the recorder's pg_config ranks) -> (0, 1)."""
    if not isinstance(config, Mapping):
        return None
    value = config.get("ranks")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list) or not value:
        return None
    ranks = [as_int(v) for v in value]
    return None if any(r is None for r in ranks) else tuple(sorted(ranks))
