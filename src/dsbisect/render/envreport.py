"""The change table of two environments (``dsbisect diff``): rich, markdown and JSON.

Every cell comes from the fields of a ``Change``; text read from the files (names, URLs,
paths) is inert (never rich markup) and its credentials were hidden when it was read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from rich.table import Table
from rich.text import Text

from dsbisect.envdiff.environments import Change, Environment, Kind, diff
from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.model import IndexOptions
from dsbisect.envdiff.pins import EnvFormat, Pin
from dsbisect.core.outside import safe, safe_text
from dsbisect.core.redact import redact

# What `pip freeze` leaves out of its list (pip always; setuptools, wheel and distribute on python < 3.12).
_FREEZE_SKIPS = ("setuptools", "wheel", "distribute")
# What a layered base is for: a CUDA build of torch is gigabytes, and what is built against it
# (deepspeed's ops) must match it. A change to one of these is noted on its row.
_HEAVY = ("torch",)
_KIND_STYLE = {Kind.CHANGED: "yellow", Kind.ADDED: "green", Kind.REMOVED: "red"}


@dataclass(frozen=True)
class EnvDiff:
    good: Environment
    bad: Environment
    changes: tuple[Change, ...]
    provided: Mapping[str, str]    # canonical name -> version of what the (layered) base provides

    def notes(self, change: Change) -> tuple[str, ...]:
        notes = list(change.notes)
        if change.name in self.provided and change.name in _HEAVY:
            notes.append(f"provided by the base ({self.provided[change.name]}): trials must install "
                         f"{change.name} unless --hold {change.name}")
        missing_side = self.good if change.kind is Kind.ADDED else self.bad if change.kind is Kind.REMOVED else None
        if missing_side is not None and missing_side.format is EnvFormat.REQUIREMENTS \
                and change.name in _FREEZE_SKIPS:
            notes.append(f"pip freeze leaves {change.name} out: {missing_side.source} may just not list it")
        return tuple(notes)


    def base_lines(self) -> list[str]:
        """One line for what the base provides of the changed packages (torch has a note of its own)."""
        shared = [c.name for c in self.changes if c.name in self.provided and c.name not in _HEAVY]
        if not shared:
            return []
        names = ", ".join(shared[:8]) + (f" and {len(shared) - 8} more" if len(shared) > 8 else "")
        return [f"the base provides {len(shared)} of the changed packages ({names}): a trial installs its own "
                f"version over the base's, unless --hold NAME keeps the base's"]


def summary(changes: Sequence[Change]) -> str:
    """``37 changes: 30 changed, 4 added, 3 removed``."""
    counts = {k: sum(1 for c in changes if c.kind is k) for k in Kind}
    parts = [f"{n} {k.value}" for k, n in counts.items() if n]
    return f"{len(changes)} change{'s' if len(changes) != 1 else ''}: {', '.join(parts)}"


def _cell(pin: Pin | None) -> str:
    return redact(pin.label) if pin is not None else ""


def _source(env: Environment) -> str:
    python = f", python {env.python}" if env.python else ""
    return f"{redact(env.source)} ({env.format.value}{python}, {len(env.pins)} packages)"


def context_lines(d: EnvDiff) -> list[str]:
    """Where each side came from and what was read but not used (index options, roots left out)."""
    lines = []
    for side, env in (("good", d.good), ("bad", d.bad)):
        lines.append(f"{side}: {_source(env)}")
        if env.requires_python:
            lines.append(f"  requires-python {env.requires_python}")
        if env.options:
            lines.append(f"  index options not used (give them on the command line): {'; '.join(env.options)}")
        lines += [f"  {n}" for n in env.notes]
    lines += d.base_lines()
    return [redact(ln) for ln in lines]


def table(d: EnvDiff) -> Table:
    t = Table(title=safe_text(summary(d.changes)), title_justify="left",
              caption=safe_text("\n".join(context_lines(d))), caption_justify="left")
    for header in ("package", "good", "bad", "kind", "notes"):
        t.add_column(header, overflow="fold")
    for c in d.changes:  # names, versions and notes come from the files read: outside text
        t.add_row(safe_text(c.name), safe_text(_cell(c.good)), safe_text(_cell(c.bad)),
                  Text(c.kind.value, style=_KIND_STYLE[c.kind]), safe_text("; ".join(d.notes(c))))
    return t


def markdown(d: EnvDiff) -> str:
    lines = [f"**{summary(d.changes)}**", ""]
    lines += [f"{'  ' if ln.startswith('  ') else ''}- {_md(ln.strip())}" for ln in context_lines(d)]
    lines += ["", "| package | good | bad | kind | notes |", "|---|---|---|---|---|"]
    for c in d.changes:
        cells = (c.name, _cell(c.good), _cell(c.bad), c.kind.value, "; ".join(d.notes(c)))
        lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return safe(text).replace("|", "\\|").replace("\n", " ")


def to_json(d: EnvDiff) -> dict:
    return {"summary": summary(d.changes),
            "good": _env_json(d.good), "bad": _env_json(d.bad),
            "changes": [change_json(c, d.notes(c)) for c in d.changes]}


def change_json(c: Change, notes: Sequence[str] = ()) -> dict:
    return {"name": c.name, "kind": c.kind.value, "good": _pin_json(c.good), "bad": _pin_json(c.bad),
            "bisectable": c.bisectable, "whole": c.whole, "describe": redact(c.describe()),
            "notes": list(notes or c.notes)}


def _pin_json(pin: Pin | None) -> dict | None:
    if pin is None:
        return None
    return {"version": pin.version, "direct": redact(pin.direct) if pin.direct else None, "editable": pin.editable,
            "requirement": redact(pin.requirement)}


def _env_json(env: Environment) -> dict:
    return {"source": redact(env.source), "format": env.format.value, "python": env.python,
            "requires_python": env.requires_python, "packages": len(env.pins),
            "options": [redact(o) for o in env.options], "notes": [redact(n) for n in env.notes],
            "roots": list(env.roots)}


def compare(good: str, bad: str, python: str | None = None, index: IndexOptions | None = None) -> EnvDiff:
    """Read (or resolve: ``SPEC@DATE`` against ``index``, ``git:REV:PATH``) both environments and
    the base the trials would be made from (``python``, default dsbisect's own; it provides
    packages only when layered, i.e. when it has torch)."""
    from dsbisect.envdiff.sources import resolve_given
    from dsbisect.envs.base import inspect_base

    if str(good) == str(bad) == "-":
        raise InputError("GOOD and BAD are both - : only one of them can be read from stdin")
    old, new = (r.environment for r in resolve_given(str(good), str(bad), index or IndexOptions(), python))
    changes = diff(old, new)
    if not changes:
        raise DsbisectError(f"no difference between GOOD and BAD: {redact(str(good))} and {redact(str(bad))} "
                            f"pin the same {len(old.pins)} packages")
    base = inspect_base(python)
    provided = {canonicalize_name(n): v for n, v, _ in base.dists} if base.version_of("torch") else {}
    return EnvDiff(old, new, changes, provided)
