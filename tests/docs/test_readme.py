"""README and docs as scripts (issue 23 item 6, issue 37): every ```bash block of README.md and of
the docs site's pages (docs/**/*.md, results/ aside: recorded data, not instructions) is a command
a user can paste.  The blocks parse as bash (``bash -n``), and each dsbisect line (``dsbisect``,
``.venv/bin/dsbisect``, ``srun … dsbisect``) parses as the CLI parses it: the subcommand exists,
every option it uses is one of that subcommand's, with a value where one is needed, and the
values convert (Click's own parse, as ``--help`` is built from; the command itself does not run).
Running the blocks for real (README command 1 builds venvs for minutes) is not this tier's job.

A page is read as one shell session: a ``cd`` in one block holds for the blocks after it (the
README's report block runs where its bisection block went), and each page starts at the root.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README] + sorted(p for p in DOCS.rglob("*.md") if "results" not in p.relative_to(DOCS).parts)
ELIDED = {"...", "…"}  # "the rest as before" in a README line


@dataclass(frozen=True)
class Line:
    page: str  # the file, relative to the repository root
    block: int
    text: str  # one shell command, continuations joined
    cwd: Path  # where it runs: the repository root, or where a `cd` of its block went


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def commands(blocks: list[str], page: str = "README.md") -> list[Line]:
    """Each block's commands: continuation lines joined, comments cut, split at && ; and |."""
    out = []
    cwd = ROOT
    for n, block in enumerate(blocks):
        for logical in block.replace("\\\n", " ").splitlines():
            lex = shlex.shlex(logical, posix=True, punctuation_chars=";&|<>")
            lex.whitespace_split, lex.commenters = True, "#"
            words, current = [], []
            for w in lex:
                if w in ("&&", ";", "||", "|"):
                    words.append(current)
                    current = []
                elif w in (">", "<"):
                    current.append(w)
                else:
                    current.append(w)
            words.append(current)
            for ws in words:
                ws = ws[: ws.index(">")] if ">" in ws else ws
                if ws and ws[0] == "cd":
                    cwd = (cwd / ws[1]).resolve()
                elif ws:
                    out.append(Line(page, n, shlex.join(ws), cwd))
    return out


def dsbisect_args(line: Line) -> list[str] | None:
    """The arguments after the dsbisect program of a line (None: not a dsbisect line)."""
    words = shlex.split(line.text)
    for i, w in enumerate(words):
        if w == "dsbisect" or w.endswith("/bin/dsbisect"):
            return [a for a in words[i + 1:] if a not in ELIDED]
    return None


def parse_cli(args: list[str], cwd: Path) -> str:
    """The subcommand ``args`` name, after Click parsed them as the CLI would (UsageError if not)."""
    import typer

    from dsbisect.cli import app

    top = typer.main.get_command(app)
    ctx = top.make_context("dsbisect", list(args), resilient_parsing=False)
    cmd, rest, names = top, _rest(ctx), []
    while hasattr(cmd, "get_command") and rest:
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"dsbisect {' '.join(names + rest[:1])}: no such command"
        names.append(rest.pop(0))
        cmd = sub
        old = Path.cwd()
        os.chdir(cwd)
        try:
            ctx = cmd.make_context(" ".join(["dsbisect", *names]), rest, parent=ctx)
        finally:
            os.chdir(old)
        rest = _rest(ctx) if hasattr(cmd, "get_command") else []
    return " ".join(names)


def _rest(ctx) -> list[str]:
    """A group's words left for its subcommand (Click 8.2 keeps the first in _protected_args)."""
    first = getattr(ctx, "_protected_args", None)
    return list(first if first is not None else getattr(ctx, "protected_args", [])) + list(ctx.args)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


LINES = [ln for page in PAGES for ln in commands(bash_blocks(page.read_text()), _name(page))]
DSB = [(ln, a) for ln in LINES if (a := dsbisect_args(ln)) is not None]


def test_the_readme_and_the_docs_have_their_examples():
    """The extraction finds them: the README's set-up and three flows, and the docs' many."""
    readme = [ln for ln, _ in DSB if ln.page == "README.md"]
    assert len(bash_blocks(README.read_text())) >= 4 and len(readme) >= 5
    assert len({ln.page for ln, _ in DSB}) >= 10 and len(DSB) >= 50


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_bash_block_is_valid_bash(tmp_path, page):
    for n, block in enumerate(bash_blocks(page.read_text())):
        script = tmp_path / f"block{n}.sh"
        script.write_text(block)
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{_name(page)} bash block {n + 1}: {done.stderr.strip()}"


@pytest.mark.parametrize("line,args", DSB, ids=[f"{ln.page}:{ln.block + 1}:{' '.join(a[:3])}" for ln, a in DSB])
def test_every_dsbisect_line_parses_as_the_cli_parses_it(line, args):
    try:
        from typer._click.exceptions import ClickException  # a typer that vendors click
    except ImportError:
        from click.exceptions import ClickException
    try:
        name = parse_cli(args, line.cwd)
    except ClickException as e:
        pytest.fail(f"{line.page}: {line.text}\n  (from {line.cwd}): {e.format_message()}")
    assert name, line.text


@pytest.mark.parametrize("args", [["bisect", "deepspeed", "0.1", "0.2", "--no-such-option"],
                                  ["bisect", "deepspeed", "0.1", "0.2", "--repeat"],
                                  ["bisect", "deepspeed", "0.1", "0.2", "--repeat", "many"],
                                  ["envs", "no-such-subcommand"]])
def test_the_check_bites_on_a_wrong_line(args):
    try:
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException
    with pytest.raises((ClickException, AssertionError)):
        parse_cli(args, ROOT)
