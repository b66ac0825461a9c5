"""What to do after a release answer: the commit step, and where to read the changes.

A bisection of releases that found its pair and ran no commit step ends with the way on:
the clone the commit step needs (``git clone --filter=blob:none --shallow-since=...``: the
history from a margin before the last good release, without file contents until checkout),
the same command with ``--git-repo``, and the compare view of the two tags.  Pure: the caller
gives the release date it read from the index (None: the clone keeps the whole history).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta

from packaging.utils import canonicalize_name

from dsbisect.core.model import Answer
from dsbisect.records.results import Result


@dataclass(frozen=True)
class Source:
    """Where a package's code lives on GitHub, and how its release tags are spelled."""

    repo: str  # owner/name
    tag: str  # a format of the version: "v{}" gives v0.18.7

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}"

    @property
    def folder(self) -> str:
        return self.repo.split("/")[1]  # what git clone names the clone


# The packages dsbisect bisects (its README's and its cases'), with their tag spelling.
SOURCES: dict[str, Source] = {
    "deepspeed": Source("deepspeedai/DeepSpeed", "v{}"),
    "transformers": Source("huggingface/transformers", "v{}"),
    "accelerate": Source("huggingface/accelerate", "v{}"),
    "peft": Source("huggingface/peft", "v{}"),
    "trl": Source("huggingface/trl", "v{}"),
    "torch": Source("pytorch/pytorch", "v{}"),
}

# History kept before the last good release: a release branch is cut before its tag (DeepSpeed's
# are), so the merge base the commit step starts from is older than the tag.
MARGIN = timedelta(days=30)


@dataclass(frozen=True)
class NextStep:
    clone: str  # the git clone command
    rerun: str  # the bisection again, with --git-repo on the clone
    compare: str  # the compare view of the two tags ("" for a package whose source is not known)


def next_step(result: Result, command: str, released: datetime | None) -> NextStep | None:
    """The way on from a found release pair, or None (no pair, or a commit step already ran)."""
    req = result.request
    if (result.verdict is not Answer.FOUND or not (result.last_good and result.first_bad)
            or result.commit is not None or result.commit_message or req.git_repo):
        return None
    src = SOURCES.get(canonicalize_name(req.package))
    folder = src.folder if src else req.package
    since = f"--shallow-since={(released - MARGIN).date().isoformat()} " if released else ""
    url = src.url if src else f"<the {req.package} repository>"
    clone = f"git clone --filter=blob:none {since}{url}"
    compare = f"{src.url}/compare/{src.tag.format(result.last_good)}...{src.tag.format(result.first_bad)}" if src else ""
    return NextStep(clone, _with_repo(command, folder), compare)


def _with_repo(command: str, folder: str) -> str:
    """``command`` with ``--git-repo folder`` before a ``--`` (the job's own command line)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return f"{command} --git-repo {shlex.quote(folder)}"
    at = words.index("--") if "--" in words else len(words)
    return shlex.join([*words[:at], "--git-repo", folder, *words[at:]])


def lines(step: NextStep) -> list[str]:
    """The next step as plain lines (terminal and Markdown share them)."""
    out = ["Next: find the commit (clone, then bisect the commits between the releases):",
           f"  {step.clone}", f"  {step.rerun}"]
    if step.compare:
        out.append(f"Changes between the releases: {step.compare}")
    return out
