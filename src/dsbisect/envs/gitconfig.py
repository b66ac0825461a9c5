"""Git on a user's clone runs none of the programs the clone (or the user's git config) names.

dsbisect reads a clone (tags, commits), checks commits out into scratch worktrees, reverts one
(the revert proof) and archives trees to build them.  Each of those may start a program the
configuration names: hooks (``post-checkout``, git-lfs's), ``core.fsmonitor``, the filter
drivers of ``.gitattributes`` (``filter.<name>.smudge``/``clean``/``process``: git-lfs's, or
any), merge drivers (``merge.<name>.driver``, run by a revert), diff drivers
(``diff.<name>.textconv``/``command``), credential helpers, ``core.sshCommand``, signature
checks (``log.showSignature``: gpg), submodule recursion, auto-gc.  None of them is ever run:

- ``quiet_args(path)``: ``-c`` options that turn each one off — hooks to ``/dev/null``,
  fsmonitor off, every filter driver the configuration at ``path`` names emptied (git then
  passes content through) and not required, every diff driver's textconv ``cat`` and its
  outside diff (and ``diff.external``) emptied (git refuses to run an empty one), every merge
  driver replaced by git's own text merge (``git merge-file``, what an unnamed driver gets),
  credential helpers cleared, no transport allowed at all (``protocol.allow=never``: no fetch,
  no ssh, no remote helper), no gc, no submodules, no signature checks;
- ``environment()``: this process's environment without the ``GIT_*`` variables that would
  point git elsewhere or name programs (``GIT_DIR``, ``GIT_EXTERNAL_DIFF``, ``GIT_SSH``,
  ``GIT_CONFIG_PARAMETERS``...), with prompts off.

The drivers are found by asking git for its configuration at that path (``git config
--get-regexp``, which runs nothing), once per path per process: a scratch worktree is asked
too, since a conditional include may differ there.  The system configuration is kept (it may
hold the ``safe.directory`` that lets one read a shared clone); its drivers are found and
turned off like the others.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from dsbisect.core import proc

# Always: hooks, fsmonitor, credentials, transports, gc, submodules, signatures.
FIXED = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "credential.helper=", "protocol.allow=never",
         "core.sshCommand=false", "gc.auto=0", "maintenance.auto=false", "submodule.recurse=false",
         "log.showSignature=false", "core.askPass=", "core.alternateRefsCommand=",
         "uploadpack.packObjectsHook=")
# The keys of a driver, and the value each gets (a merge driver: git's own text merge).
_DRIVERS = {
    "filter": {"smudge": "", "clean": "", "process": "", "required": "false"},
    "diff": {"textconv": "cat", "command": "", "cachetextconv": "false"},  # the text as it is; no outside diff
    "merge": {"driver": "git merge-file --marker-size=%L -L ours -L base -L theirs %A %O %B", "recursive": "text"},
}
_KEEP = ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
         "GIT_CEILING_DIRECTORIES", "GIT_EXEC_PATH")


def environment() -> dict[str, str]:
    """The environment git runs in: ours without the ``GIT_*`` variables but those that say
    where the user's own configuration is, with every prompt off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEEP}
    return env | {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false" if os.path.exists("/bin/false") else "false",
                  "SSH_ASKPASS": "false", "GIT_PAGER": "cat", "GIT_EDITOR": "false"}


def _drivers(path: str) -> tuple[tuple[str, str], ...]:
    """(section, name) of every filter, diff and merge driver the configuration at ``path``
    names (asked of git itself, which runs nothing to answer)."""
    done = proc.run(["git", "-C", path, "config", "--null", "--get-regexp", r"^(filter|diff|merge)\."],
                    env=environment(), keep=proc.DATA, timeout=60)
    found = []
    for entry in done.stdout.split("\0"):
        key = entry.split("\n", 1)[0]
        section, _, rest = key.partition(".")
        name, _, _var = rest.rpartition(".")
        if section.lower() in _DRIVERS and name:
            found.append((section.lower(), name))
        elif key.lower() == "diff.external":  # the user's outside diff: named, it fails (never runs)
            found.append(("diff", ""))
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=64)
def _quiet(path: str) -> tuple[str, ...]:
    args = [a for setting in FIXED for a in ("-c", setting)]
    for section, name in _drivers(path):
        if not name:
            args += ["-c", "diff.external="]
            continue
        for key, value in _DRIVERS[section].items():
            args += ["-c", f"{section}.{name}.{key}={value}"]
    return tuple(args)


def quiet_args(path: Path | str) -> tuple[str, ...]:
    """The ``-c`` options that keep git at ``path`` from running any configured program."""
    return _quiet(str(Path(path).resolve()))
