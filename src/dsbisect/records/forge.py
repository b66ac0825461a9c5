"""What a forge (GitHub and its kind) needs of a bisection's answer: the culprit's pull request,
read from its commit message, the repository's web address, read from a remote URL, and the
regression's identity as a stable key, so that a regression found again updates its issue
instead of opening another.  Pure: no I/O (``bisect.culprit`` reads git; the workflow's ``gh``
talks to the forge, never dsbisect).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsbisect.core.model import digest
from dsbisect.verdict.identity import Identity

# A squash merge's subject ends in "(#1234)"; a merge commit's reads "Merge pull request #1234 from
# owner/branch"; a trailer names it ("PR: #1234", "Pull-Request: https://…/pull/1234", "PR-URL: …").
_SQUASH = re.compile(r"\(#(\d+)\)\s*$")
_MERGE = re.compile(r"^Merge pull request #(\d+)\b")
_TRAILER = re.compile(r"^(?:PR|Pull[- ]Request|PR-URL|Reviewed-on)\s*:\s*(?:#(\d+)|\S*/pulls?/(\d+))\s*$",
                      re.IGNORECASE | re.MULTILINE)
_SCP = re.compile(r"^(?:[\w.-]+@)?([\w.-]+):(?!//)(.+?)(?:\.git)?/?$")  # git@github.com:owner/repo.git
_URL = re.compile(r"^(?:https?|ssh|git)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+?)(?:\.git)?/?$")


def pull_request(message: str) -> int | None:
    """The pull request a commit came from, by its message: the subject's ``(#N)`` (a squash
    merge), ``Merge pull request #N`` (a merge commit), else a trailer; None when none says."""
    lines = message.strip().splitlines()
    subject = lines[0] if lines else ""
    for pattern in (_SQUASH, _MERGE):
        m = pattern.search(subject)
        if m:
            return int(m[1])
    found = _TRAILER.findall("\n".join(lines[1:]))
    return int(next(a or b for a, b in found)) if found else None


def web_url(remote: str) -> str | None:
    """The web address of a repository from its remote URL (``git@github.com:o/r.git``,
    ``https://github.com/o/r.git``, ``ssh://git@host/o/r``), credentials left out; None for a
    local path or anything else."""
    remote = remote.strip()
    m = _URL.match(remote) or (_SCP.match(remote) if "://" not in remote else None)
    if not m or "/" not in m[2]:
        return None
    return f"https://{m[1]}/{m[2]}"


def pull_url(repo: str | None, number: int | None) -> str | None:
    """The pull request's page on the forge (GitHub's ``/pull/N``)."""
    return f"{repo}/pull/{number}" if repo and number is not None else None


@dataclass(frozen=True)
class Culprit:
    """The first bad commit as a maintainer acts on it."""

    commit: str
    subject: str
    author: str = ""
    pr: int | None = None
    pr_url: str | None = None
    repo_url: str | None = None

    @property
    def short(self) -> str:
        return self.commit[:10]

    @property
    def commit_url(self) -> str | None:
        return f"{self.repo_url}/commit/{self.commit}" if self.repo_url else None

    def link(self) -> str:
        """``#1234`` linked to its page (Markdown), else the short hash, linked where known."""
        if self.pr is not None:
            return f"[#{self.pr}]({self.pr_url})" if self.pr_url else f"#{self.pr}"
        return f"[`{self.short}`]({self.commit_url})" if self.commit_url else f"`{self.short}`"


def issue_key(package: str, test: str, identity: Identity | None, kind: str) -> str:
    """A stable key for "this regression": the package, the test (the case's name or command),
    and the regression's identity (its kind, exception type, innermost package frame, else its
    normalised message).  Not the commit, the range or the date: the same failure found again
    on a later night, or brought back by another commit, gets the same key."""
    if identity is None:
        what = {"kind": kind}
    else:
        where = list(identity.frames[:1]) if identity.frames else identity.message
        what = {"kind": identity.kind.value, "error": identity.error, "where": where}
    return "dsbisect-" + digest({"package": package.lower(), "test": test, **what})
