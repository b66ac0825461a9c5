"""``dsbisect workaround``: which documented setting makes the failing command pass at the bad
point (envdiff.workaround); each found one run twice, and labelled a workaround, not a fix."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsbisect.cli.app import KeepsWords, app, user_errors
from dsbisect.cli.groups import grouped
from dsbisect.cli.options import SettingsOpts, Shown
from dsbisect.cli.output import Format, emit, frontend, out
from dsbisect.core.model import Accelerator
from dsbisect.core.outside import safe
from dsbisect.envdiff.workaround import WorkaroundRequest, Workarounds, workaround_job


@dataclass(frozen=True)
class WorkaroundOpts(WorkaroundRequest):
    command: Annotated[Optional[list[str]], typer.Argument(metavar="-- COMMAND...", help="The command line that fails at the bad point.")] = None
    config: Annotated[Optional[Path], typer.Option("--config", metavar="FILE", help="The config the command names (DeepSpeed JSON, accelerate YAML): its documented keys are tried too.")] = None
    pin: Annotated[Optional[list[str]], typer.Option("--pin", metavar="REQ", help="The bad point, e.g. deepspeed==0.18.9 (repeatable; default: this environment).")] = None
    knob: Annotated[Optional[list[str]], typer.Option("--knob", metavar="WHERE:KEY=VALUE", help="Your own candidate, tried after the list: env:NAME=VALUE or config:a.b=VALUE (repeatable).")] = None
    only_own: Annotated[bool, typer.Option("--only-own", help="Try only the --knob candidates, not the documented list.")] = False
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=20, help="Runs of each knob; it works when every one passes.")] = 2
    accelerator: Annotated[Accelerator, typer.Option("--accelerator", help="Where the ranks run: cpu, cuda, or auto.")] = Accelerator.AUTO


@app.command(cls=KeepsWords)
@grouped
def workaround(*, request: WorkaroundOpts, settings: SettingsOpts, shown: Shown) -> None:
    """Try documented settings (NCCL/gloo variables, DeepSpeed ZeRO keys, accelerate's dataloader
    switches: the list and its sources are in docs/how-to/settings.md) one at a time on a command
    that fails, each run --repeat times, and report those that make it pass: workarounds, not fixes.
    Exit 0 when one works, 1 when none does or the command does not fail."""
    with user_errors():
        shown.check()
        found = workaround_job(request, settings, frontend(shown.quiet))
        _show(found, shown)
        if found.exit_code:
            raise typer.Exit(found.exit_code)


def _lines(w: Workarounds) -> list[str]:
    head = (f"{len(w.found)} workaround(s) of {len(w.trials)} knobs tried" if w.found
            else f"no workaround among {len(w.trials)} knobs tried")
    lines = [head + f"; as given: {w.baseline.value} (run {', '.join(map(str, w.baseline_runs))})",
             "a workaround, not a fix: the regression is still there; the setting steps around it"]
    for t in w.trials:
        runs = ", ".join(f"#{i} {o.value}" for i, o in zip(t.run_ids, t.outcomes))
        mark = "WORKS" if t.works else "no"
        lines.append(f"  {mark:5} {t.knob.describe()} (was {t.now if t.now is not None else 'unset'}): {runs}"
                     + (f"; cost: {t.knob.cost}; source: {t.knob.source}" if t.works else ""))
    return [safe(x) for x in lines]


def _show(w: Workarounds, shown: Shown) -> None:
    if shown.fmt is Format.json:
        emit(json.dumps(w.to_json(), indent=2) + "\n", shown.output)
    elif shown.fmt is Format.markdown:
        lines = _lines(w)
        md = [f"**{lines[0]}**", "", f"_{lines[1]}_", "", "| works | knob | was | runs | cost | source |",
              "|---|---|---|---|---|---|"]
        md += [f"| {'**yes**' if t.works else 'no'} | `{t.knob.describe()}` | {t.now} | "
               f"{' '.join(f'#{i} {o.value}' for i, o in zip(t.run_ids, t.outcomes))} | {t.knob.cost} | {t.knob.source} |"
               for t in w.trials]
        emit(safe("\n".join(md)) + "\n", shown.output)
    else:
        for line in _lines(w):
            out.print(line)
