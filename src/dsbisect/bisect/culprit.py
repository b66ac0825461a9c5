"""The culprit of a bisection's answer, read from the clone: its subject, author, the pull request
its message names and that request's page (``records.forge`` parses; this reads git).

The repository's web address comes from ``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY`` where a
workflow sets them (the repository the job runs for), else from the clone's ``origin`` remote.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from dsbisect.core import proc
from dsbisect.core.redact import redact
from dsbisect.envs import gitrepo
from dsbisect.records.forge import Culprit, issue_key, pull_request, pull_url, web_url
from dsbisect.records.results import Result


def repo_web_url(repo: Path, environ: Mapping[str, str]) -> str | None:
    """The repository's web address: the workflow's, else the ``origin`` remote's (None: neither)."""
    server, name = environ.get("GITHUB_SERVER_URL"), environ.get("GITHUB_REPOSITORY")
    if server and name:
        return f"{server.rstrip('/')}/{name}"
    done = gitrepo.git(repo, "remote", "get-url", "origin", keep=proc.DATA)
    return web_url(done.stdout) if done.ok else None


def culprit(result: Result, environ: Mapping[str, str] | None = None) -> Culprit | None:
    """The first bad (or first fixed) commit of ``result`` with what a maintainer acts on; None
    when the answer names no single commit or the clone is not at hand."""
    c, repo = result.commit, result.request.git_repo
    if c is None or not c.first_bad or repo is None or not Path(repo).is_dir():
        return None
    environ = os.environ if environ is None else environ
    shown = gitrepo.git(repo, "log", "-1", "--format=%an%x00%B", c.first_bad, keep=proc.DATA)
    author, _, message = shown.stdout.partition("\0") if shown.ok else ("", "", c.subject)
    web = repo_web_url(repo, environ)
    number = pull_request(message or c.subject)
    return Culprit(c.first_bad, c.subject, author.strip(), number, pull_url(web, number), web)


def test_name(result: Result) -> str:
    """What the bisection ran, for the issue's key and title: the command line as given (masked),
    else the case's name."""
    case = result.request.case
    if case.command is not None:
        return redact(shlex.join(case.command.argv))
    return case.name


def key_of(result: Result) -> str:
    """The regression's stable key (``forge.issue_key``) for ``result``."""
    regression = result.regression
    kind = regression.regress_on.value if regression else result.request.regress_on.value
    return issue_key(result.request.package, test_name(result), regression.identity if regression else None, kind)
