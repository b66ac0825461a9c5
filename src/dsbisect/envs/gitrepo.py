"""A local clone of a package's repository: release tags, the commits between them, and a
commit reverted on top of another (the revert proof) in a scratch worktree of the clone."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core import proc
from dsbisect.envs import gitconfig
from dsbisect.core.errors import DsbisectError, ExternalFailure, InputError


@dataclass(frozen=True)
class Commit:
    hash: str
    subject: str
    describe: str = ""

    @property
    def short(self) -> str:
        return self.hash[:10]


def _git(repo: Path, *args: str) -> str:
    """What git printed, read as data: whole, or refused (it is never used cut)."""
    done = git(repo, *args, keep=proc.DATA)
    if not done.ok:  # the clone checked, the refs resolved: git itself failed (exit 1, not bad input)
        raise ExternalFailure(f"git {' '.join(args[:2])} in {repo} failed: {done.last_line()}")
    if done.cut:
        raise DsbisectError(f"git {' '.join(args[:2])} in {repo} printed over {proc.DATA.head >> 20} MB; "
                         "bisect a shorter range")
    return done.stdout


def git(repo: Path, *args: str, keep: proc.Keep = proc.KEEP, stdout=None) -> proc.Completed:
    """The one door to git on a user's clone: it runs none of the programs the clone's (or the
    user's) configuration names (``gitconfig``: hooks, filters, drivers, helpers, transports)."""
    return proc.run(["git", "-C", repo, *gitconfig.quiet_args(repo), *args], env=gitconfig.environment(), keep=keep,
                    stdout=stdout)


def check_repo(repo: Path) -> Path:
    repo = Path(repo).expanduser().resolve()
    if not repo.exists():
        raise InputError(f"--git-repo {repo}: no such folder")
    if not git(repo, "rev-parse", "--git-dir").ok:
        raise InputError(f"--git-repo {repo}: not a git repository")
    return repo


def tag_for(repo: Path, package: str, version: str) -> str:
    """The tag of a release: v1.2.3, 1.2.3 or <package>-1.2.3, whichever the clone has."""
    for name in (f"v{version}", version, f"{package}-{version}", f"{package}-v{version}"):
        if git(repo, "rev-parse", "--verify", "--quiet", f"refs/tags/{name}^{{commit}}").ok:
            return name
    raise InputError(f"{repo} has no tag for {package} {version} (looked for v{version} and {version}); "
                     "fetch the tags (git fetch --tags)")


def resolve(repo: Path, ref: str) -> str:
    """The hash of ``ref``; an InputError when the clone has no such commit (a ref one gave),
    or when it looks like an option (git would read ``--output=x`` as one)."""
    if not ref or ref.startswith("-") or any(c in ref for c in "\0\n"):
        raise InputError(f"{ref!r} is not a commit name (a tag, branch or hash)")
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", keep=proc.DATA)
    if done.returncode == 1 and not done.stdout.strip():  # --verify --quiet: 1 is "no such commit"
        raise InputError(f"{repo} has no commit {ref!r}")
    if not done.ok:
        raise ExternalFailure(f"git rev-parse in {repo} failed: {done.last_line()}")
    return done.stdout.strip()


def is_ancestor(repo: Path, old: str, new: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", resolve(repo, old), resolve(repo, new)).ok


def merge_base(repo: Path, a: str, b: str) -> str:
    out = _git(repo, "merge-base", resolve(repo, a), resolve(repo, b)).strip()
    if not out:
        raise DsbisectError(f"{a} and {b} have no common history in {repo}")
    return out


def commits_between(repo: Path, old: str, new: str) -> list[Commit]:
    """First-parent commits after ``old`` up to and including ``new``, oldest first."""
    old_hash, new_hash = resolve(repo, old), resolve(repo, new)
    out = _git(repo, "log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{old_hash}..{new_hash}")
    commits = []
    for line in out.splitlines():
        h, _, subject = line.partition("\t")
        commits.append(Commit(h, subject))
    return commits


def commit(repo: Path, ref: str) -> Commit:
    h = resolve(repo, ref)
    subject = _git(repo, "log", "-1", "--format=%s", h).strip()
    return Commit(h, subject, describe(repo, h))


def describe(repo: Path, ref: str) -> str:
    return git(repo, "describe", "--tags", "--always", ref).stdout.strip()


# ---------------------------------------------------------------- revert proof

# Conflict states of ``git status --porcelain``: both sides touched the path.
UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})


@dataclass(frozen=True)
class Revert:
    """``commit`` reverted on top of ``onto``: the tree it gives, the files in conflict, or why
    git could not try (``error``)."""

    commit: str
    onto: str
    merge: bool = False  # a merge commit, reverted against its first parent (-m 1)
    tree: str = ""
    conflicts: tuple[str, ...] = ()
    error: str = ""

    @property
    def clean(self) -> bool:
        return bool(self.tree)


def unmerged(status: str) -> tuple[str, ...]:
    """The paths in conflict, from the output of ``git status --porcelain=v1 -z``."""
    fields, out, i = status.split("\0"), [], 0
    while i < len(fields):
        entry, i = fields[i], i + 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if xy[0] in "RC":  # a rename or copy: the path it came from follows
            i += 1
        if xy in UNMERGED:
            out.append(path)
    return tuple(sorted(set(out)))


def parents(repo: Path, ref: str) -> tuple[str, ...]:
    return tuple(_git(repo, "rev-list", "--parents", "-n", "1", resolve(repo, ref)).split()[1:])


def revert_tree(repo: Path, commit: str, onto: str) -> Revert:
    """Revert ``commit`` on top of ``onto`` (``git revert --no-commit``, ``-m 1`` for a merge) in
    a scratch worktree of ``repo`` and write the result as a tree object.  The clone's own
    working tree, index, HEAD and branches are not touched; the scratch worktree is removed
    whatever happens (an error, Ctrl-C).  The tree and the merged files' blobs stay in the
    clone's object store, unreferenced (``git gc`` drops them in time)."""
    merge = len(parents(repo, commit)) > 1
    scratch = Path(tempfile.mkdtemp(prefix="dsbisect-revert-")).resolve()
    wt = scratch / "tree"
    try:
        added = git(repo, "worktree", "add", "--detach", "--quiet", str(wt), onto)
        if not added.ok:
            return Revert(commit, onto, merge, error=f"git worktree add failed: {added.last_line()}")
        done = git(wt, "revert", "--no-commit", *(("-m", "1") if merge else ()), commit)
        if not done.ok:
            status = git(wt, "status", "--porcelain=v1", "-z", "--untracked-files=no")
            conflicts = unmerged(status.stdout) if status.ok else ()
            return Revert(commit, onto, merge, conflicts=conflicts,
                          error="" if conflicts else f"git revert failed: {done.last_line()}")
        tree = git(wt, "write-tree")
        if not tree.ok:
            return Revert(commit, onto, merge, error=f"git write-tree failed: {tree.last_line()}")
        return Revert(commit, onto, merge, tree=tree.stdout.strip())
    finally:
        _drop_worktree(repo, wt)
        shutil.rmtree(scratch, ignore_errors=True)


def _drop_worktree(repo: Path, wt: Path) -> None:
    """Remove the scratch worktree and its entry in the clone (only that one: no ``prune``)."""
    git(repo, "worktree", "remove", "--force", "--force", str(wt))
    shutil.rmtree(wt, ignore_errors=True)
    if str(wt) in worktrees(repo):  # the folder went first (an interrupted add): drop the entry
        git(repo, "worktree", "remove", "--force", "--force", str(wt))


def worktrees(repo: Path) -> tuple[str, ...]:
    out = git(repo, "worktree", "list", "--porcelain").stdout
    return tuple(ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("worktree "))
