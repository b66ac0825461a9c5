"""``dsbisect workaround``'s report (``envdiff.workaround.Workarounds``) for the terminal, in
Markdown and as an HTML page: the command as given, each knob alone, then the groups of knobs set
together, each with its runs; a workaround's cost and source beside it.  Everything shown goes
through ``safe`` (the page: ``ladder.esc``, redacted then escaped).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from dsbisect import __version__
from dsbisect.core.outside import safe
from dsbisect.envdiff.workaround import KnobTrial, Workarounds
from dsbisect.render.htmlreport import document, facts
from dsbisect.render.ladder import esc

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


def html(w: Workarounds) -> str:
    """The report as one self-contained page (the HTML report's CSS and CSP: it fetches nothing)."""
    about = [("command", shlex.join(w.command)), ("as given", f"{w.baseline.value} (run "
             + ", ".join(map(str, w.baseline_runs)) + ")"), ("note", NOTE)]
    body = [f"<header><h1>dsbisect workaround</h1><p class=\"meta\">dsbisect {esc(__version__)} · {esc(head(w))}"
            f"</p>{facts(about)}</header>"]
    found = w.found
    if found:
        body.append(_section("workarounds", "Workarounds (not fixes)", found))
    body.append(_section("alone", "Knobs one at a time", w.trials))
    if w.groups:
        body.append(_section("together", f"Knobs together (groups of at most {w.max_group})", w.groups))
    left = [*w.skipped, *w.groups_skipped]
    if left:
        body.append("<section id=\"not-tried\"><h2>Not tried</h2><ul class=\"caveats\">"
                    + "".join(f"<li>{esc(x)}</li>" for x in left) + "</ul></section>")
    return document("dsbisect workaround", body)


def _section(ident: str, title: str, trials: Sequence[KnobTrial]) -> str:
    rows = "".join(_row(t) for t in trials)
    return (f"<section id=\"{ident}\"><h2>{esc(title)}</h2><div class=\"scroll\"><table class=\"knobs\"><thead><tr>"
            "<th>works</th><th>knobs</th><th>was</th><th>runs</th><th>may cost</th><th>documented at</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div></section>")


def _row(t: KnobTrial) -> str:
    works = "<span class=\"pill pass\">WORKS</span>" if t.works else "no"
    knobs = "<br>".join(f"<code>{esc(k.describe())}</code>" for k in t.knobs)
    pills = " ".join(f"<span class=\"pill {esc(o.value)}\">#{i} {esc(o.value.upper())}</span>"
                     for i, o in zip(t.run_ids, t.outcomes))
    return (f"<tr><td>{works}</td><td>{knobs}</td><td>{esc(t.was())}</td><td>{pills}</td>"
            f"<td class=\"detail\">{esc(cost(t))}</td><td class=\"detail\">{esc(source(t))}</td></tr>")
