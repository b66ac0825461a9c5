"""``bisect --format github``: what a GitHub Actions step gets, written where the runner reads it.

stdout gets the workflow commands (annotations) and the one-line verdict; ``$GITHUB_STEP_SUMMARY``
the Markdown summary (appended, as every step's); ``$GITHUB_OUTPUT`` the step outputs; ``-o FILE``
the issue body (its path is the ``issue_body`` output).  Outside a workflow (neither variable
set) a note says where the summary would have gone.  Every text is masked first.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from dsbisect.bisect.culprit import culprit, key_of
from dsbisect.cli.output import emit, say, write_output
from dsbisect.core.errors import InputError
from dsbisect.core.redact import redact
from dsbisect.records.results import Result
from dsbisect.render import github


def check_github(environment_bisection: bool) -> None:
    """--format github is for a bisection of releases or commits (checked before anything runs)."""
    if environment_bisection:
        raise InputError("--format github is for PACKAGE GOOD BAD or --commits; for two environments use "
                         "--format markdown")


def emit_github(result: Result, command: str, output: Path | None, environ: Mapping[str, str] | None = None) -> None:
    """The bisection ``result`` as a GitHub Actions step shows it (``render.github``)."""
    environ = os.environ if environ is None else environ
    key = key_of(result)
    pub = github.publish(result, culprit(result, environ), command, key)
    outputs = list(pub.outputs)
    if output is not None:
        write_output(redact(pub.issue.body), output)
        outputs.append(("issue_body", str(output.resolve())))
    summary_file, output_file = environ.get("GITHUB_STEP_SUMMARY"), environ.get("GITHUB_OUTPUT")
    if summary_file:
        _append(Path(summary_file), redact(pub.summary), "GITHUB_STEP_SUMMARY")
    if output_file:
        _append(Path(output_file), "".join(_output_line(k, redact(v)) for k, v in outputs), "GITHUB_OUTPUT")
    if not (summary_file or output_file):
        say("note: not in a GitHub Actions step (GITHUB_STEP_SUMMARY and GITHUB_OUTPUT unset): only the "
            "annotations and the verdict line are printed")
    emit("\n".join(redact(a) for a in (*pub.annotations, pub.line)) + "\n", None)


def _output_line(key: str, value: str) -> str:
    """One output in the runner's heredoc form (a value may hold any character)."""
    delimiter = f"DSBISECT_{secrets.token_hex(8)}"
    return f"{key}<<{delimiter}\n{value}\n{delimiter}\n"


def _append(path: Path, text: str, name: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise InputError(f"{name} {path}: could not be written ({e.strerror or e})") from None
