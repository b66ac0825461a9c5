"""Results obtained elsewhere: manual marks, a bisection's log, its replay, and ``--manual``.

A *mark* is a real run record (a row and a run folder with ``run.json``) whose outcome the
user gave: PASS for good, FAIL for bad, SKIP for skip, with ``Evidence.of_mark(Manual(MARK,
TEXT))``.  It is keyed by the case and the point exactly as a bisection keys its own
runs (its points are ``points.ReleasePoints``'), so a later bisection of that case
reuses it like any recorded run, and takes its verdict as the user said (``RunRecord.verdict``).

``log_text`` writes a bisection's decisions as ``dsbisect mark`` lines, one per run it used
(its verdict under the bisection's ``--regress-on``/``--signature``), after a header that
names the bisect command; ``parse_log`` reads such a file back for ``dsbisect replay`` —
git bisect's log and replay.  ``ManualExecutor`` is ``bisect --manual``: it builds each
point's venv, says how to run the case in it, and records the answer as a mark.
"""

from __future__ import annotations

import enum
import itertools
import re
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from dsbisect.bisect.points import ReleasePoints, held
from dsbisect.core.errors import DsbisectError, EnvBuildError, InputError
from dsbisect.core.model import Accelerator, Case, GitSource, Outcome, Point, RegressOn, Stage, Verdict
from dsbisect.launch import launchers
from dsbisect.verdict.identity import Identity
from dsbisect.launch.launchers import Target
from dsbisect.core.redact import redact
from dsbisect.records.bisections import BisectionRecord
from dsbisect.records.run import Evidence, Manual, RunRecord, SkipCause
from dsbisect.records.results import Recorded, Result, Step
from dsbisect.core.rundir import RunDir
from dsbisect.run.executor import Delegated, RunSpec, Site
from dsbisect.run.local import accelerator
from dsbisect.store.store import Store


OUTCOME = {Verdict.GOOD: Outcome.PASS, Verdict.BAD: Outcome.FAIL, Verdict.SKIP: Outcome.SKIP}  # a mark's run
_ITEM = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*$")
_HASH = re.compile(r"^[0-9a-fA-F]{7,64}$")


# ------------------------------------------------------------------- points


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``POINT... [-- COMMAND...]`` as one list (click merges what follows ``--``): the leading
    ``NAME==VERSION`` words are the point, the rest the command."""
    n = 0
    while n < len(args) and _ITEM.match(args[n]):
        n += 1
    return list(args[:n]), list(args[n:])


def parse_items(items: list[str]) -> list[tuple[str, str]]:
    """``deepspeed==0.12.4`` words as (package, version); an InputError for anything else."""
    if not items:
        raise InputError("give the point to mark as PACKAGE==VERSION, e.g. deepspeed==0.12.4")
    out = []
    for item in items:
        m = _ITEM.match(item)
        if not m:
            raise InputError(f"{item!r}: expected PACKAGE==VERSION, e.g. deepspeed==0.12.4")
        name, version = m.groups()
        try:
            Version(version)
        except InvalidVersion:
            raise InputError(f"{item}: {version!r} is not a PEP 440 version") from None
        out.append((name, version))
    return out


def release_point(case: Case, package: str, version: str, pins: tuple[str, ...]) -> Point:
    """The point a bisection of ``package`` tests at ``version`` (``ReleasePoints.release``):
    the case's pins and the ``--pin``s, less the moving package."""
    return ReleasePoints.of(case, package, pins).release(version)


def points_for(case: Case, items: list[tuple[str, str]], pins: tuple[str, ...],
               source: GitSource | None = None) -> list[Point]:
    """The points ``mark`` records: one per version when the words name one package (``mark good
    ds==0.12.2 ds==0.12.3``), else the combinations of the packages' versions (one point when
    each package is named once: ``deepspeed==0.9.5 transformers==4.37.0``).  ``source``: the
    point is that commit of its one package (``--commit``), as the commit step builds it."""
    by_pkg: dict[str, list[tuple[str, str]]] = {}
    for name, version in items:
        by_pkg.setdefault(canonicalize_name(name), []).append((name, version))
    for name, vs in by_pkg.items():
        if len({v for _, v in vs}) != len(vs):
            raise InputError(f"{name}=={vs[0][1]} is given twice")
        for pin in pins:
            if canonicalize_name(Requirement(pin).name) == name:
                raise InputError(f"--pin {pin}: {vs[0][0]} is the point's own package")
    if source is not None:
        if len(items) != 1:
            raise InputError("--commit marks one commit: give one PACKAGE==VERSION (the release it leads to)")
        name, version = items[0]
        src = GitSource(name, source.repo, source.commit, source.describe, source.subject)
        return [ReleasePoints.of(case, name, pins).commit(src, version)]
    if len(by_pkg) == 1:
        return [release_point(case, name, version, pins) for name, version in items]
    moved = set(by_pkg)
    return [Point(versions=tuple(combo), pins=held(case, pins, moved))
            for combo in itertools.product(*by_pkg.values())]


def out_of_range(name: str, version: str, case: str, ranges: list[tuple[str, ...]]) -> str:
    """Why a mark of ``name==version`` would never be used by the bisections of ``case`` that
    the store holds (``ranges``: each one's candidate releases, oldest first), or "" when one of
    them tests that release (or there is none)."""
    ranges = [r for r in ranges if r]
    if not ranges or any(_same(version, v) for r in ranges for v in r):
        return ""
    shown = "; ".join(f"{r[0]} … {r[-1]} ({len(r)} releases)" for r in ranges[:3])
    return (f"{name}=={version}: not a release that the bisection of {case} tests ({shown}); a mark there would "
            "never be used: mark one of its releases")


def not_released(name: str, version: str, listed: tuple[list[Version], str] | None) -> str:
    """Why ``name==version`` is no release, from the listed releases (None: cannot be told), or ""."""
    if listed is None or any(_same(version, v) for v in listed[0]):
        return ""
    have = listed[0]
    return (f"{name}=={version}: no such release on {listed[1]} (it has {len(have)}, {have[0]} … {have[-1]}); "
            "check the version")


def _same(a: str, b: object) -> bool:
    try:
        return Version(a) == Version(str(b))
    except InvalidVersion:
        return False


def bisected_ranges(store: Store, case: str, package: str) -> list[tuple[str, ...]]:
    """The candidate releases of each bisection of ``package`` for ``case`` in the store."""
    out = []
    for b in store.bisections():
        if canonicalize_name(b.package) != canonicalize_name(package) or b.params.case != case:
            continue
        out += [r.candidates for r in b.recorded.answers[:1] if not b.recorded.environment]
    return out


def commit_source(package: str, commit: str, repo: Path | None) -> GitSource:
    """``--commit HASH`` (``--git-repo CLONE`` resolves a short one and adds the subject)."""
    from dsbisect.envs import gitrepo

    if not _HASH.match(commit):
        raise InputError(f"--commit {commit!r}: expected a commit hash")
    if repo is None:
        if len(commit) not in (40, 64):
            raise InputError(f"--commit {commit}: give the full hash, or --git-repo CLONE to resolve it")
        return GitSource(package, "", commit.lower())
    repo = gitrepo.check_repo(repo)
    c = gitrepo.commit(repo, commit)
    return GitSource(package, str(repo), c.hash, c.describe, c.subject)


# -------------------------------------------------------------------- marks


def reason(mark: Verdict, note: str) -> str:
    return f"marked {mark.value} by hand" + (f": {note}" if note else "")


def record(store: Store, case: Case, point: Point, mark: Verdict, note: str = "", env_key: str | None = None,
           attempt: int | None = None, extra: dict | None = None) -> RunRecord:
    """A run of ``point`` whose outcome the user gave, in the store like any other run."""
    mark = Verdict(mark)
    if attempt is None:
        attempt = len(store.done_runs(case.key, point.key)) + 1
    run_id = store.start_run(case.name, case.key, point, env_key, attempt)
    evidence = Evidence.of_mark(Manual(mark, note), extra)
    return store.finish_run(run_id, OUTCOME[mark], None, 0.0, reason=reason(mark, note), evidence=evidence)


# ---------------------------------------------------------------------- log

# The bisect options that make its case and points; a mark line carries them.
CASE_OPTIONS = ("--case", "--matrix", "--script", "--nproc", "--accelerator", "--pin", "--timeout",
                "--collective-timeout", "--idle-timeout", "--hostfile", "--num-nodes", "--launcher-backend",
                "--master-addr", "--include", "--exclude")
OUTPUT_ONLY = ("fmt", "output", "quiet")  # options that shape only what is printed


def invocation(ctx) -> list[str]:
    """A click context's command line, canonical: the arguments, then each option given on the
    command line as ``--name=value`` (flags bare), then ``-- COMMAND`` — what ``log`` puts in
    its header and takes a mark line's case options from."""
    positional, options, tail = [], [], []
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if p.name in OUTPUT_ONLY:
            continue
        if getattr(p, "param_type_name", "") == "argument":
            if value is None:
                continue
            if p.nargs == -1:
                tail = [str(v) for v in value]
            else:
                positional.append(_text(value))
            continue
        source = ctx.get_parameter_source(p.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        name = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        if getattr(p, "is_flag", False):
            if p.secondary_opts and not value:
                options.append(next((o for o in p.secondary_opts if o.startswith("--")), p.secondary_opts[0]))
            elif value:
                options.append(name)
            continue
        for v in (value if getattr(p, "multiple", False) else [value]):
            if v is not None:
                options.append(f"{name}={_text(v)}")
    return positional + options + (["--", *tail] if tail else [])


def _text(v) -> str:
    return str(v.value) if isinstance(v, enum.Enum) else str(v)


def case_args(argv: list[str]) -> list[str]:
    """The case options of a canonical bisect command line (``invocation``), and its ``-- COMMAND``."""
    if "--" in argv:
        head, tail = argv[:argv.index("--")], argv[argv.index("--"):]
    else:
        head, tail = argv, []
    return [a for a in head if a.split("=", 1)[0] in CASE_OPTIONS and "=" in a] + tail


def find_bisection(store: Store, key: str | None) -> BisectionRecord:
    """The last bisection of the store, or the one whose key starts with ``key``."""
    found = store.bisections()
    if not found:
        raise DsbisectError(f"no bisection recorded in {store.dir}")
    if not key:
        return found[-1]
    hits = [b for b in found if b.key.startswith(key)]
    if len(hits) == 1:
        return hits[0]
    known = "; ".join(f"{b.key} ({b.package} {b.good} {b.bad})" for b in reversed(found[-5:]))
    if not hits:
        raise InputError(f"no bisection with a key starting {key!r} in {store.dir} (latest: {known})")
    raise InputError(f"{key!r} names {len(hits)} bisections: give more of the key ({known})")


def log_text(store: Store, b: BisectionRecord) -> str:
    """The bisection's decisions as ``dsbisect mark`` lines that ``replay`` takes back."""
    p = b.params
    argv = list(p.argv)
    if argv:
        options = case_args(argv)
        command = "dsbisect bisect " + shlex.join(argv)
    else:  # recorded before dsbisect kept the command line: only what the parameters say
        options = [f"--case={p.case}"] + [f"--pin={x}" for x in p.pins]
        command = "dsbisect bisect " + shlex.join([b.package, b.good, b.bad, *options])
    r = b.recorded
    state = b.status.value + (f": {r.verdict.value}" if r.verdict else "")
    lines = [f"# dsbisect log of bisection {b.key}: {b.package} {b.good} → {b.bad} ({state})",
             f"# {redact(command)}"]
    if not argv:
        lines.append("# (recorded before dsbisect kept the command line: add the case options it had, "
                     "e.g. --matrix, --collective-timeout, to every line)")
    if p.cwd:
        lines.append(f"# ran in {p.cwd}: replay from there (the case's files are found as the command found them)")
    answer = _answer(r)
    if answer:
        lines.append(f"# answer: {answer}")
    lines.append("# replay with: dsbisect replay FILE --store NEW, then the command above with --store NEW "
                 "runs nothing")
    settings = _of_settings(argv)
    labels = {i: t.label for t in r.trials for i in t.run_ids}  # an environment bisection's trials, by run
    if settings:
        lines.append("# a bisection of settings: a mark line cannot name a trial's config, variables or flags, so "
                     "each run is a comment, and the bisection runs it again")
    seen: set[int] = set()
    for step in r.steps:
        for run_id in step.tally.run_ids:
            if run_id in seen:
                continue
            seen.add(run_id)
            if step.stage is Stage.PROVE:  # a reverted tree: no `dsbisect mark` can name it
                lines.append(f"# run {run_id}: the revert proof ({_one_line(redact(step.subject), 120)}, "
                             f"{step.outcome.value}); the bisection runs it again")
                continue
            if settings:  # marked as the command as given, it would say the opposite of another trial
                lines.append(f"# run {run_id}: {step.outcome.value}, a trial of settings: "
                             + _one_line(redact(labels.get(run_id, step.subject)), 200))
                continue
            lines.append(_line(store.run(run_id), run_id, step, b.package, options, p.regress_on, p.signature,
                               p.regression, every_pin=r.environment))
    return "\n".join(lines) + "\n"


SETTINGS_OPTIONS = ("--good-config", "--bad-config", "--good-vars", "--bad-vars", "--good-command")


def _of_settings(argv: Sequence[str]) -> bool:
    """A bisection whose changes include settings (its trials run configs, variables or flags)."""
    head = argv[:list(argv).index("--")] if "--" in argv else argv
    return any(a.partition("=")[0] in SETTINGS_OPTIONS for a in head)


def _answer(r: Recorded) -> str:
    if r.environment:  # bisect --good-env: the culprits, then each one's release
        culprits = r.culprits
        parts = [f"culprit{'s' if len(culprits) > 1 else ''} {' and '.join(culprits)}"] if culprits else []
        return "; ".join(parts + [f"{x.request.package}: {_release_answer(x)}" for x in r.answers])
    return _release_answer(r.answers[0]) if r.answers else ""


def _release_answer(r: Result) -> str:
    mode = r.request.mode
    words = (mode.last_old, mode.first_new)
    parts = []
    if r.last_good:
        parts.append(f"{words[0]} {r.last_good}")
    if r.first_bad:
        parts.append(f"{words[1]} {r.first_bad}")
    c = r.commit
    if c is not None and c.first_bad:
        parts.append(f"{words[1]} commit {c.first_bad[:10]} {c.subject}".rstrip())
    return ", ".join(parts)


def _line(r: RunRecord | None, run_id: int, step: Step, package: str, options: list[str],
          regress_on: RegressOn, signature: str | None, learned: Identity | None = None,
          every_pin: bool = False) -> str:
    """``every_pin``: the point's held pins are not in the command line (an environment
    bisection's trial pins the whole environment): each becomes a ``--pin`` of the line."""
    if r is not None and r.outcome is not None:
        mark = r.verdict(regress_on, signature, learned).value
        point = r.point
        items = [f"{n}=={v}" for n, v in point.versions]
        if every_pin:
            moved = {canonicalize_name(n) for n, _ in point.versions}
            held = [p for p in point.pins if canonicalize_name(Requirement(p).name) not in moved]
            if not items and held and "==" in held[0]:  # the good environment itself: a pin names the point
                items, held = [held[0]], held[1:]
            items += [f"--pin={p}" for p in held]
        commit = point.source.commit if point.source else None
        if r.manual is not None:
            about = f"marked {r.manual.mark.value} by hand"
        else:
            about = f"{r.outcome.value} {r.seconds or 0.0:.1f} s"
            if r.signature or r.reason:
                about += f": {r.signature or r.reason}"
        note = (r.manual.note or "") if r.manual is not None else ""
    else:  # the run is not in this store (a repaired one): the step's own verdict
        mark, items, commit, note = step.verdict.value, [f"{package}=={step.version}"], step.commit, ""
        about = "not in the store; the step's verdict"
    args = ["dsbisect", "mark", mark, *items] + (["--commit", commit] if commit else [])
    if note:
        args.append(f"--note={note}")
    head, tail = _split_tail(options)
    where = f"run {run_id}"
    if step.stage in (Stage.COMMIT, Stage.CONFIRM) and commit:
        where += f" ({step.stage.value} {commit[:10]})"
    elif step.stage is Stage.CONFIRM:
        where += " (confirm)"
    comment = _one_line(redact(f"{where}: {about}"), 160)
    return f"{shlex.join(args + head + tail)}  # {comment}"


def _split_tail(options: list[str]) -> tuple[list[str], list[str]]:
    if "--" in options:
        i = options.index("--")
        return options[:i], options[i:]
    return options, []


def _one_line(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------- replay


@dataclass(frozen=True)
class LogLine:
    number: int
    args: list[str]  # after ``dsbisect mark``
    comment: str


def parse_log(text: str, name: str = "log") -> list[LogLine]:
    """The mark lines of a log (``#`` lines and blank lines are left out); an InputError that
    names the line for anything else."""
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "\0" in line:  # no argument can hold one
            raise InputError(f"{name}:{number}: holds a NUL byte")
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise InputError(f"{name}:{number}: {e}") from None
        if words[:1] == ["dsbisect"]:
            words = words[1:]
        if words[:1] != ["mark"]:
            raise InputError(f"{name}:{number}: not a 'dsbisect mark' line: {_one_line(line, 80)}")
        out.append(LogLine(number, words[1:], _comment(line)))
    return out


def _comment(line: str) -> str:
    """The ``# ...`` that ends a line (outside quotes), or ""."""
    words = shlex.split(line, comments=True)
    for m in re.finditer(r"\s#", line):
        try:
            if shlex.split(line[: m.start()]) == words:
                return line[m.start() + 2:].strip()
        except ValueError:
            continue
    return ""


@dataclass(frozen=True)
class Planned:
    """One mark to record: what a mark line (or ``mark``'s command line) resolved to."""

    case: Case
    points: tuple[Point, ...]
    mark: Verdict
    note: str


def already(store: Store, plans: list[tuple[int, Planned]]) -> set[tuple[int, int]]:
    """(line, point index) pairs the store holds already: the k-th mark of a (case, point, mark)
    in the file is there when the store has k manual runs of it (a replay done twice records once)."""
    counts: dict[tuple[str, str, str], int] = {}
    have: dict[tuple[str, str, str], int] = {}
    out = set()
    for line, plan in plans:
        for i, point in enumerate(plan.points):
            k = (plan.case.key, point.key, plan.mark.value)
            counts[k] = counts.get(k, 0) + 1
            if k not in have:
                have[k] = sum(1 for r in store.done_runs(plan.case.key, point.key)
                              if r.manual is not None and r.manual.mark is plan.mark)
            if counts[k] <= have[k]:
                out.add((line, i))
    return out


# ----------------------------------------------------------- bisect --manual


def parse_answer(text: str) -> Verdict | None:
    word = (text or "").strip().lower()
    for m in Verdict:
        if word in (m.value, m.value[0]):
            return m
    return None


MANUAL_PORT = 29500  # the master port of a run by hand (torch's default)


def manual_target(store_dir: Path, case: Case, point: Point, python: Path) -> Target:
    """Where a run by hand goes: the point venv's python, a folder of its own under the store's
    ``manual/`` (the ranks' logs, the flight recorder's dumps), torch's default master port."""
    return Target(python, RunDir(store_dir / "manual" / f"{case.key[:12]}-{point.key[:12]}"), MANUAL_PORT)


def instructions(case: Case, point: Point, venv: Path, accel: Accelerator, target: Target) -> list[str]:
    """How to run ``case`` at ``point`` by hand: the line the runner would run (``launchers``)."""
    return launchers.instructions(case, point, venv, accel, target)


@dataclass
class ManualExecutor(Delegated):
    """``bisect --manual``: each point's venv is built here, then the user runs the case and
    answers good, bad or skip; the answer is recorded as a mark (the bisection is unchanged)."""

    site: Site
    ask: Callable[[str], str]  # a prompt -> the user's answer
    say: Callable[[str], None]  # a line for the user

    def run_once(self, spec: RunSpec, cancel: threading.Event) -> RunRecord:
        """The point's venv built, how to run the case in it said, and the user's answer recorded."""
        if cancel.is_set():
            raise KeyboardInterrupt
        site, case, point, attempt = self.site, spec.case, spec.point, spec.attempt
        site.progress("env", f"{case.name} · {point.label}: preparing venv")
        try:
            env = site.envs.ensure(point)
        except EnvBuildError as e:  # untestable, as a run here would be
            run_id = site.store.start_run(case.name, case.key, point, None, attempt)
            done = site.store.finish_run(run_id, Outcome.SKIP, None, 0.0, reason=f"venv could not be built: {e}",
                                         evidence=Evidence(skip_cause=SkipCause.VENV))
            site.progress("done", f"{case.name} · {point.label}: skip (venv could not be built)")
            return done
        self.say("")
        target = manual_target(site.store.dir, case, point, env.python)
        for text in instructions(case, point, env.path, accelerator(site, case), target):
            self.say(text)
        while (answer := parse_answer(self.ask(f"{point.label}: good, bad or skip [g/b/s]"))) is None:
            self.say("  answer good, bad or skip (g, b, s)")
        done = record(site.store, case, point, answer, "answered at the bisect --manual prompt", env.key, attempt)
        site.progress("done", f"{case.name} · {point.label}: marked {answer.value} by hand (run {done.id})")
        return done
