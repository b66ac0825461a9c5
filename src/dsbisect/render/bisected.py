"""A finished bisection (of releases, or of two environments) as ``dsbisect bisect`` prints it:
JSON, Markdown for an issue, or the terminal's view; and the next step a release answer ends
with (the clone from a margin before the last good release's upload date, when the index says).
"""

from __future__ import annotations

import json

from rich.console import Group, RenderableType

from dsbisect.core.errors import ExternalFailure, InputError
from dsbisect.bisect import fixedin
from dsbisect.core.model import IndexOptions
from dsbisect.core.outside import safe, safe_text
from dsbisect.render.grid import md
from dsbisect.envdiff.result import EnvResult
from dsbisect.records.results import Result, dumps
from dsbisect.render import chainreport, nextstep
from dsbisect.render import report as rep
from dsbisect.render.nextstep import NextStep


def next_step(result: Result | EnvResult, command: str, index: IndexOptions) -> NextStep | None:
    """What to do after a found release pair: the clone (from a margin before the last good
    release's upload date on the index, when it says) and the compare link; None for any other
    answer, and for a bisection of a number (its commit step is not there yet; no index read)."""
    from dsbisect.envs.versions import released

    if isinstance(result, EnvResult) or result.numbers is not None or nextstep.next_step(result, command, None) is None:
        return None
    try:
        when = released(result.request.package, result.last_good, index)
    except (InputError, ExternalFailure):  # no index (offline, gone since the search): the whole history
        when = None
    return nextstep.next_step(result, command, when)


def as_json(result: Result | EnvResult) -> str:
    """The result as JSON, secrets masked, ending in a newline."""
    return (json.dumps(result.to_json(), indent=2) if isinstance(result, EnvResult) else dumps(result)) + "\n"


def as_markdown(result: Result | EnvResult, command: str, after: NextStep | None = None) -> str:
    if isinstance(result, EnvResult):
        return chainreport.env_markdown(result, command)
    text = rep.bisect_markdown(result, command, after)
    line = safe(fixedin.fix_line(result))
    if not line:
        return text
    first = f"**{md(line[0].upper() + line[1:])}.**" if fixedin.still_broken(result) else f"**{md(line)}**"
    fix = "\n" + rep.bisect_markdown(result.fix, command) if result.fix is not None else ""
    return f"{first}\n\n{text}{fix}"


def as_renderable(result: Result | EnvResult, command: str, after: NextStep | None = None) -> RenderableType:
    if isinstance(result, EnvResult):
        return chainreport.env_renderable(result, command)
    view = rep.bisect_renderable(result, command, after=after)
    line = fixedin.fix_line(result)
    if not line:
        return view
    parts = [safe_text(line, style="bold"), view]
    return Group(*parts, rep.bisect_renderable(result.fix, command)) if result.fix is not None else Group(*parts)
