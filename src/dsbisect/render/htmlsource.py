"""What the pictures are drawn from, read from what dsbisect already stores: the one adapter.

A store's runs and bisections, a run's folder (the flight-recorder dumps, the early deadlock
proof's two looks and their answers, the stacks) become the typed inputs of ``rankview`` and
``ladder``.  Every call into the readers of other modules (``forensics``, ``rundir``, the
store's records and the bisection results' JSON) is made here, so that when those change
shape only this module changes.  A record whose folder is gone (a copied store) gives no look:
the page says so and shows the record's own signature.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from dsbisect.forensics import crash
from dsbisect.forensics import flightrec
from dsbisect.forensics.proofrecord import ProofRecord
from dsbisect.forensics import stuck as forensics
from dsbisect.core.files import DATA_LIMIT, PROOF_LIMIT, existing_dir, read_small
from dsbisect.render.grid import displayable
from dsbisect.render.htmlreport import Page, RunPage
from dsbisect.render.ladder import Ladder, Rung, Tested
from dsbisect.core.mode import Side
from dsbisect.core.model import Outcome, Stage, Verdict
from dsbisect.render.rankview import Coll, Look, RankLook, State
from dsbisect.records.results import Recorded, Result, Step
from dsbisect.envdiff.settings import is_end_label
from dsbisect.core.rundir import RunDir

STACK_LINES = 40


# ------------------------------------------------------------------ runs


def run_page(record, store_dir: Path | None, tail_lines: int = 40) -> RunPage:
    """A store record (``records.RunRecord``) and what its folder holds."""
    record = displayable(record)  # an odd record's values as they can be shown
    folder = run_folder(record, store_dir)
    looks, early, proof, note = (), False, "", ""
    if folder is None:
        note = "the run's folder is not here (a copied store?): only the record's signature is shown"
    else:
        looks, early, proof = folder_looks(folder)
        if not looks and record.outcome is Outcome.HANG:
            note = "no flight-recorder entries of the ranks were recorded in the run's folder"
    outcome = record.outcome.value if record.outcome else record.status.value
    found = crash.read_crash(folder) if folder is not None and record.outcome is Outcome.FAIL else None
    traceback = "\n".join([found.heading, *found.first.lines, *found.other_lines()]) if found and found.first else ""
    return RunPage(id=record.id, title=f"{record.case_name} · {record.point.label}", outcome=outcome,
                   manual=record.manual is not None, reason=record.reason or "",
                   signature=record.signature or "", seconds=record.seconds, looks=looks, early=early,
                   proof=proof, note=note, log_tail=_tail(folder, tail_lines) if folder else "", traceback=traceback)


def run_folder(record, store_dir: Path | None) -> Path | None:
    """The run's folder: as recorded, else the store's own folder of that run id."""
    own = Path(store_dir) / "runs" / f"{record.id:06d}" if store_dir is not None else None
    return existing_dir(record.run_dir) or existing_dir(own)


def folder_looks(folder: Path) -> tuple[tuple[Look, ...], bool, str]:
    """(looks, early, proof sentence): the proof's two looks, else the flight-recorder dumps,
    else the last look a round of the early verdict took (it proved nothing)."""
    run = RunDir(folder)
    proof = ProofRecord.from_json(_json(run.deadlock_proof, PROOF_LIMIT))
    if proof is not None:
        looks = tuple(_answers_look(run, n, f"look {i + 1}: request {n}" + _at(proof, n))
                      for i, n in enumerate(proof.requests[:2]))
        return tuple(lk for lk in looks if lk.ranks), True, proof.text
    dumps = _dump_look(folder)
    if dumps is not None:
        return (dumps,), False, ""
    last = _last_request(run)
    if last is not None:
        lk = _answers_look(run, last, f"the last look (request {last}): no deadlock proven")
        return ((lk,) if lk.ranks else ()), False, ""
    return (), False, ""


def _at(proof: ProofRecord, n: int) -> str:
    snap = proof.looked_at(n)
    return f" at {snap.at:.1f} s" if snap is not None and snap.at is not None else ""


def _dump_look(folder: Path) -> Look | None:
    """The ranks' flight-recorder dumps (``nccl_trace_rank_<R>``).  A rank's stack is its
    oldest waiting entry's (the recorder keeps the Python stack of each collective), else what
    ``analyze`` found (py-spy, faulthandler, the watchdog) for the ranks without one."""
    works = forensics.read_flight_recorder(folder, [])
    if not works:
        return None
    ranks, frames_of = [], {}
    for rank, ws in sorted(works.items()):
        colls = tuple(Coll(w.group, w.seq, _op(w.op), w.first_in, w.first_out, State.of(w.state)) for w in ws if not w.p2p)
        waiting = [w for w in ws if w.state != "completed" and not w.p2p]
        frames_of[rank] = min(waiting, key=lambda w: w.seq).frames if waiting else ()
        ranks.append(RankLook(rank=rank, colls=colls))
    if not all(frames_of.values()):
        sig = forensics.analyze(folder)
        for st in sig.ranks if sig else ():
            if not frames_of.get(st.rank):
                frames_of[st.rank] = st.frames
    ranks = [RankLook(rank=r.rank, colls=r.colls, where=_where(frames_of[r.rank]), stack=_stack(frames_of[r.rank]))
             for r in ranks]
    return Look("flight-recorder dumps (written when the collective timed out)", tuple(ranks))


def _answers_look(run: RunDir, n: int, title: str) -> Look:
    ranks = []
    for rank, path in sorted(run.fr_answers(n).items()):
        answer = _json(path)
        if not isinstance(answer, dict):
            ranks.append(RankLook(rank=rank, absent="its answer could not be read"))
            continue
        ranks.append(_answer_rank(rank, answer))
    return Look(title, tuple(ranks))


def _answer_rank(rank: int, answer: Mapping) -> RankLook:
    """One rank's answer to a request of the early verdict (the start-up hook's JSON)."""
    colls = []
    for dump in _list(answer.get("dumps")):
        for entry in _list(dump.get("entries") if isinstance(dump, dict) else None):
            w = flightrec.entry(entry)  # the one flight-recorder entry parser
            if w is None or w.p2p:
                continue
            done = w.retired is True  # torch retired it: it ran
            colls.append(Coll(w.group, w.seq, _op(w.op), w.first_in, w.first_out,
                              State.COMPLETED if done else State.of(w.state)))
    stack = answer.get("stack") if isinstance(answer.get("stack"), list) else []
    frames = tuple(forensics.Frame(str(f[1]), str(f[0]), f[2] if isinstance(f[2], int) else None)
                   for f in stack if isinstance(f, list) and len(f) == 3)
    absent = str(answer.get("error") or "") if not colls and not frames else ""
    return RankLook(rank=rank, colls=tuple(sorted(set(colls), key=lambda c: (c.group, c.seq))),
                    where=_where(frames), stack=_stack(frames), absent=absent)


def _op(name: str) -> str:
    """'barrier' (gloo's name, which has no watchdog OpType) -> 'BARRIER', as the proof says it."""
    return name if name.isupper() else name.upper()


def _last_request(run: RunDir) -> int | None:
    ns = []
    for path in run.fr_dir.glob("rank*.*.json") if run.fr_dir.is_dir() else []:
        tail = path.name.split(".")
        if len(tail) == 3 and tail[1].isdigit():
            ns.append(int(tail[1]))
    return max(ns, default=None)


def _where(frames: Sequence[forensics.Frame]) -> str:
    """'barrier at engine.py:1234': the innermost call, at the innermost frame of the job's own code."""
    if not frames:
        return ""
    own = forensics.own_frames(tuple(frames), 1)
    call = frames[0].function
    if not own:
        return call
    f = own[0]
    return f"{call} at {Path(f.file).name}" + (f":{f.line}" if f.line is not None else "")


def _stack(frames: Sequence[forensics.Frame]) -> tuple[str, ...]:
    lines = [f"{f.function} ({f.file}" + (f":{f.line})" if f.line is not None else ")") for f in frames]
    return tuple(lines[:STACK_LINES]) + ((f"… {len(lines) - STACK_LINES} more frames",) if len(lines) > STACK_LINES else ())


def _json(path: Path, limit: int = DATA_LIMIT) -> object:
    try:
        return json.loads(read_small(path, limit))
    except (OSError, ValueError):
        return None


def _tail(folder: Path, lines: int) -> str:
    from dsbisect.core.rundir import tail_text

    text = tail_text(RunDir(folder).launcher_log, 64 << 10)
    return "\n".join((text or "").rstrip("\n").split("\n")[-lines:]) if lines > 0 else ""


# ------------------------------------------------------------------ bisections


def ladders(record) -> tuple[Ladder, ...]:
    """A stored bisection (``records.BisectionRecord``: its result JSON) as one ladder per stage."""
    r = _recorded(record)
    title = f"{record.package} {record.good} → {record.bad}"
    if r.environment or record.package == "environment":
        return _env_ladders(record, r)
    res = r.answers[0]
    out = [release_ladder(title, res, r.steps, _verdict(r))]
    commits = [s for s in r.steps if s.stage is Stage.COMMIT]
    if commits:
        out.append(commit_ladder(title, res, commits))
    return tuple(out)


def _recorded(record) -> Recorded:
    return record.recorded  # records.BisectionRecord reads its result typed


def _verdict(r: Recorded | Result) -> str:
    return r.verdict.value if r.verdict else ""  # "": not finished


def _tested(order: int, s: Step) -> Tested:
    return Tested(order=order, outcome=s.outcome.value, verdict=s.verdict.value, run_ids=s.tally.run_ids,
                  manual=s.tally.manual, detail=s.detail)


def release_ladder(title: str, r: Result, steps: Sequence[Step], verdict: str) -> Ladder:
    order: dict[str, Tested] = {}
    for i, s in enumerate(steps):
        if s.stage is Stage.RELEASE:
            order.setdefault(s.version, _tested(i + 1, s))
    candidates = list(r.candidates) or list(order)
    rungs = [Rung(label=c, tested=order.get(c)) for c in candidates]
    rungs += [Rung(label=v, tested=t) for v, t in order.items() if v not in candidates]
    return Ladder(title=f"{title}: releases", stage="release", rungs=tuple(rungs),
                  boundary=_pair(r.last_good, r.first_bad), caveats=r.caveats, verdict=verdict, note="")


def commit_ladder(title: str, r: Result, steps: Sequence[Step]) -> Ladder:
    """Tested commits in history order, as the search's verdicts place them: every commit on
    the old end's side before every one on the new end's, the answer's two commits at the
    boundary, the others in the order they were tested (the record keeps the tested commits,
    not the whole chain, so an order within a side is not known)."""
    c = r.commit
    last_good, first_bad = (c.last_good, c.first_bad or "") if c else ("", "")
    tested = [(i + 1, s) for i, s in enumerate(steps)]
    old_verdict = r.request.mode.verdict(Side.OLD)
    old = [(i, s) for i, s in tested if s.verdict is old_verdict]
    new = [(i, s) for i, s in tested if s.verdict not in (old_verdict, Verdict.SKIP)]
    skip = [(i, s) for i, s in tested if s.verdict is Verdict.SKIP]
    old.sort(key=lambda t: str(t[1].commit) == last_good)  # stable: the answer's commit last
    new.sort(key=lambda t: str(t[1].commit) != first_bad)
    rungs = tuple(Rung(label=(s.commit or "")[:10], tested=_tested(i, s), subject=s.subject) for i, s in old + skip + new)
    note = (f"{c.count} commits between the releases; {len(rungs)} tested. " if c else "") + \
        "Untested commits are not drawn; the order comes from the verdicts."
    return Ladder(title=f"{title}: commits", stage="commit", rungs=rungs, boundary=_pair(last_good[:10], first_bad[:10]),
                  caveats=(), verdict=c.verdict.value if c else "", note=note)


def _env_ladders(record, r: Recorded) -> tuple[Ladder, ...]:
    rungs = [Rung(label=_trial_label(i, t.label), subject="" if i < 2 else (t.label or f"{len(t.applied)} changes"),
                  tested=Tested(order=i + 1, outcome=t.outcome.value, verdict=t.side.value, run_ids=t.run_ids,
                                manual=False, detail=t.detail)) for i, t in enumerate(r.trials)]
    if not rungs:  # a record without its trials (not finished): the level-1 steps
        rungs = [Rung(label=s.version or "0 changes", tested=replace(_tested(i + 1, s), manual=False))
                 for i, s in enumerate(s for s in r.steps if s.stage is Stage.ENV)]
    out = [Ladder(title=f"environment {record.good} → {record.bad}: trials", stage="env", rungs=tuple(rungs),
                  boundary=None, caveats=(), verdict=_verdict(r),
                  note="Each trial is the good environment with some of the changes applied, in test order.")]
    for rel in r.answers if r.environment else ():
        title = f"{rel.request.package} {rel.request.good} → {rel.request.bad}"
        out.append(release_ladder(title, rel, rel.steps, rel.verdict.value))
        commits = [s for s in rel.steps if s.stage is Stage.COMMIT]
        if commits:
            out.append(commit_ladder(title, rel, commits))
    return tuple(out)


def _trial_label(i: int, label: str) -> str:
    """A level-1 rung's label: the two ends by name, a trial by its number (what it applied is
    its subject: in its tooltip, the test order and the list under the ladder)."""
    if i < 2 and is_end_label(label):
        return label
    return f"trial {i - 1}" if i >= 2 else label or "an end"


def _list(value: object) -> list:
    """A record's list, whatever an odd record holds there."""
    return value if isinstance(value, list) else []


def _pair(a: object, b: object) -> tuple[str, str] | None:
    return (str(a), str(b)) if a and b else None


def store_bisections(store) -> list:
    """The store's bisection records (``records.BisectionRecord``), oldest first, from its index
    (a copied store may hold the database alone, without ``bisections/*.json``)."""
    return store.bisections()


# ------------------------------------------------------------------ pages


def find_bisection(store, prefix: str) -> str:
    """The key of the store's bisection whose key starts with ``prefix`` (the last one for "")."""
    from dsbisect.core.errors import DsbisectError, InputError

    found = store_bisections(store)
    if not found:
        raise DsbisectError(f"no bisection recorded in {store.dir}")
    hits = [b for b in found if b.key.startswith(prefix)]
    if len(hits) == 1 or (hits and not prefix):
        return hits[-1].key
    known = "; ".join(f"{b.key} ({b.package} {b.good} {b.bad})" for b in reversed(found[-5:]))
    if not hits:
        raise InputError(f"--bisection {prefix}: no bisection with a key starting so in {store.dir} (latest: {known})")
    raise InputError(f"--bisection {prefix}: names {len(hits)} bisections; give more of the key ({known})")


def bisection_runs(store, key: str, records: Sequence) -> list:
    """The records of the runs the bisection ``key`` tested."""
    wanted = {i for b in store_bisections(store) if b.key == key for i in _run_ids(b)}
    return [r for r in records if r.id in wanted]


def store_page(store, records, bisection_key: str | None = None, title: str = "dsbisect report",
               cases: Sequence[str] = ()) -> Page:
    """The whole store (its bisections and ``records``), or one bisection (and the runs given);
    ``cases``: only the bisections of those cases."""
    from dsbisect.render.answers import level2

    found = store_bisections(store)
    if bisection_key is not None:
        found = [b for b in found if b.key == bisection_key]
    else:  # an environment bisection's level 2 is drawn within it, not again on its own
        inner = level2(found)
        found = [b for b in found if b.key not in inner]
    if cases:
        found = [b for b in found if b.params.case in cases]
    sections = tuple((f"{b.package} {b.good} → {b.bad} ({b.status.value})", ladders(b), _summary(b)) for b in found)
    once = list({r.id: r for r in records}.values())  # a run shown under two case names of one key: one section
    runs = tuple(run_page(r, store.dir) for r in once)
    by_id = {r.id: r for r in store.runs()} if found else {}
    about = tuple(about_bisection(b, [by_id[i] for i in dict.fromkeys(_run_ids(b)) if i in by_id]) for b in found)
    return Page(title=title, ladders=sections, runs=runs, about=about)


def about_bisection(b, runs: Sequence) -> tuple[tuple[str, str], ...]:
    """What a maintainer reads first of a bisection (``b``; None: of ``runs`` alone): the
    regression (as the bad end defined it), the command its runs ran, their environment and
    host, and the line that reproduces it."""
    import shlex

    from dsbisect.envs.facts import describe_env
    from dsbisect.render.report import host_lines, index_lines

    r = _recorded(b) if b is not None else None
    out = [("the regression", a.regression.describe().removeprefix("the regression: ")) for a in (r.answers[:1] if r else ())
           if a.regression is not None and a.regression.describe()]
    command = next((shlex.join(map(str, x.facts.command)) for x in runs if x.facts.command), "")
    out += [("command", command)] if command else []
    facts = next((x.facts for x in runs if x.facts.versions), None)
    env = [describe_env(facts)] if facts else []
    env += [ln for ln in index_lines(list(runs)) + host_lines(list(runs)) if not ln.startswith("host: not recorded")]
    out += [("environment", "; ".join(env))] if env else []
    if b is not None and b.params.argv:
        out.append(("reproduce with", shlex.join(["dsbisect", "bisect", *b.params.argv])))
    return tuple(out)


def one_run_page(record, store_dir: Path | None, tail_lines: int = 40) -> Page:
    """``show --format html``: the run, under its command and environment."""
    head = tuple(f for f in about_bisection(None, [displayable(record)]) if f[0] in ("command", "environment"))
    return Page(title=f"dsbisect run {record.id}", ladders=(), runs=(run_page(record, store_dir, tail_lines),),
                head=head)


def rank_tables(record, store_dir: Path | None = None) -> list:
    """``dsbisect show``'s compact rank × sequence-number tables of a hang (rich)."""
    from dataclasses import replace

    from dsbisect.render.rankview import build, rank_text, same_rows

    if record.outcome is not Outcome.HANG:
        return []
    folder = run_folder(record, store_dir)
    views = [build(look, max_columns=6) for look in (folder_looks(folder)[0] if folder else ())]
    if len(views) == 2 and same_rows(*views):  # the proof's two looks saw the same: one table
        views = [replace(views[1], title=f"{views[0].title} and {views[1].title}: nothing moved")]
    return [rank_text(v) for v in views]


def _run_ids(b) -> list[int]:
    r = _recorded(b)
    releases = [s for rel in r.answers for s in rel.steps] if r.environment else []
    return [i for s in (*r.steps, *releases) for i in s.tally.run_ids]


def _summary(b) -> str:
    r = _recorded(b)
    parts = [f"verdict: {_verdict(r) or b.status.value}"]
    if not r.environment:
        res = r.answers[0]
        word = (res.request.mode.last_old, res.request.mode.first_new)
        if res.last_good:
            parts.append(f"{word[0]} {res.last_good}")
        if res.first_bad:
            parts.append(f"{word[1]} {res.first_bad}")
        c = res.commit
        if c and c.first_bad:
            parts.append(f"{word[1]} commit {c.first_bad[:12]} {c.subject}".rstrip())
        if res.numbers is not None:  # a bisection of a number: its answer and the value at each point
            parts.append(res.numbers.answer)
            parts += [f"{label}: {values}, {call}" for label, values, call in res.numbers.table()]
    if r.culprits:
        parts.append("culprits: " + ", ".join(r.culprits))
    why = r.message if r.environment else (r.answers[0].message if r.answers else "")
    if why and r.verdict is not None and (r.environment or r.verdict.exit_code):  # the chain, or why no answer
        parts = [parts[0], why]
    return "; ".join(parts)
