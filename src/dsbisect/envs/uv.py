"""uv, as dsbisect runs it: venvs and installs with one cache and a clean environment.

``Uv`` is the only thing that runs uv.  Its child environment has no ``VIRTUAL_ENV``,
``UV_NO_PROGRESS=1``, and ``UV_CACHE_DIR`` on the env root's filesystem (so uv can link
files instead of copying them).  A failure is an ``EnvBuildError`` carrying uv's reason.
"""

from __future__ import annotations

import re

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsbisect.core import proc
from dsbisect.core.errors import EnvBuildError
from dsbisect.core.model import IndexOptions
from dsbisect.core.outside import clip
from dsbisect.envs import network


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvBuildError("the uv binary was not found (pip install uv)") from None
        return found


@dataclass(frozen=True)
class Uv:
    cache: Path
    index: IndexOptions = IndexOptions()

    def run(self, args: Sequence[str]) -> str:
        """uv ``args``; what it printed (it reports what it would do on stderr).  A failure of the
        network (DNS, a reset, a server's 5xx) is tried again, said, before it is an EnvBuildError."""
        env = uv_env(proc.clean_env({"UV_NO_PROGRESS": "1", "UV_CACHE_DIR": str(self.cache), "DS_BUILD_OPS": "0"}))

        def once() -> str:
            done = proc.run([uv_bin(), *args], env=env)
            if not done.ok:
                raise EnvBuildError(reason(done.stderr or done.stdout or done.error))
            return done.output

        return network.retried(once, f"uv {' '.join(args[:2])}", network.uv_cause, (EnvBuildError,))

    def venv(self, path: Path, python: str) -> None:
        self.run(["venv", "--quiet", "--relocatable", "--python", python, str(path)])

    def install(self, venv: Path, reqs: Sequence[str], hold: Sequence[str] = (),
                extra_links: Sequence[str] = (), no_deps: bool = False) -> None:
        """Install ``reqs`` into ``venv`` from the index options; ``hold`` are constraints.

        Compiled to bytecode, as pip installs by default: each process of a run (the launcher,
        its launch step, every rank) would otherwise compile DeepSpeed's 750 modules again on
        every import where ``PYTHONDONTWRITEBYTECODE`` is set (containers often set it), and a
        package's SyntaxWarnings would show on first import where the user's pip-built env shows
        none."""
        args = ["pip", "install", "--compile-bytecode", "--python", str(venv / "bin" / "python"),
                *self.index.uv_args()]
        for d in extra_links:
            args += ["--find-links", d]
        if no_deps:
            args.append("--no-deps")
        if hold:
            cfile = venv / "dsbisect-hold.txt"
            cfile.write_text("\n".join(hold) + "\n")
            args += ["--constraint", str(cfile)]
        self.run(args + list(reqs))

    def dry_run(self, venv: Path, reqs: Sequence[str], hold: Sequence[str] = (),
                extra: Sequence[str] = ()) -> str:
        """What ``uv pip install`` would install into ``venv`` (its plan, as printed)."""
        args = ["pip", "install", "--dry-run", "--python", str(venv / "bin" / "python"), *extra,
                *self.index.uv_args()]
        if hold:
            cfile = venv / "dsbisect-hold.txt"
            cfile.write_text("\n".join(hold) + "\n")
            args += ["--constraint", str(cfile)]
        return self.run(args + list(reqs))


def uv_env(env: dict[str, str]) -> dict[str, str]:
    """uv sees only the index options dsbisect passes (resolved once: indexes.resolve), not its
    own index variables or configuration files again, so listing and installs agree."""
    from dsbisect.envs.indexes import uv_child_env

    return uv_child_env(env)


def reason(text: str) -> str:
    """The informative part of a resolver's or builder's error output, on one line (with what to
    do about a pin that a kept package's own requirement excludes: conflict_hint)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("hint:", "Using Python", "warning:"))]
    hint = conflict_hint(" ".join(lines)) + newer_hint(text)
    for i, ln in enumerate(keep):
        if ln.startswith(("×", "error:", "ERROR:")) or "No solution" in ln or "not found" in ln:
            return clip(" ".join(keep[i : i + 4]), 600) + hint
    return (clip(" ".join(keep[-3:]), 600) or "no output") + hint


_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_DEPENDS = re.compile(rf"Because (?P<a>{_NAME})==(?P<v>[^\s,]+) depends on (?P<b>{_NAME})(?P<spec>[<>=!~][^\s,]*)")


def conflict_hint(text: str) -> str:
    """'; torch==2.11.0 needs typing-extensions>=4.10.0, which the pins exclude: …' when uv's
    resolver says that a package it must keep (a base package such as torch, a held one) depends
    on a version of another package that is pinned to something else — a good environment of
    2023 layered on a current torch is the common case.  '' otherwise."""
    for m in _DEPENDS.finditer(text):
        b = m["b"]
        if re.search(rf"you require {re.escape(b)}==", text, re.IGNORECASE):
            return (f"; {m['a']}=={m['v']} needs {b}{m['spec']}, which the pins exclude: with --good-env/--bad-env, "
                    f"--hold {b} keeps the base's {b}; else pin a {b} that fits")
    return ""


_FILTERED = re.compile(r"`(?P<name>[^`]+)` was filtered by `exclude-newer`[^.]*\.(?: The latest version satisfying "
                       r"the requirement is (?P<v>\S+), published at (?P<at>\S+?)\.)?")


def newer_hint(text: str) -> str:
    """'; accelerate: nothing that fits was uploaded by then (the first: v0.20.0, 2023-06-07)' when
    uv says a package was filtered by ``--exclude-newer`` (a date before it existed); '' otherwise."""
    m = _FILTERED.search(" ".join(text.split()))
    if not m:
        return ""
    first = f" (its latest release that fits, {m['v']}, was uploaded {m['at'][:10]})" if m['v'] else ""
    return f"; {m['name']}: nothing that fits was uploaded by then{first}"
