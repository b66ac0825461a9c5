"""What "this failure" is: the regression the bad end shows, and whether another run shows it.

Pure: no I/O.  A bisection learns an ``Identity`` from the bad end's run (with ``--find-fix``:
the broken end's) and counts an inner probe as bad only when its failure ``matches`` it; one
that fails differently is stepped around like an untestable point.

- a FAIL is its exception type and its message with numbers, paths, addresses and hex ids
  normalised (``normalise``), plus the innermost frames in the package under test where the
  run recorded them;
- a HANG is where each rank waits, in one form whichever rule proved it: the early proof's
  "rank 0 waits in ALLREDUCE #2 (1024), rank 1 in BARRIER #2" and the collective timeout's
  "rank 0 in all_reduce, rank 1 in barrier" are both "rank 0 in ALLREDUCE, rank 1 in BARRIER"
  (``hang_form``), plus the call-site frames of the signature.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dsbisect.verdict.hangsig import C10D_OPS, HangSignature, canonical_op
from dsbisect.core.model import Outcome, RegressOn, Verdict
from dsbisect.verdict.outcome import verdict

__all__ = ["C10D_OPS", "Failure", "HangSignature", "Identity", "Rule", "canonical_op", "hang_form", "judge", "learn",
           "matches", "normalise", "package_frames", "resolve", "same_names"]

# ------------------------------------------------------------------ normalise

_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:\\|~?/)?(?:[\w.\-]+[/\\])+[\w.\-]+|(?<![\w.])/[\w.\-]+")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_QUOTED = re.compile(r"'(<path>)'|\"(<path>)\"")
_NUMBERS = re.compile(r"(?<=[\[(])\s*<n>(?:\s*,\s*<n>)*\s*,?\s*(?=[\])])")  # a list or tuple of numbers: its length varies too
_NAMES = re.compile(r"'([^'\s]+)'|\"([^\"\s]+)\"|`([^`\s]+)`")  # what a message names: 'batch_size', "a.weight"


def normalise(text: str) -> str:
    """A failure message without what differs from run to run or release to release: hex ids
    and addresses (<hex>), paths (<path>), numbers (<n>), bracketed lists of numbers of any
    length ([<n>…]); spaces collapsed."""
    text = _HEX.sub("<hex>", text)
    text = _PATH.sub("<path>", text)
    text = _QUOTED.sub(r"\1\2", text)
    text = _NUMBER.sub("<n>", text)
    text = _NUMBERS.sub("<n>…", text)
    return " ".join(text.split())


def _names(message: str) -> set[str]:
    return {a or b or c for a, b, c in _NAMES.findall(message)} - {"<path>", "<n>", "<hex>"}


def _related(a: str, b: str) -> bool:
    """One name renamed into the other: 'weight' and 'module.weight', 'fc' and '_orig_mod.fc'."""
    return a in b or b in a


def same_names(a: str, b: str) -> bool:
    """Whether two messages name the same things, allowing a rename that keeps the name inside
    the other ('weight' → 'module.weight'): ``'X' has no attribute 'sampler'`` and ``'X' has no
    attribute 'batch_size'`` name different attributes, so they are different failures."""
    na, nb = _names(a), _names(b)
    only_a, only_b = na - nb, nb - na
    return all(any(_related(x, y) for y in only_b) for x in only_a) and \
        all(any(_related(y, x) for x in only_a) for y in only_b)


# ------------------------------------------------------------------- identity


@dataclass(frozen=True)
class Failure:
    """A FAIL as classified: the exception type (its last dotted part; "" for a death by signal or
    an exit code), its message (with the "(from ...)" of the exceptions it was raised from), and
    the reason as the run gave it.  A run's record keeps the reason only: ``records.migrate``
    reads this from it, once."""

    error: str
    message: str
    shown: str


@dataclass(frozen=True)
class Identity:
    kind: Outcome  # HANG or FAIL
    error: str  # the exception type ("RuntimeError"); "" for a hang or a death by signal
    message: str  # normalised: the message of a FAIL, the hang's form (HangSignature.form) of a HANG
    frames: tuple[str, ...] = ()  # "file.py:function", innermost first (package frames of a FAIL)
    shown: str = ""  # the reason as the run gave it, for the report
    hang: HangSignature | None = None  # a HANG's waits, typed (what ``matches`` compares)

    def describe(self) -> str:
        """'FAIL RuntimeError: Output 0 of ... at engine.py:step' (a failure as the run gave
        it); 'HANG rank 0 in ALLREDUCE, rank 1 in BARRIER at ...' (a hang in its one form)."""
        what = self.shown if self.kind is Outcome.FAIL and self.shown else (
            f"{self.error}: {self.message}" if self.error else self.message)
        what = what if len(what) <= 160 else what[:159] + "…"  # the whole reason is the run's (show)
        where = f" at {' ← '.join(self.frames[:3])}" if self.frames else ""
        return f"{self.kind.value.upper()} {what or '(no detail)'}{where}"

    def as_json(self) -> dict:
        out = {"kind": self.kind.value, "error": self.error, "message": self.message,
               "frames": list(self.frames), "identity": self.describe(), "shown": self.shown}
        return out | ({"hang": self.hang.to_json()} if self.hang is not None else {})

    def hang_waits(self) -> tuple[tuple[int, str], ...]:
        """A HANG's waits (none known: ``hang`` is None)."""
        return self.hang.waits if self.hang is not None else ()

    @classmethod
    def from_json(cls, d: Mapping) -> Identity | None:
        """From ``as_json``'s dict (``records.migrate.identity`` lifts an older one first)."""
        try:
            kind = Outcome(d["kind"])
            message = str(d.get("message", ""))
            hang = HangSignature.from_json(d["hang"]) if "hang" in d else None
            return cls(kind, str(d.get("error", "")), message, tuple(str(f) for f in d.get("frames", ())),
                       str(d.get("shown", "")), hang)
        except (KeyError, ValueError, TypeError):
            return None


def hang_form(text: str) -> str:
    """Where each rank waits, in one form: 'rank 0 in ALLREDUCE, rank 1 in BARRIER', from the
    text of a hang signature of either rule as older records hold it; "" when it names no
    collective.  A run of this dsbisect records its signature typed (``HangSignature``)."""
    return HangSignature.from_text(text).form


def learn(outcome: Outcome, *, failure: Failure | None = None, hang: HangSignature | None = None,
          frames: tuple[str, ...] = (), shown: str = "") -> Identity | None:
    """The identity of one run's failure, typed: a FAIL's ``failure`` (and the innermost ``frames``
    in the package under test), a HANG's ``hang`` (``shown``: the text the run shows for it); None
    for a run that did not fail or hang, or whose failure is not given."""
    if outcome is Outcome.HANG and hang is not None:
        return Identity(Outcome.HANG, "", hang.form, hang.frames, shown, hang)
    if outcome is Outcome.FAIL and failure is not None:
        return Identity(Outcome.FAIL, failure.error, normalise(failure.message), tuple(frames), failure.shown)
    return None


def matches(learned: Identity, seen: Identity | None) -> bool:
    """Whether ``seen`` is the failure ``learned`` names.  A hang that names no collective (a
    plain timeout) cannot be told apart from another hang: it matches; so does a failure in the
    same innermost frame of the package whose message changed between releases but names the
    same things (``same_names``), and a hang whose ranks' waits are a part of the other's (a
    rank whose stack could not be read)."""
    if seen is None or seen.kind is not learned.kind:
        return False
    if learned.kind is Outcome.HANG:  # where a rank's stack was not read, its wait is missing
        a, b = (set(i.hang_waits()) for i in (learned, seen))
        return not a or not b or a <= b or b <= a
    if learned.error != seen.error:
        return False
    if learned.message == seen.message:
        return True
    return bool(learned.frames and seen.frames and learned.frames[0] == seen.frames[0]) and \
        same_names(learned.message, seen.message)


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')


def package_frames(text: str, reason: str, packages: tuple[str, ...], limit: int = 3) -> tuple[str, ...]:
    """The innermost frames in ``packages`` (import names, e.g. 'deepspeed') of the traceback in
    ``text`` that ends in ``reason``'s exception: 'deepspeed/runtime/engine.py:step', innermost
    first; () where no traceback ends in it or none of its frames is in those packages."""
    head = reason.split(" (from ", 1)[0]
    name = head.split(":", 1)[0]
    blocks: list[list[tuple[str, str]]] = []
    frames: list[tuple[str, str]] = []
    for ln in text.splitlines():
        ln = re.sub(r"^\[rank\d+\]:\s*", "", ln).strip()
        if ln.startswith("Traceback (most recent call last)"):
            frames = []
        elif m := _FRAME.match(ln):
            frames.append((m[1].replace("\\", "/"), m[2]))
        elif frames and name and (ln == name or ln.startswith(name + ":")) and _same_start(ln, head):
            blocks.append(frames)
            frames = []
    if not blocks:
        return ()
    own = []
    for file, function in reversed(blocks[0]):
        for pkg in packages:
            i = file.rfind(f"/{pkg}/")
            if i >= 0:
                own.append(f"{file[i + 1:]}:{function}")
                break
    return tuple(own[:limit])


def _same_start(line: str, head: str) -> bool:
    """The exception line a reason was made from (the reason may hold a later message line)."""
    line, head = " ".join(line.split()), " ".join(head.split())
    return head.startswith(line) or line.startswith(head[:80])


# ------------------------------------------------------------------- one rule


@dataclass(frozen=True)
class Rule:
    """What a bisection counts as bad, once the bad end is known."""
    regress_on: RegressOn  # HANG, FAIL or ANY; AUTO only while the bad end is not known
    wanted: str | None = None  # --signature
    learned: Identity | None = None  # None: --any-failure, or nothing learned

    def differs(self, outcome: Outcome, seen: Identity | None) -> bool:
        """Whether a run of ``outcome`` fails otherwise than the learned failure (stepped around)."""
        return (self.learned is not None and not self.wanted and seen is not None
                and seen.kind is self.learned.kind and outcome is seen.kind and not matches(self.learned, seen))


def resolve(regress_on: RegressOn, end: Identity | None) -> RegressOn:
    """AUTO becomes the kind of the defining end's failure (ANY while it showed none)."""
    if regress_on is not RegressOn.AUTO:
        return regress_on
    if end is None:
        return RegressOn.ANY
    return RegressOn.HANG if end.kind is Outcome.HANG else RegressOn.FAIL


def judge(outcome: Outcome, text: str, rule: Rule, seen: Identity | None) -> Verdict:
    """GOOD/BAD/SKIP of one run under ``rule``: BAD only for the learned failure (a failure of
    the learned kind that differs is SKIP; one of the other kind under ``--regress-on any``
    still counts, as asked)."""
    rule_on = RegressOn.ANY if rule.regress_on is RegressOn.AUTO else rule.regress_on
    v = verdict(outcome, rule_on, canonical_text(text), canonical_text(rule.wanted) if rule.wanted else None)
    if v is not Verdict.BAD or rule.wanted or rule.learned is None:
        return v
    return Verdict.SKIP if rule.differs(outcome, seen) else v


_OP_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def canonical_text(text: str) -> str:
    """``text`` with torch.distributed's function names as OpType names, so that a --signature
    (or a learned hang) matches both forms of one hang: 'all_reduce' reads 'ALLREDUCE'."""
    return _OP_WORD.sub(lambda m: C10D_OPS.get(m[0], m[0]) if m[0] in C10D_OPS else m[0], text)
