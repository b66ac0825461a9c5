"""``--commits OLD..NEW``: a range of a clone's commits to bisect with no releases, checked.

The commits searched are the first-parent ones after OLD up to NEW (as ``git bisect
--first-parent``), OLD first: the merge of a pull request is one candidate, the branch's own
commits (never tested on the main line) are not.  When OLD is no ancestor of NEW, the search
starts from their merge base, which is tested rather than assumed good (as ``git bisect`` does).
Every check here comes before anything is created: a range with no commit, a ref the clone
lacks, ``--commits`` without ``--git-repo``, a clone with uncommitted changes to tracked files
are each one ``InputError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsbisect.bisect.budget import Budget, parse_duration
from dsbisect.core import proc
from dsbisect.core.errors import InputError
from dsbisect.envs import gitrepo
from dsbisect.envs.gitrepo import Commit


@dataclass(frozen=True)
class CommitSpan:
    """``--commits OLD..NEW`` as given, and the budget of the search (``--max-runs``,
    ``--deadline``); what ``bisect`` takes besides PACKAGE for a search of commits alone."""

    commits: str | None = None
    max_runs: int | None = None
    deadline: str | None = None

    @property
    def given(self) -> bool:
        return self.commits is not None

    @property
    def budgeted(self) -> bool:
        return self.max_runs is not None or self.deadline is not None

    def budget(self) -> Budget:
        """``--max-runs`` and ``--deadline`` checked (an InputError for a bad duration)."""
        return Budget(self.max_runs, parse_duration(self.deadline) if self.deadline else None)

    def refs(self) -> tuple[str, str]:
        """OLD and NEW of ``OLD..NEW`` (``OLD..`` is ``OLD..HEAD``, as git reads it)."""
        text = (self.commits or "").strip()
        if "..." in text or text.count("..") != 1:
            raise InputError(f"--commits {self.commits!r}: give OLD..NEW (two dots), e.g. nightly-last-green..HEAD")
        old, new = text.split("..")
        if not old.strip():
            raise InputError(f"--commits {self.commits!r}: give the good end before the dots, e.g. "
                             "nightly-last-green..HEAD")
        return old.strip(), new.strip() or "HEAD"


@dataclass(frozen=True)
class Span:
    """A checked range: the clone, the ends as given, and the chain searched (``chain[0]`` the
    good end or the merge base, ``chain[-1]`` the bad end)."""

    repo: Path
    old_ref: str
    new_ref: str
    chain: tuple[Commit, ...]
    note: str = ""  # the merge base taken for a good end that is no ancestor of the bad one

    @property
    def old(self) -> Commit:
        return self.chain[0]

    @property
    def new(self) -> Commit:
        return self.chain[-1]

    @property
    def between(self) -> int:
        """Commits after the good end (the bad end included): what may be the first bad one."""
        return len(self.chain) - 1


def check_span(given: CommitSpan, git_repo: Path | None) -> Span:
    """The range ``given`` names in the clone ``git_repo``, every check done (an InputError each)."""
    if git_repo is None:
        raise InputError("--commits needs --git-repo CLONE: the clone whose commits are searched (--git-repo . for "
                         "the repository you stand in)")
    old_ref, new_ref = given.refs()
    repo = gitrepo.check_repo(git_repo)
    old_hash, new_hash = gitrepo.resolve(repo, old_ref), gitrepo.resolve(repo, new_ref)
    dirty = changed_files(repo)
    if dirty:
        more = f" and {len(dirty) - 3} more" if len(dirty) > 3 else ""
        raise InputError(f"--git-repo {repo} has uncommitted changes ({', '.join(dirty[:3])}{more}): commit or stash "
                         "them first; each commit is built from git, and the command runs from your files")
    start, note = old_hash, ""
    if old_hash != new_hash and not gitrepo.is_ancestor(repo, old_hash, new_hash):
        if gitrepo.is_ancestor(repo, new_hash, old_hash):
            raise InputError(f"--commits {given.commits}: {new_ref} comes before {old_ref}; give the good (older) "
                             "end first")
        start = gitrepo.merge_base(repo, old_hash, new_hash)
        note = (f"{old_ref} is not an ancestor of {new_ref}: the commits searched are the first-parent ones from "
                f"their merge base {start[:10]}")
    commits = gitrepo.commits_between(repo, start, new_hash)
    if not commits:
        raise InputError(f"--commits {given.commits}: no commits between {old_ref} and {new_ref} "
                         f"(both are {new_hash[:10]}); give a good end before the bad one")
    chain = (gitrepo.commit(repo, start), *commits[:-1], gitrepo.commit(repo, new_hash))
    return Span(repo, old_ref, new_ref, chain, note)


def changed_files(repo: Path) -> list[str]:
    """The tracked files of the clone's work tree that differ from HEAD (untracked ones, a
    store or build output, do not count)."""
    done = gitrepo.git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=no", keep=proc.DATA)
    if not done.ok:
        raise InputError(f"--git-repo {repo}: git status failed: {done.last_line()}")
    return [entry[3:] for entry in done.stdout.split("\0") if len(entry) > 3]
