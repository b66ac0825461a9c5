"""``dsbisect workaround``'s report (``envdiff.workaround.Workarounds``) for the terminal and in
Markdown: the command as given, each knob alone, then the groups of knobs set together, each with
its runs; a workaround's cost and source beside it.  Everything shown goes through ``safe``.
"""

from __future__ import annotations

from dsbisect.core.outside import safe
from dsbisect.envdiff.workaround import KnobTrial, Workarounds

NOTE = "a workaround, not a fix: the regression is still there; the setting steps around it"


def head(w: Workarounds) -> str:
    tried = f"{len(w.trials)} knobs" + (f" and {len(w.groups)} groups" if w.groups else "") + " tried"
    found = f"{len(w.found)} workaround(s) of {tried}" if w.found else f"no workaround among {tried}"
    return f"{found}; as given: {w.baseline.value} (run {', '.join(map(str, w.baseline_runs))})"


def runs(t: KnobTrial) -> str:
    return ", ".join(f"#{i} {o.value}" for i, o in zip(t.run_ids, t.outcomes))


def cost(t: KnobTrial) -> str:
    return "; ".join(dict.fromkeys(k.cost for k in t.knobs))


def source(t: KnobTrial) -> str:
    return "; ".join(dict.fromkeys(k.source for k in t.knobs))


def lines(w: Workarounds) -> list[str]:
    out = [head(w), NOTE]
    for title, trials in (("", w.trials), ("together:", w.groups)):
        if title and trials:
            out.append(title)
        for t in trials:
            mark = "WORKS" if t.works else "no"
            out.append(f"  {mark:5} {t.describe()} (was {t.was()}): {runs(t)}"
                       + (f"; cost: {cost(t)}; source: {source(t)}" if t.works else ""))
    out += [f"  not tried: {x}" for x in w.groups_skipped]
    return [safe(x) for x in out]


def markdown(w: Workarounds) -> str:
    md = [f"**{safe(head(w))}**", "", f"_{NOTE}_", "", "| works | knob | was | runs | cost | source |",
          "|---|---|---|---|---|---|"]
    for t in (*w.trials, *w.groups):
        knobs = " + ".join(f"`{k.describe()}`" for k in t.knobs)
        md.append(f"| {'**yes**' if t.works else 'no'} | {knobs} | {t.was()} | {runs(t)} | {cost(t)} | {source(t)} |")
    if w.groups_skipped:
        md += ["", *(f"- not tried: {x}" for x in w.groups_skipped)]
    return safe("\n".join(md)) + "\n"
