"""A local clone of a package's repository: release tags and the commits between them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import proc
from .errors import InputError


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
    if not done.ok:
        raise InputError(f"git {' '.join(args[:2])} in {repo} failed: {done.last_line()}")
    if done.cut:
        raise InputError(f"git {' '.join(args[:2])} in {repo} printed over {proc.DATA.head >> 20} MB; "
                         "bisect a shorter range")
    return done.stdout


def git(repo: Path, *args: str, keep: proc.Keep = proc.KEEP) -> proc.Completed:
    return proc.run(["git", "-C", repo, *args], keep=keep)


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
    return _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()


def is_ancestor(repo: Path, old: str, new: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", resolve(repo, old), resolve(repo, new)).ok


def merge_base(repo: Path, a: str, b: str) -> str:
    out = _git(repo, "merge-base", resolve(repo, a), resolve(repo, b)).strip()
    if not out:
        raise InputError(f"{a} and {b} have no common history in {repo}")
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
