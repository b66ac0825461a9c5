"""A bisection of a number in the reports (issue 38): the metric's value at each tested point,
as plain lines (terminal and Markdown summaries) and as a Markdown table.  Pure."""

from __future__ import annotations

from dsbisect.records.numbers import Numbers

__all__ = ["lines", "markdown"]


def lines(numbers: Numbers | None) -> list[str]:
    """``metric loss@step5 (worse if differs by 1 %), 14 runs``, a line per tested point, then
    the notes; nothing for a bisection of pass/fail."""
    if numbers is None:
        return []
    out = [f"metric {numbers.metric} ({numbers.rule}), {numbers.runs} run{'s' * (numbers.runs != 1)}"]
    out += [f"  {label}: {values} — {call}" + (f" (measured unlike the ends: {'; '.join(p.conditions)})"
                                                 if p.conditions else "")
            for (label, values, call), p in zip(numbers.table(), numbers.points)]
    return out + [f"note: {n}" for n in numbers.notes]


def markdown(numbers: Numbers | None) -> list[str]:
    """The numbers as a Markdown table (with a blank line after); nothing without them."""
    if numbers is None:
        return []
    out = [f"**{numbers.metric}** ({numbers.rule}): {numbers.answer}", "",
           "| point | median | spread | runs | values | vs good end | conditions |", "|---|---|---|---|---|---|---|"]
    for p in numbers.points:
        values = ", ".join(f"{v:.6g}" for v in p.values) or "no reading"
        out.append(f"| {p.label} | {p.median:.6g} {numbers.unit} | {p.spread:.3g} | {len(p.values)} | {values} | "
                   f"{p.call} | {'; '.join(p.conditions) or 'like the ends'} |")
    return out + [""] + [f"> {n}" for n in numbers.notes] + ([""] if numbers.notes else [])
