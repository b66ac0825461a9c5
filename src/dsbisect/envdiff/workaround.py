"""``dsbisect workaround``: at the bad point, the documented knobs (``knobs.KNOBS``, and the user's
own) tried one at a time, each run ``repeat`` times, then in small groups (``knobgroups``: pairs,
at most triples, while no smaller group works); those whose every run passes are workarounds --
not fixes: the bug is still there, a setting steps around it, at the cost the list names.

The command is first run as given: if it passes, there is nothing to work around (exit 1).  A
knob is a ``settings.Setting`` from the value the run has now (the config's, or this process's
environment's) to the knob's; its trial case is made by ``trialcase.TrialCases`` as a bisection's
trial is (its config written with the key set, its variable set), so its runs are in the store
and a second invocation reuses them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core.errors import DsbisectError, InputError
from dsbisect.core.model import Accelerator, Case, EnvOptions, Outcome, Point
from dsbisect.envdiff.flagknobs import flag_lines, line_kinds
from dsbisect.envdiff.knobgroups import GroupLimits, GroupTry, search_groups
from dsbisect.envdiff.knobs import Knob
from dsbisect.envdiff.settings import Setting, Where, flatten, parse_config
from dsbisect.envdiff.settingsplan import CONFIG_WORD, SettingsPlan, mark_config
from dsbisect.envdiff.trialcase import TrialCases
from dsbisect.run.runner import Runner
from dsbisect.run.settings import Frontend, Settings


@dataclass(frozen=True)
class WorkaroundRequest:
    """``dsbisect workaround``: the failing command, the config it names, the bad point's pins,
    the user's own knobs (``--only-own``: those alone), runs per knob, the accelerator, and the
    groups' bounds (``knobgroups.GroupLimits``)."""

    command: Sequence[str] | None = None
    config: Path | None = None
    pin: Sequence[str] | None = None
    knob: Sequence[str] | None = None
    only_own: bool = False
    repeat: int = 2
    accelerator: Accelerator = Accelerator.AUTO
    max_group: int = 2
    max_group_runs: int = 30
    every_group: bool = False


def workaround_job(req: WorkaroundRequest, settings: Settings, frontend: Frontend) -> Workarounds:
    """Check the request (InputError before the store is made), then run the command and the knobs."""
    from dsbisect.envdiff.knobs import KNOBS, parse_knob
    from dsbisect.run import matrix
    from dsbisect.run.settings import open_session

    command, cwd = list(req.command or ()), Path.cwd()
    if not command:
        raise InputError("give the command line that fails after --")
    own = [parse_knob(k) for k in req.knob or ()]
    flag_lines(own, command)  # two values of one option: an InputError before the store is made
    if req.only_own and not own:
        raise InputError("--only-own tries only --knob candidates: give one")
    if req.config is not None:  # read, and named by the command, before the store is made
        parse_config(req.config)
        mark_config(command, cwd, req.config, req.config)
    case = settings.shape(matrix.command_points(command, cwd, [], list(req.pin or ()), None, req.accelerator))
    ui = frontend.display(0)
    runner = open_session(settings, settings.venvs.options(EnvOptions()), settings.sources.resolve(), ui)
    used, left = applicable([] if req.only_own else KNOBS, runner.accelerator(case), req.config, command)
    plan, pairs, same = plan_knobs([*used, *own], command, cwd, req.config)
    limits = GroupLimits(req.max_group, req.max_group_runs, req.every_group)
    with ui.running():
        return find_workarounds(runner, case, case.points[0], plan, pairs, req.repeat, [*same, *left], limits)


@dataclass(frozen=True)
class KnobTrial:
    """One knob, or a group of knobs set together, and its runs."""

    knobs: tuple[Knob, ...]
    now: tuple[str | None, ...]  # the value each had before (None: unset / absent)
    outcomes: tuple[Outcome, ...]
    run_ids: tuple[int, ...]
    works: bool

    @property
    def knob(self) -> Knob:
        return self.knobs[0]

    def describe(self) -> str:
        return " + ".join(k.describe() for k in self.knobs)

    def was(self) -> str:
        return ", ".join("unset" if v is None else v for v in self.now)

    def to_json(self) -> dict:
        each = [{"setting": k.where.value, "name": k.name, "value": k.value, "was": was, "cost": k.cost,
                 "source": k.source} for k, was in zip(self.knobs, self.now)]
        runs = {"outcomes": [o.value for o in self.outcomes], "run_ids": list(self.run_ids), "works": self.works}
        return {**each[0], **runs, "knobs": each} if len(each) == 1 else {"knobs": each, **runs}


@dataclass(frozen=True)
class Workarounds:
    command: tuple[str, ...]
    baseline: Outcome
    baseline_runs: tuple[int, ...]
    trials: tuple[KnobTrial, ...]  # one knob each
    skipped: tuple[str, ...]  # knobs not tried, and why
    verdict: str  # found: at least one knob or group passed every run; none
    groups: tuple[KnobTrial, ...] = ()  # groups of knobs tried, smallest first
    groups_skipped: tuple[str, ...] = ()  # groups not tried, and why
    max_group: int = 1

    @property
    def found(self) -> tuple[KnobTrial, ...]:
        return tuple(t for t in (*self.trials, *self.groups) if t.works)

    @property
    def exit_code(self) -> int:
        return 0 if self.found else 1

    def to_json(self) -> dict:
        return {"kind": "workaround", "command": list(self.command), "verdict": self.verdict,
                "baseline": {"outcome": self.baseline.value, "run_ids": list(self.baseline_runs)},
                "workarounds": [t.to_json() for t in self.trials if t.works],
                "tried": [t.to_json() for t in self.trials], "not_tried": list(self.skipped),
                "group_workarounds": [t.to_json() for t in self.groups if t.works],
                "groups_tried": [t.to_json() for t in self.groups], "groups_not_tried": list(self.groups_skipped),
                "max_group": self.max_group,
                "note": "a workaround, not a fix: the regression is still there; the setting steps around it"}


def config_kind(config: Path) -> str:
    """``deepspeed`` for a DeepSpeed config (ZeRO or batch keys at the top), ``accelerate`` for an
    accelerate config (its distributed_type), else ``other``."""
    top = set(parse_config(config))
    if top & {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu"}:
        return "deepspeed"
    return "accelerate" if "distributed_type" in top else "other"


def applicable(knobs: Sequence[Knob], accel: Accelerator, config: Path | None, words: Sequence[str] = ()
               ) -> tuple[list[Knob], list[str]]:
    """The knobs that apply to this run (its transport, the config it names, what its command line
    turns on), and the others with why."""
    kinds = {"any", "nccl" if accel is Accelerator.CUDA else "gloo"} | ({config_kind(config)} if config else set())
    kinds |= line_kinds(words)
    used, left = [], []
    for k in knobs:
        if k.applies in kinds and (k.where is not Where.CONFIG or config is not None):
            used.append(k)
        elif k.applies == "checkpointing":
            left.append(f"{k.describe()}: for a command line with --gradient_checkpointing on")
        else:
            left.append(f"{k.describe()}: for {k.applies} runs" + ("" if config or k.where is not Where.CONFIG
                                                                    else " (needs --config FILE)"))
    return used, left


def plan_knobs(knobs: Sequence[Knob], words: Sequence[str], cwd: Path, config: Path | None
               ) -> tuple[SettingsPlan, list[tuple[Knob, Setting]], list[str]]:
    """The knobs as settings from what the run has now; a knob already at its value is not tried."""
    now = flatten(parse_config(config)) if config else {}
    if config is not None:
        words = mark_config(list(words), cwd, config, config)
    good_line, bad_line, flags_now = flag_lines([k for k in knobs if k.where is Where.FLAG], words)
    pairs, same = [], []
    for k in knobs:
        was = os.environ.get(k.name) if k.where is Where.ENV else flags_now[k.name] if k.where is Where.FLAG \
            else now.get(k.path)
        if was == k.value or k.where is Where.FLAG and not k.value and was == "":
            same.append(f"{k.describe()}: already so")
            continue
        pairs.append((k, Setting(k.where, k.path, was, k.value)))
    extra = {"good_config": config.resolve(), "bad_config": config.resolve(), "config_text": config.read_text()} \
        if config else {}
    if flags_now:
        extra |= {"good_line": good_line, "bad_line": bad_line}
    plan = SettingsPlan(tuple(s for _, s in pairs), tuple(words), cwd, **extra)
    return plan, pairs, same


def find_workarounds(runner: Runner, case: Case, point: Point, plan: SettingsPlan,
                     pairs: list[tuple[Knob, Setting]], repeat: int, skipped: Sequence[str],
                     limits: GroupLimits = GroupLimits(max_group=1)) -> Workarounds:
    cases = TrialCases(plan, case, runner.envs.paths.root / "settings")
    command = tuple(w.replace(CONFIG_WORD, str(plan.good_config)) for w in plan.words)

    def trial(chosen: tuple[int, ...]) -> KnobTrial:
        """The knobs ``chosen`` set together, run ``repeat`` times or until a run does not pass: a
        workaround passes every run, so a run after one that did not pass could not make it one."""
        applied = frozenset(pairs[i][1] for i in chosen)
        p = _at(point, cases, applied)
        done = runner.runs(cases.case_of(p), p, want=repeat,
                           enough=lambda rs: any(r.outcome is not Outcome.PASS for r in rs))
        outs = tuple(r.outcome for r in done)
        return KnobTrial(tuple(pairs[i][0] for i in chosen), tuple(pairs[i][1].good for i in chosen), outs,
                         tuple(r.id for r in done), len(outs) == repeat and all(o is Outcome.PASS for o in outs))

    p0 = _at(point, cases, frozenset())
    base = runner.runs(cases.case_of(p0), p0, want=1)
    outcome = base[0].outcome if base else Outcome.SKIP
    if outcome is not Outcome.FAIL and outcome is not Outcome.HANG:
        said = "passes as it is: nothing to work around" if outcome is Outcome.PASS else "could not be tested"
        raise NothingToWorkAround(f"the command {said} ({outcome.value}, run {', '.join(str(r.id) for r in base)})")
    trials = []
    for i, (knob, _) in enumerate(pairs):
        runner.progress("note", f"workaround: {knob.describe()} (up to {repeat} runs)")
        trials.append(trial((i,)))
    groups: list[KnobTrial] = []

    def try_group(chosen: tuple[int, ...]) -> GroupTry:
        runner.progress("note", "workaround: together " + " + ".join(pairs[i][0].describe() for i in chosen))
        groups.append(t := trial(chosen))
        return GroupTry(t.works, len(t.outcomes))

    keys = [(k.where.value, k.path) for k, _ in pairs]
    found = search_groups(keys, [i for i, t in enumerate(trials) if t.works], limits, repeat, try_group)
    verdict = "found" if any(t.works for t in (*trials, *groups)) else "none"
    return Workarounds(command, outcome, tuple(r.id for r in base), tuple(trials), tuple(skipped), verdict,
                       tuple(groups), found.not_tried, limits.max_group)


def _at(point: Point, cases: TrialCases, applied: frozenset[Setting]) -> Point:
    return dataclasses.replace(point, variant=cases.variant(applied), name=_label(applied))


class NothingToWorkAround(DsbisectError):
    """The command passes (or cannot run) as given: nothing to work around (exit 1)."""

    exit_code = 1


def _label(applied: frozenset[Setting]) -> str:
    ordered = sorted(applied, key=lambda s: (s.where.value, s.path))
    return "as given" if not applied else "with " + ", ".join(f"{s.where.value} {s.name}={s.bad}" for s in ordered)
