"""Where each rank of a hung run was stuck, read from the evidence left in its run folder.

For the collective a rank waits in (op, SeqNum, numel, process group), best first:

- ``nccl_trace_rank_<R>``: PyTorch's NCCL flight-recorder dump (read by ``flightrec``);
- NCCL watchdog lines in ``launcher.log`` and ``ranks/**/*.log``;
- Python tracebacks in those logs (gloo turns a missed collective into a timeout error),
  then the torch.distributed call seen in a py-spy or faulthandler stack.

For the Python stack, best first: the flight-recorder entry, the watchdog's "Stack trace of
the failed collective", ``stacks/pyspy.rank<R>.<tag>.txt``, ``stacks/rank<R>.pid<P>.txt``
(faulthandler; both read by ``stacks``), tracebacks.  ``analyze`` folds it into one
``RankState`` per rank and a ``Signature``: where the ranks wait and the code they wait from,
typed, with its one-line ``text``; ``hang_record`` makes the signature a run stores
(``identity.HangSignature``): an early deadlock proof's waits and the stacks of the snapshot
that proved it, else the evidence's.  Standard library only: the tool that runs this has no torch.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.forensics import flightrec
from dsbisect.forensics.deadlock import Proof
from dsbisect.forensics.flightrec import Entry, as_int
from dsbisect.verdict.hangsig import HangSignature, canonical_op, span
from dsbisect.verdict.outcome import rank_tagged
from dsbisect.core.rundir import RunDir, rank_of_log, read_tail
from dsbisect.forensics.stacks import Frame, faulthandler_threads, last_dump, main_thread, pyspy_threads

SOURCES = ("flight-recorder", "watchdog", "py-spy", "faulthandler", "traceback")  # stacks
_FACT_ORDER = ("flight-recorder", "watchdog", "traceback", "py-spy", "faulthandler")
_PYSPY_TAGS = ("deadlock", "watchdog", "deadline", "idle", "quiet")  # latest evidence first
_LIBS = ("deepspeed", "transformers", "accelerate")
_NOT_OWN = ("<stdlib>", "torch", "numpy", "triton", "typing_extensions", "_pytest", "pluggy")
_LIB_PLUMBING = ("deepspeed/comm/", "deepspeed/utils/nvtx.py")  # collective and profiling wrappers
_LOG_LIMIT = 8 << 20  # bytes read from the end of each log
_TEXT_LIMIT = 400
_SHOWN_GROUPS = 4


@dataclass(frozen=True)
class RankState:
    rank: int
    op: str | None  # e.g. "_ALLGATHER_BASE", "REDUCE", "all_reduce", "barrier"
    seq: int | None  # collective sequence number (SeqNum / collective_seq_id)
    numel_in: int | None
    numel_out: int | None
    group: str | None  # process group, e.g. "default_pg"
    frames: tuple[Frame, ...]  # innermost first, full stack as found
    sources: tuple[str, ...]  # every source that had evidence on this rank, best first


@dataclass(frozen=True)
class Signature:
    ranks: tuple[RankState, ...]
    where: str  # where the ranks wait, and how they differ: "rank 0 in all_reduce, rank 1 not in a collective"
    stack: str  # the code they wait from, innermost first: "toy.py:step ← toy.py:main" ("" when none)
    notes: tuple[str, ...]  # e.g. "nccl_trace_rank_1: could not be read (...)"

    @property
    def text(self) -> str:
        """One line: where, then " — " and the stack (where clipped so that the line stays short)."""
        if not self.stack:
            return _clip(self.where, _TEXT_LIMIT)
        return f"{_clip(self.where, max(_TEXT_LIMIT - len(self.stack) - 3, 80))} — {self.stack}"


def hang_signature(sig: Signature | None, proof: Proof | None) -> str:
    """The signature of a hung run as one line (``hang_record``'s text)."""
    return hang_record(sig, proof).text


def hang_record(sig: Signature | None, proof: Proof | None) -> HangSignature:
    """The signature of a hung run, typed: where each rank waits and the code it waits from.

    With an early deadlock proof, both come from the proof: the ranks' own account of their
    waits, and the main-thread stacks of the snapshot that proved it (never an older dump, e.g.
    one taken while the ranks were still importing), else the stacks' of the run folder.
    Without one, both come from the run folder's evidence (``analyze``).  The waits are the
    canonical ops (``hangsig.canonical_op``) either way, so one deadlock has one signature."""
    if proof is None:
        if sig is None:
            return HangSignature()
        waits = tuple((s.rank, canonical_op(s.op)) for s in sig.ranks if s.op is not None)
        return HangSignature(tuple(sorted(set(waits))), _lead_frames(sig.ranks), sig.text)
    states = _proof_states(proof)
    if any(own_frames(s.frames) for s in states):
        stack, frames = _stack_text(states), _lead_frames(states)
    elif sig is not None:  # a proof without stacks (none of its ranks' frames is the code under test)
        stack, frames = sig.stack, _lead_frames(sig.ranks)
    else:
        stack, frames = "", ()
    text = f"{proof.where} — {stack}" if stack else proof.where
    return HangSignature(_proof_waits(proof), frames, text)


def _proof_waits(proof: Proof) -> tuple[tuple[int, str], ...]:
    waits = {(r, canonical_op(c.op)) for r, heads in proof.waits for c in heads}
    waits |= {(r, canonical_op(w.call or w.form)) for r, w in proof.stores}
    return tuple(sorted(waits))


def _proof_states(proof: Proof) -> tuple[RankState, ...]:
    """The proof's main-thread stacks ("file:function:line", innermost first) as rank states."""
    states = []
    for rank, stack in proof.stacks:
        frames = []
        for text in stack:
            file, function, line = (text.rsplit(":", 2) + ["", ""])[:3] if text.count(":") >= 2 else (text, "?", "")
            frames.append(Frame(function, file, as_int(line)))
        states.append(RankState(rank, None, None, None, None, None, tuple(frames), ("deadlock proof",)))
    return tuple(states)


def _lead_frames(states: tuple[RankState, ...]) -> tuple[str, ...]:
    """The call site of the signature's stack: the lead rank's own frames, 'file.py:function'."""
    own = {s.rank: own_frames(s.frames) for s in states if own_frames(s.frames)}
    if not own:
        return ()
    lead = max((s for s in states if s.rank in own), key=lambda s: (len(own_frames(s.frames, len(s.frames))), -s.rank))
    return tuple(f"{_basename(f.file)}:{_short_function(f.function)}" for f in own[lead.rank])


@dataclass(frozen=True)
class _Facts:
    """What one source says about one rank."""

    rank: int
    source: str
    op: str | None = None
    seq: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    group: str | None = None
    frames: tuple[Frame, ...] = ()


@dataclass(frozen=True)
class _Line:
    rank: int | None  # from a "[rankN]:" prefix or the log's file name
    text: str


# ---------------------------------------------------------------- public API


def analyze(run_dir: Path) -> Signature | None:
    """Everything the run folder tells about where each rank was stuck; None when it holds no evidence."""
    run_dir = Path(run_dir)
    notes: list[str] = []  # each reader adds what it could not use
    works = read_flight_recorder(run_dir, notes)
    streams = _log_streams(run_dir, notes)
    facts = [_fr_facts(rank, w) for rank, w in sorted(works.items())]
    facts += _watchdog_facts(streams) + _traceback_facts(streams)
    facts += _pyspy_facts(run_dir, notes) + _faulthandler_facts(run_dir, notes)
    notes += _disagreements(facts)
    states = _rank_states(facts)
    if not states and not notes:
        return None
    where, stack = _signature_parts(states, _first_mismatch(works))
    return Signature(ranks=states, where=where, stack=stack, notes=tuple(notes))


def own_frames(frames: tuple[Frame, ...], limit: int = 3) -> tuple[Frame, ...]:
    """The innermost `limit` frames outside torch, the stdlib and site-packages 'plumbing' —
    i.e. frames in deepspeed/, transformers/, accelerate/ or user scripts (the repro).

    deepspeed's collective and profiling wrappers (deepspeed/comm/, utils/nvtx.py) count as
    plumbing.  Where the stack crosses from one library into another (transformers calling
    deepspeed), the innermost frame of the calling library is kept ahead of deeper frames,
    so a short list still says which library led where.  Innermost first.
    """
    own = [(i, _package(f.file)) for i, f in enumerate(frames) if _is_own(f)]
    boundaries = [i for n, (i, pkg) in enumerate(own)
                  if n == 0 or (pkg != own[n - 1][1] and pkg != "<script>")]
    rest = [i for i, _ in own if i not in boundaries]
    return tuple(frames[i] for i in sorted((boundaries + rest)[:max(limit, 0)]))


def render_stack(state: RankState) -> str:
    """Multi-line text of one rank's full stack, innermost first, for reports.

    The head line says what the rank was in; own frames (see ``own_frames``) are marked ``*``.
    """
    head = f"rank {state.rank}: {_state_detail(state)}"
    if state.sources:
        head += f" (from {', '.join(state.sources)})"
    if not state.frames:
        return head + "\n    (no Python stack found)"
    lines = [head]
    for f in state.frames:
        where = f.file if f.line is None else f"{f.file}:{f.line}"
        lines.append(f"  {'*' if _is_own(f) else ' '} {f.function} ({where})")
    return "\n".join(lines)


# ---------------------------------------------------------------- flight recorder


def read_flight_recorder(run_dir: Path, notes: list[str]) -> dict[int, tuple[Entry, ...]]:
    works: dict[int, tuple[Entry, ...]] = {}
    for rank, path in RunDir(run_dir).fr_dumps():
        if rank is None or not path.is_file():
            continue
        try:
            found = flightrec.dump(flightrec.load(path))
        except OSError as e:
            notes.append(f"{path.name}: could not be read ({e.strerror or e})")
            continue
        except flightrec.LOAD_ERRORS as e:
            notes.append(_clip(f"{path.name}: could not be read ({type(e).__name__}: {e})", 300))
            continue
        if found is None:
            notes.append(f"{path.name}: not a flight-recorder dump (no entries)")
            continue
        works[rank] = found.entries
    return works


def _stuck(works: Sequence[Entry]) -> Entry | None:
    """Per process group the pending entry with the lowest SeqNum; of those, the oldest."""
    pending = [w for w in works if w.state != "completed"]
    lowest: dict[tuple[str, bool], int] = {}
    for w in pending:
        key = (w.pg, w.p2p)
        lowest[key] = min(lowest.get(key, w.seq), w.seq)
    return next((w for w in pending if w.seq == lowest[(w.pg, w.p2p)]), None)


def _fr_facts(rank: int, works: Sequence[Entry]) -> _Facts:
    w = _stuck(works)
    if w is None:
        return _Facts(rank, "flight-recorder")
    return _Facts(rank, "flight-recorder", w.op, w.seq, w.first_in, w.first_out, w.group, w.frames)


def _first_mismatch(works: dict[int, tuple[Entry, ...]]) -> str | None:
    """The first SeqNum at which the ranks' recorded collectives differ in op or size."""
    tables = {r: {(w.pg, w.seq): w for w in ws if not w.p2p} for r, ws in works.items()}
    keys = sorted({k for t in tables.values() for k in t}, key=lambda k: (k[0] != "0", k))
    for key in keys:
        seen = {r: t[key] for r, t in sorted(tables.items()) if key in t}
        if len(seen) > 1 and len({(w.op, w.first_in, w.first_out) for w in seen.values()}) > 1:
            return _mismatch_text(key[1], seen)
    return None


def _mismatch_text(seq: int, seen: dict[int, Entry]) -> str:
    with_op = len({w.op for w in seen.values()}) > 1
    with_out = len({w.first_in for w in seen.values()}) == 1
    labels = {}
    for rank, w in seen.items():
        words = [w.op] if with_op else []
        words.append(f"numel {w.first_in}" + (f"->{w.first_out}" if with_out else ""))
        labels[rank] = " ".join(words) + (" (completed)" if w.state == "completed" else "")
    groups = _group_ranks(labels)
    shown = " vs ".join(f"{_ranks_label(rs)} {label}" for label, rs in groups[:_SHOWN_GROUPS])
    return f"first mismatch at SeqNum {seq}: {shown}{_more(groups)}"


# ---------------------------------------------------------------- logs


_WATCHDOG = re.compile(r"Rank (\d+)\]\s*Watchdog caught collective operation timeout: WorkNCCL\(")
_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut)=(-?\w+)")
_PG_GUID = re.compile(r"PG GUID \S*?\(([^)]*)\) Rank (\d+)\]")
_STACK_HEAD = re.compile(r"Stack trace of the failed collective")
_STACK_FRAME = re.compile(r"^#\d+ (\S+) from (.+?):(\d+)\s*$")
_TB_HEAD = "Traceback (most recent call last):"
_TB_FRAME = re.compile(r'^\s+File "(.+)", line (\d+), in (.+)$')


def _log_streams(run_dir: Path, notes: list[str]) -> list[list[_Line]]:
    """Each log's lines with the rank each belongs to, launcher.log first."""
    streams = []
    for path in RunDir(run_dir).logs():
        if path.is_file():
            rank = rank_of_log(path)
            streams.append([_line(raw, rank) for raw in _tail_text(path, notes).splitlines()])
    return streams


def _line(raw: str, file_rank: int | None) -> _Line:
    rank, text = rank_tagged(raw)
    return _Line(rank, text) if rank is not None else _Line(file_rank, raw)


def _tail_text(path: Path, notes: list[str]) -> str:
    """The file's last _LOG_LIMIT bytes as text; "" with a note when it cannot be read."""
    try:
        return read_tail(path, _LOG_LIMIT)
    except OSError as e:
        notes.append(f"{path.name}: could not be read ({e.strerror or e})")
        return ""


def _watchdog_facts(streams: list[list[_Line]]) -> list[_Facts]:
    """The first watchdog timeout each rank reported (the line repeats), its group and stack."""
    works: dict[int, str] = {}
    groups: dict[int, str] = {}
    stacks: dict[int, tuple[Frame, ...]] = {}
    for stream in streams:
        for line in stream:
            m = _WATCHDOG.search(line.text)
            if m:
                works.setdefault(_pick(line.rank, m[1]), line.text[m.end():])
            g = _PG_GUID.search(line.text)
            if g and "watchdog" in line.text.lower():
                groups.setdefault(_pick(line.rank, g[2]), g[1])
        for rank, frames in _collective_stacks(stream):
            stacks.setdefault(rank, frames)
    return [_watchdog_rank(rank, works.get(rank), groups.get(rank), stacks.get(rank, ()))
            for rank in sorted(works.keys() | stacks.keys())]


def _pick(prefix_rank: int | None, pg_rank: str) -> int:
    """The global rank from a line prefix or file name, else the rank the message names."""
    return prefix_rank if prefix_rank is not None else int(pg_rank)


def _watchdog_rank(rank: int, work: str | None, group: str | None,
                   frames: tuple[Frame, ...]) -> _Facts:
    fields = dict(_WORK_FIELD.findall(work or ""))
    numels = [as_int(fields.get(k)) for k in ("NumelIn", "NumelOut")]
    numel_in, numel_out = (n if n is not None and n >= 0 else None for n in numels)
    return _Facts(rank, "watchdog", op=fields.get("OpType"), seq=as_int(fields.get("SeqNum")),
                  numel_in=numel_in, numel_out=numel_out, group=group, frames=frames)


def _collective_stacks(stream: list[_Line]) -> Iterable[tuple[int, tuple[Frame, ...]]]:
    """NCCL's "Stack trace of the failed collective:" blocks ("#0 fn from file:line" lines)."""
    for n, line in enumerate(stream):
        if not _STACK_HEAD.search(line.text):
            continue
        m = re.search(r"Rank (\d+)\]", line.text)
        rank = line.rank if line.rank is not None else as_int(m[1] if m else None)
        frames = []
        for follow in stream[n + 1:]:
            f = _STACK_FRAME.match(follow.text)
            if not f:
                break
            frames.append(Frame(f[1], f[2], int(f[3])))
        if rank is not None and frames:
            yield rank, tuple(frames)


def _traceback_facts(streams: list[list[_Line]]) -> list[_Facts]:
    found: dict[int, _Facts] = {}
    for stream in streams:
        by_rank: dict[int, list[str]] = {}
        for line in stream:
            if line.rank is not None:
                by_rank.setdefault(line.rank, []).append(line.text)
        for rank, texts in by_rank.items():
            frames = _last_traceback(texts)
            if frames:
                found[rank] = _Facts(rank, "traceback", op=_c10d_op(frames), frames=frames)
    return [found[r] for r in sorted(found)]


def _last_traceback(texts: list[str]) -> tuple[Frame, ...]:
    """Frames of the last Python traceback, innermost first."""
    starts = [n for n, t in enumerate(texts) if t.strip() == _TB_HEAD]
    if not starts:
        return ()
    frames = []
    for text in texts[starts[-1] + 1:]:
        m = _TB_FRAME.match(text)
        if m:
            frames.append(Frame(m[3].strip(), m[1], int(m[2])))
        elif not text[:1].isspace():  # the exception line ends the traceback
            if text.startswith("KeyboardInterrupt"):
                return ()  # dsbisect's own SIGINT at teardown, not where the rank was stuck
            break
    return tuple(reversed(frames))


# ---------------------------------------------------------------- stack dumps


def _pyspy_facts(run_dir: Path, notes: list[str]) -> list[_Facts]:
    """Per rank, the main thread of the latest py-spy dump that holds a Python stack."""
    files: dict[int, list[tuple[int, Path]]] = {}
    for rank, tag, path in RunDir(run_dir).pyspy_dumps():
        if rank is None:
            notes.append(f"{path.name}: no rank number in the name; not used")
            continue
        order = _PYSPY_TAGS.index(tag) if tag in _PYSPY_TAGS else len(_PYSPY_TAGS)
        files.setdefault(rank, []).append((order, path))
    facts = []
    for rank, found in sorted(files.items()):
        for _, path in sorted(found):
            thread = main_thread(pyspy_threads(_tail_text(path, notes)))
            if thread is not None:
                facts.append(_Facts(rank, "py-spy", op=_c10d_op(thread.frames), frames=thread.frames))
                break
            notes.append(f"{path.name}: no Python stack in it")
    return facts


def _faulthandler_facts(run_dir: Path, notes: list[str]) -> list[_Facts]:
    """Per rank, the main thread of the last dump in its newest non-empty faulthandler file."""
    newest: dict[int, tuple[float, str, Path]] = {}
    for rank, _, path in RunDir(run_dir).faulthandler_dumps():
        stat = path.stat() if path.is_file() else None
        if stat is not None and stat.st_size > 0:
            newest[rank] = max(newest.get(rank, (0.0, "", path)), (stat.st_mtime, path.name, path))
    facts = []
    for rank, (_, _, path) in sorted(newest.items()):
        thread = main_thread(last_dump(faulthandler_threads(_tail_text(path, notes))))
        if thread is not None:
            facts.append(_Facts(rank, "faulthandler", op=_c10d_op(thread.frames), frames=thread.frames))
    return facts


def _c10d_op(frames: tuple[Frame, ...]) -> str | None:
    """The torch.distributed call a stack is in: its outermost distributed_c10d frame."""
    calls = [_short_function(f.function) for f in frames
             if f.file.replace("\\", "/").endswith("torch/distributed/distributed_c10d.py")]
    calls = [c for c in calls if c != "wrapper"]
    return calls[-1] if calls else None


# ---------------------------------------------------------------- combining


def _rank_states(facts: list[_Facts]) -> tuple[RankState, ...]:
    by_rank: dict[int, dict[str, _Facts]] = {}
    for f in facts:
        by_rank.setdefault(f.rank, {}).setdefault(f.source, f)
    return tuple(_rank_state(rank, found) for rank, found in sorted(by_rank.items()))


def _rank_state(rank: int, found: dict[str, _Facts]) -> RankState:
    ordered = [found[s] for s in _FACT_ORDER if s in found]
    lead = next((f for f in ordered if f.op is not None), _Facts(rank, ""))
    group = lead.group or next((f.group for f in ordered
                                if f.group and f.seq in (None, lead.seq)), None)
    frames = next((found[s].frames for s in SOURCES if s in found and found[s].frames), ())
    return RankState(rank=rank, op=lead.op, seq=lead.seq, numel_in=lead.numel_in,
                     numel_out=lead.numel_out, group=group, frames=frames,
                     sources=tuple(s for s in SOURCES if s in found))


def _disagreements(facts: list[_Facts]) -> list[str]:
    """Ranks whose flight recorder and watchdog name different SeqNums."""
    fr = {f.rank: f.seq for f in facts if f.source == "flight-recorder" and f.seq is not None}
    return [f"rank {f.rank}: the flight recorder is at SeqNum {fr[f.rank]}, "
            f"the watchdog reported SeqNum {f.seq}"
            for f in facts if f.source == "watchdog" and f.seq is not None
            and f.rank in fr and fr[f.rank] != f.seq]


# ---------------------------------------------------------------- signature text


def _signature_parts(states: tuple[RankState, ...], mismatch: str | None) -> tuple[str, str]:
    """(where the ranks wait, the stack they wait from)."""
    if not states:
        return "no rank left evidence that could be read", ""
    clauses = [_where(states), _split(states, "seq", "ranks at different SeqNum"),
               _split(states, "numel_in", "ranks with different numel"),
               _split(states, "op", "ranks in different ops"), mismatch]
    return "; ".join(c for c in clauses if c), _stack_text(states)


def _where(states: tuple[RankState, ...]) -> str:
    groups = _group_ranks({s.rank: _state_label(s) for s in states})
    shown = ", ".join(f"{_ranks_label(rs)} {label}" for label, rs in groups[:_SHOWN_GROUPS])
    return shown + _more(groups)


def _state_label(state: RankState) -> str:
    if state.op is None:
        return "not in a collective"
    label = f"in {state.op}"
    if state.numel_in is not None:
        label += f" numel {state.numel_in}"
    return label + (f" at SeqNum {state.seq}" if state.seq is not None else "")


def _state_detail(state: RankState) -> str:
    if state.op is None:
        return "not in a collective"
    words = [state.op]
    if state.seq is not None:
        words.append(f"SeqNum {state.seq}")
    if state.numel_in is not None or state.numel_out is not None:
        words.append(f"numel {state.numel_in}->{state.numel_out}")
    if state.group:
        words.append(f"in {state.group}")
    return " ".join(words)


def _split(states: tuple[RankState, ...], field: str, title: str) -> str | None:
    """'ranks at different SeqNum: 0@122, 1@121' when the ranks that have `field` disagree."""
    values = {s.rank: getattr(s, field) for s in states if getattr(s, field) is not None}
    if len(set(values.values())) < 2:
        return None
    sep = " " if field == "op" else "@"
    groups = _group_ranks({r: str(v) for r, v in values.items()})
    shown = ", ".join(f"{span(rs)}{sep}{v}" for v, rs in groups[:_SHOWN_GROUPS])
    return f"{title}: {shown}{_more(groups)}"


def _stack_text(states: tuple[RankState, ...]) -> str:
    """The most informative rank's own frames, then briefly those of ranks that differ."""
    own = {s.rank: _frames_label(own_frames(s.frames)) for s in states if own_frames(s.frames)}
    if not own:
        return ""
    lead = max((s for s in states if s.rank in own),
               key=lambda s: (len(own_frames(s.frames, len(s.frames))), -s.rank))
    others = _group_ranks({r: label for r, label in own.items() if label != own[lead.rank]})
    if not others:
        return own[lead.rank]
    brief = "; ".join(f"{_ranks_label(rs)}: {label}" for label, rs in others[:2])
    return f"{own[lead.rank]} ({brief}{_more(others, 2)})"


def _frames_label(frames: tuple[Frame, ...]) -> str:
    return " ← ".join(f"{_basename(f.file)}:{_short_function(f.function)}" for f in frames)


def _group_ranks(labels: dict[int, str]) -> list[tuple[str, list[int]]]:
    """Ranks sharing a label, in order of their lowest rank."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(labels):
        groups.setdefault(labels[rank], []).append(rank)
    return list(groups.items())


def _ranks_label(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {span(ranks)}"




def _more(groups: list, shown: int = _SHOWN_GROUPS) -> str:
    return f", +{len(groups) - shown} more" if len(groups) > shown else ""


# ---------------------------------------------------------------- frames and paths


_SITE = re.compile(r"/(?:site|dist)-packages/([^/]+)")
_STDLIB_DIR = re.compile(r"/lib/python\d+\.\d+/")


def _package(file: str) -> str:
    """'deepspeed', 'torch', ... for library code, '<stdlib>', or '<script>' for the user's."""
    path = file.replace("\\", "/")
    site = _SITE.search(path)
    if site:
        return site[1].removesuffix(".py")
    if path.startswith("<frozen") or _STDLIB_DIR.search(path):
        return "<stdlib>"
    parts = path.split("/")
    lib = next((p for p in parts[:-1] if p in _LIBS + ("torch",)), None)
    if lib:
        return lib  # a source checkout, or py-spy's shortened "torch/distributed/..."
    if not path.startswith("/") and parts[0].removesuffix(".py") in sys.stdlib_module_names:
        return "<stdlib>"  # py-spy's shortened "threading.py"
    return "<script>"


def _is_own(frame: Frame) -> bool:
    """The user's scripts and every installed package but torch, numpy and the stdlib: the
    code under test (deepspeed, transformers, accelerate, but also megatron, peft, a toy)."""
    package = _package(frame.file)
    if package in _NOT_OWN:
        return False
    path = frame.file.replace("\\", "/")
    return not any(p in path for p in _LIB_PLUMBING)


def _basename(file: str) -> str:
    return file.replace("\\", "/").rsplit("/", 1)[-1]


def _short_function(name: str) -> str:
    """py-spy's 'Init._allgather_params_coalesced' -> '_allgather_params_coalesced'."""
    return name.rsplit(".", 1)[-1] if not name.startswith("<") else name


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
