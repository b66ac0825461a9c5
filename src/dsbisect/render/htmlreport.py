"""One self-contained HTML page: the bisections as ladders, each hang as a rank × collective
picture, with the words that name the rank that is missing or elsewhere above it.

Pure: the typed inputs of ``htmlsource`` (``RunPage``, ``Ladder``) in, one string out.  The
page fetches nothing (inline CSS and SVG; a Content-Security-Policy that allows no request and
no script), reads in light and dark mode and prints.  Everything that came from a run (logs,
frames, reasons, labels) goes through ``ladder.esc``: redacted, then HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsbisect import __version__
from dsbisect.render.ladder import Ladder, esc, mark, svg, tested_order
from dsbisect.render.rankview import Cell, Coll, Look, RankView, Row, State, build

CODE = ("command", "reproduce with")  # shown as code: copied, not read
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"


@dataclass(frozen=True)
class RunPage:
    """One run as the page shows it (built by ``htmlsource.run_page``)."""

    id: int
    title: str  # "toy · dsb-toy 1.3.0"
    outcome: str  # pass, fail, hang, skip, or the status of a run that did not end
    manual: bool
    reason: str
    signature: str
    seconds: float | None
    looks: tuple[Look, ...]  # two for an early proof (side by side), one for dumps, none without a folder
    early: bool  # the looks are the early deadlock proof's
    proof: str  # the proof's sentence
    note: str  # why there is no look, when there is none
    log_tail: str
    traceback: str = ""  # a failed run's: who raised first, the traceback, the other ranks' exceptions


@dataclass(frozen=True)
class Page:
    title: str
    ladders: tuple[tuple[str, tuple[Ladder, ...], str], ...]  # (heading, ladders, summary line) per bisection
    runs: tuple[RunPage, ...]
    note: str = ""
    # per bisection, in the order of ``ladders``: what a maintainer reads first, as (what, text):
    # ("the regression", ...), ("command", ...), ("environment", ...), ("reproduce with", ...)
    about: tuple[tuple[tuple[str, str], ...], ...] = ()
    head: tuple[tuple[str, str], ...] = ()  # the page's own first facts (a page of one run: its command, environment)


def render(page: Page) -> str:
    body = [f"<header><h1>{esc(page.title)}</h1><p class=\"meta\">dsbisect {esc(__version__)}"
            + (f" · {esc(page.note)}" if page.note else "") + "</p>" + facts(page.head) + "</header>"]
    if page.ladders:
        about = list(page.about) + [()] * (len(page.ladders) - len(page.about))
        body.append("<section id=\"bisections\"><h2>Bisections</h2>" + _LEGEND
                    + "".join(_bisection(h, ls, s, a) for (h, ls, s), a in zip(page.ladders, about)) + "</section>")
    body += _run_sections(page.runs)
    return document(page.title, body)


def document(title: str, body: Sequence[str]) -> str:
    """The page around ``body``: its CSP, viewport and colour scheme, and the CSS (also the
    workaround report's page: ``render.workaround``)."""
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta name=\"color-scheme\" content=\"light dark\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def _run_sections(runs: Sequence[RunPage]) -> list[str]:
    """The hangs (their looks at the ranks), the runs that did not hang but were looked at, then
    a table of the rest, each section named for what it holds."""
    hangs = [r for r in runs if r.outcome == "hang"]
    looked = [r for r in runs if r.looks and r.outcome != "hang"]
    others = [r for r in runs if r not in hangs and r not in looked]
    out = []
    if hangs:
        out.append("<section id=\"hangs\"><h2>Hangs and looks at the ranks</h2>" + _RANK_LEGEND
                   + "".join(run_section(r) for r in hangs) + "</section>")
    if looked:
        out.append("<section id=\"looked\"><h2>Looks at the ranks of runs that did not hang</h2>" + _RANK_LEGEND
                   + "".join(run_section(r) for r in looked) + "</section>")
    if others:
        heading = "Other runs" if hangs or looked else ("The run" if len(runs) == 1 else "Runs")
        out.append(f"<section id=\"runs\"><h2>{heading}</h2><div class=\"scroll\"><table class=\"runs\"><thead><tr>"
                   "<th>run</th><th>point</th><th>outcome</th><th>seconds</th><th>reason</th></tr></thead><tbody>"
                   + "".join(_run_row(r) for r in others) + "</tbody></table></div></section>")
    return out


# ------------------------------------------------------------------ bisections


def _bisection(heading: str, ladders: Sequence[Ladder], summary: str, about: Sequence[tuple[str, str]] = ()) -> str:
    out = [f"<article class=\"bisection\"><h3>{esc(heading)}</h3>"]
    if summary:
        out.append(f"<p class=\"verdict\">{esc(summary)}</p>")
    out.append(facts(about))
    for lad in ladders:
        out.append(f"<figure class=\"ladder-figure\" data-stage=\"{esc(lad.stage)}\"><figcaption>{esc(lad.title)}"
                   f"</figcaption><div class=\"scroll\">{svg(lad)}</div>")
        if lad.caveats:
            out.append("<ul class=\"caveats\">" + "".join(f"<li>⚠ not tested: {esc(c)}</li>" for c in lad.caveats)
                       + "</ul>")
        if lad.note:
            out.append(f"<p class=\"note\">{esc(lad.note)}</p>")
        trials = [r for r in lad.rungs if r.subject] if lad.stage == "env" else []
        if trials:  # what each trial applied, in words the ladder has no room for
            out.append("<ul class=\"trials\">" + "".join(f"<li><code>{esc(r.label)}</code> {esc(r.subject, 400)}</li>"
                                                        for r in trials) + "</ul>")
        out.append(_order_table(lad) + "</figure>")
    out.append("</article>")
    return "".join(out)


def facts(about: Sequence[tuple[str, str]]) -> str:
    """What a maintainer reads first, as a list of (what, text); a command line as code."""
    if not about:
        return ""
    return "<dl class=\"about\">" + "".join(
        f"<dt>{esc(what)}</dt><dd>" + (f"<pre><code>{esc(text, 4000)}</code></pre>" if what in CODE else esc(text, 2000))
        + "</dd>" for what, text in about) + "</dl>"


def _order_table(lad: Ladder) -> str:
    rows = []
    by_label = {r.label: r for r in lad.rungs}
    for label in tested_order(lad):
        rung = by_label[label]
        t = rung.tested
        runs = " ".join(f"<a href=\"#run-{i}\">#{i}</a>" for i in t.run_ids[:6]) + (" …" if len(t.run_ids) > 6 else "")
        rows.append(f"<tr class=\"tested-point\" data-label=\"{esc(label)}\"><td>{t.order}</td>"
                    f"<td><code>{esc(label)}</code> {esc(rung.subject, 80)}</td>"
                    f"<td><span class=\"pill {mark(t)}\">{esc(mark(t).upper())}</span></td><td>{esc(t.verdict)}</td>"
                    f"<td>{runs}</td><td class=\"detail\">{esc(t.detail, 300)}</td></tr>")
    return ("<details class=\"order\"><summary>test order</summary><table><thead><tr><th>#</th><th>point</th>"
            "<th>outcome</th><th>verdict</th><th>runs</th><th>detail</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></details>")


# ------------------------------------------------------------------ runs


def run_section(r: RunPage) -> str:
    hang = r.outcome == "hang"
    views = [build(look, highlight=hang) for look in r.looks]
    out = [f"<article class=\"run {esc(r.outcome)}\" id=\"run-{r.id}\"><h3>run {r.id} · "
           f"<span class=\"pill {esc(r.outcome)}\">{esc(r.outcome.upper())}</span> {esc(r.title)}"
           + (" <span class=\"pill marked\">MARKED BY HAND</span>" if r.manual else "") + "</h3>"]
    said = [w for v in views[-1:] for w in v.words]
    if said:
        out.append("<div class=\"words\">" + "".join(
            f"<p class=\"{'mismatch-words' if views[-1].mismatch and w == views[-1].mismatch.words else 'waits'}\">"
            f"{esc(w)}</p>" for w in said) + "</div>")
    if r.proof:
        out.append(f"<p class=\"proof\">{esc(r.proof)}</p>")
    if r.signature or r.reason:
        out.append(f"<p class=\"signature\"><span class=\"k\">signature</span> {esc(r.signature or r.reason)}</p>")
    if r.note:
        out.append(f"<p class=\"note\">{esc(r.note)}</p>")
    if views:
        out.append(f"<div class=\"looks{' early' if r.early else ''}\">" + "".join(rank_figure(v) for v in views)
                   + "</div>")
    if r.log_tail:
        out.append(f"<details class=\"log\"><summary>launcher.log, last lines</summary><pre>{esc(r.log_tail)}</pre>"
                   "</details>")
    out.append("</article>")
    return "".join(out)


def rank_figure(view: RankView) -> str:
    """A look at every rank: ranks (grouped) as rows, collectives by sequence number as columns."""
    hot = (view.mismatch.group, view.mismatch.seq) if view.mismatch else None
    head = "".join(f"<th class=\"col{' mismatch' if key == hot else ''}\" data-seq=\"{key[1]}\">#{key[1]}"
                   + (f"<small>{esc(key[0])}</small>" if key[0] not in ('default_pg', '0') else "") + "</th>"
                   for key in view.columns)
    rows = "".join(_rank_row(row, view.columns, hot) for row in view.rows)
    if view.hidden:
        rows += f"<tr><th colspan=\"{len(view.columns) + 2}\">… {view.hidden} more groups of ranks</th></tr>"
    return (f"<figure class=\"rankview\" data-world=\"{view.world}\"><figcaption>{esc(view.title)} · "
            f"{view.world} rank{'s' if view.world != 1 else ''}, {len(view.rows) + view.hidden} "
            f"group{'s' if len(view.rows) + view.hidden != 1 else ''}</figcaption>"
            f"<div class=\"scroll\"><table class=\"ranks\"><thead><tr><th>ranks</th>{head}<th>where · stack</th>"
            f"</tr></thead><tbody>{rows}</tbody></table></div></figure>")


def _rank_row(row: Row, columns, hot) -> str:
    cells = "".join(_cell(c, row.head, key == hot) for c, key in zip(row.cells, columns))
    where = esc(row.absent or row.where or "—")
    stack = (f"<details><summary>{where}</summary><pre>{esc(chr(10).join(row.stack))}</pre>"
             + (f"<p class=\"note\">the stack of rank {row.ranks[0]}, first of the group</p>" if len(row.ranks) > 1 else "")
             + "</details>") if row.stack else where
    return f"<tr data-ranks=\"{esc(row.label)}\"><th class=\"who\">{esc(row.label)}</th>{cells}<td class=\"stack\">{stack}</td></tr>"


def _cell(c: Coll | Cell, head: Coll | None, hot: bool) -> str:
    extra = " mismatch" if hot else ""
    if isinstance(c, Cell):
        cls = "not-entered" if c is Cell.NOT_ENTERED else "unknown"
        return f"<td class=\"c {cls}{extra}\" title=\"{c.value}\">{'·' if c is Cell.NOT_ENTERED else '?'}</td>"
    waits = " head" if head is not None and c == head else ""
    size = "" if c.numel_in is None else f"<span class=\"n\">{c.numel_in}</span>"
    return (f"<td class=\"c {c.state.value}{waits}{extra}\" title=\"{esc(c.label)} — {c.state.value}\">"
            f"<span class=\"op\">{esc(c.op)}</span>{size}<span class=\"st\">{_STATE_WORD[c.state]}</span></td>")


_STATE_WORD = {State.COMPLETED: "completed", State.STARTED: "started", State.PENDING: "pending"}


def _run_row(r: RunPage) -> str:
    secs = "—" if r.seconds is None else f"{r.seconds:.1f}"
    return (f"<tr id=\"run-{r.id}\"><td>#{r.id}</td><td>{esc(r.title)}</td><td><span class=\"pill "
            f"{'marked' if r.manual else esc(r.outcome)}\">{esc(r.outcome.upper())}</span></td><td>{secs}</td>"
            f"<td class=\"detail\">{esc(r.signature or r.reason, 400)}{_traceback(r)}</td></tr>")


def _traceback(r: RunPage) -> str:
    """A failed run's traceback, collapsed under its first line (who raised first)."""
    if not r.traceback:
        return ""
    head, _, body = r.traceback.partition("\n")
    return f"<details class=\"traceback\"><summary>{esc(head)}</summary><pre>{esc(body, 100_000)}</pre></details>"


_LEGEND = ("<p class=\"legend\"><span class=\"pill pass\">PASS</span> <span class=\"pill fail\">FAIL</span> "
           "<span class=\"pill hang\">HANG</span> <span class=\"pill skip\">SKIP</span> "
           "<span class=\"pill marked\">MARKED</span> (by hand) · ○ not tested · the number in a point is "
           "the order it was tested in · ⚠ a release not tested (yanked, not in the wheelhouse)</p>")
_RANK_LEGEND = ("<p class=\"legend\"><span class=\"c completed\">completed</span> <span class=\"c started\">started"
                "</span> <span class=\"c pending\">pending</span> <span class=\"c not-entered\">· not entered</span> "
                "<span class=\"c unknown\">? not recorded</span> · bold outline: the collective the rank waits in · "
                "red column: the first mismatch</p>")

CSS = """
:root{--bg:#fff;--fg:#1d2329;--muted:#5b6670;--line:#c9d1d9;--card:#f6f8fa;--pass:#1a7f37;--fail:#cf222e;
--hang:#bc4c00;--skip:#8c959f;--marked:#8250df;--done:#dafbe1;--started:#fff1c2;--pending:#ffe2cc;--hot:#cf222e}
@media (prefers-color-scheme: dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9aa5b1;--line:#30363d;--card:#161b22;
--pass:#3fb950;--fail:#ff7b72;--hang:#f0883e;--skip:#8b949e;--marked:#bc8cff;--done:#12361f;--started:#3d2f00;
--pending:#4a2410;--hot:#ff7b72}}
body{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;
max-width:1200px;padding:16px 24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px}.meta,.note,figcaption{color:var(--muted)}
code,pre,.c,.ranks th{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:var(--card);border:1px solid var(--line);padding:8px;overflow:auto;white-space:pre-wrap;word-break:break-all}
article{border:1px solid var(--line);border-radius:6px;padding:4px 14px 12px;margin:12px 0;background:var(--bg)}
.scroll{overflow-x:auto}.ladder-rows{display:flex;flex-wrap:wrap}figure.ladder-figure{margin:10px 0}
.trials{margin:4px 0;padding-left:18px;font-size:12px;word-break:break-word}
.pill{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600}
.pill.pass{background:var(--pass)}.pill.fail{background:var(--fail)}.pill.hang{background:var(--hang)}
.pill.skip,.pill.interrupted,.pill.running{background:var(--skip)}.pill.marked{background:var(--marked)}
.words p{margin:4px 0;font-size:15px}.mismatch-words{font-weight:700;color:var(--hot)}
.signature,.proof{font-family:ui-monospace,monospace;font-size:12px;word-break:break-word}.k{color:var(--muted)}
.looks{display:flex;flex-wrap:wrap;gap:12px}.looks>figure{flex:1 1 420px;margin:0;min-width:0}
table{border-collapse:collapse}td,th{border:1px solid var(--line);padding:2px 6px;vertical-align:top;text-align:left}
.ranks .c{text-align:center;min-width:56px;line-height:1.2}.c .op{font-size:10px}.c .n{font-size:13px;font-weight:600}.c .op,.c .n,.c .st{display:block}.c .st{font-size:10px;color:var(--muted)}
.c.completed{background:var(--done)}.c.started{background:var(--started)}.c.pending{background:var(--pending)}
.c.not-entered,.c.unknown{color:var(--muted);background:repeating-linear-gradient(45deg,transparent 0 4px,var(--card) 4px 8px)}
.c.head{outline:2px solid var(--fg);outline-offset:-2px;font-weight:700}
.mismatch{box-shadow:inset 0 0 0 2px var(--hot)}th.mismatch{color:var(--hot)}
.legend .c{display:inline-block;padding:0 6px;border:1px solid var(--line)}
.stack{max-width:420px}.stack summary{cursor:pointer;font-family:ui-monospace,monospace;font-size:12px}
.who{white-space:nowrap}.detail{max-width:520px;word-break:break-word;font-size:12px}
svg.ladder{font:11px system-ui,sans-serif}svg .axis{stroke:var(--line);stroke-width:2}
svg .boundary{stroke:var(--hot);stroke-dasharray:4 3;stroke-width:2}svg .boundary-label{fill:var(--hot);font-weight:700}
svg .rung-label{fill:var(--fg)}svg .untested circle{fill:var(--bg);stroke:var(--skip);stroke-width:1.5}
svg .point{stroke:var(--bg);stroke-width:2}svg .point.pass{fill:var(--pass)}svg .point.fail{fill:var(--fail)}
svg .point.hang{fill:var(--hang)}svg .point.skip{fill:var(--skip)}svg .point.marked{fill:var(--marked)}
svg .order{fill:#fff;font-weight:700}svg .outcome-word{fill:var(--muted);font-size:9px}
svg .caveat path{fill:#d4a72c}svg .caveat text{fill:var(--fg);font-size:10px}
svg a:focus .point,svg a:hover .point{stroke:var(--fg)}
.caveats{margin:4px 0;padding-left:18px}
.about{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 12px;margin:6px 0 10px}
.about dt{color:var(--muted)}.about dd{margin:0;word-break:break-word}.about pre{margin:0}
@media print{:root{--bg:#fff;--fg:#000;--card:#fff;--line:#999}body{max-width:none;padding:0}
article,figure,tr{break-inside:avoid}details.order[open] summary,.stack summary{list-style:none}
a{color:inherit;text-decoration:none}}
"""
