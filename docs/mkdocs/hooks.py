"""MkDocs hooks: the parts of the docs site that are generated at build time, so they cannot drift.

- ``<!-- generated: cli -->`` in a page becomes the reference of every command and option, read
  from dsbisect's own command line (the Click tree Typer builds, laid out by
  ``dsbisect.cli.helptext``, the same functions ``--help`` uses; panels in ``--help``'s order).
- ``<!-- generated: json -->`` becomes the ``--format json`` shapes, read from the trees that
  ``tests/cli/test_contract.py`` pins on real runs.
- ``<!-- generated: exit-codes -->`` becomes the table of error kinds and bisection verdicts
  with the exit code the code gives each (``dsbisect.core.errors``, ``Answer.exit_code``).
- ``<!-- generated: package-map -->`` becomes the README's map of the packages (the fenced block
  after its ``<!-- package-map -->`` comment, which ``tests/test_layers.py`` checks).
- A link from a page to a file of the repository outside ``docs/`` (``../repro_scripts/x.py``)
  is served: the file is copied into the site under ``repo/`` and the link points there. A link
  to a repository file that does not exist is a warning, so ``mkdocs build --strict`` fails.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import posixpath
import re
import subprocess
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.dsbisect")

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
CONTRACT = ROOT / "tests" / "cli" / "test_contract.py"
REPO_PREFIX = "repo"  # where linked repository files are served in the site

# A Markdown link or image target: ](target) or ](target "title"); not http:, not #anchor.
LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\))")


# ------------------------------------------------------------------ repository files


def _tracked() -> set[str]:
    """The repository's tracked files (paths relative to its root); all files when not a git tree."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return set(out.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()}


def _outside_target(page_src: str, target: str) -> str | None:
    """The repository path a page's relative link names when it leaves docs/ (else None)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/") or target.endswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src), target))
    if joined.startswith("..") or joined == "docs" or joined.startswith("docs/"):
        return None
    return joined


def on_files(files: Files, config) -> Files:
    """Serve every repository file a page links to, under repo/; a link to a missing one warns."""
    tracked = _tracked()
    wanted: dict[str, str] = {}
    for f in files.documentation_pages():
        for m in LINK.finditer(Path(f.abs_src_path).read_text(encoding="utf-8")):
            path = _outside_target(f.src_uri, m[2])
            if path is None:
                continue
            if path in tracked and (ROOT / path).is_file():
                wanted[path] = str(ROOT / path)
            else:
                log.warning("%s links %s, which is not a file of the repository", f.src_uri, m[2])
    for path, abs_path in sorted(wanted.items()):
        files.append(File.generated(config, f"{REPO_PREFIX}/{path}", abs_src_path=abs_path))
    return files


def _rewrite_links(markdown: str, page_src: str) -> str:
    def swap(m: re.Match) -> str:
        path = _outside_target(page_src, m[2])
        if path is None:
            return m[0]
        here = posixpath.dirname(page_src) or "."
        return m[1] + posixpath.relpath(f"{REPO_PREFIX}/{path}", here) + m[3]

    return LINK.sub(swap, markdown)


# ------------------------------------------------------------------ the command line


def _cell(text: str) -> str:
    """Help text made safe for a Markdown table cell (backticked spans kept as code)."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part.replace("|", "\\|"))
        else:
            out.append(part.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;").replace("|", "\\|"))
    return "".join(out)


def _code(text: str) -> str:
    return "`` " + text.replace("|", "\\|") + " ``" if "`" in text else "`" + text.replace("|", "\\|") + "`"


def _help_prose(doc: str) -> list[str]:
    """A command's docstring: paragraphs as text, click's ``\\b`` blocks as code blocks."""
    out: list[str] = []
    for para in doc.strip().split("\n\n"):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            out += ["```text", *[ln.rstrip() for ln in lines[1:]], "```", ""]
        else:
            out += [_cell(para), ""]
    return out


def _rendered_help(top, path: list[str]) -> str:
    """What ``dsbisect PATH --help`` prints (run in process; it also sets --help's metavars)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        top.main([*path, "--help"], standalone_mode=False)
    return buf.getvalue()


def _command_md(top, cmd, ctx, path: list[str], helptext) -> list[str]:
    order = re.findall(r"╭─ (.+?) ─", _rendered_help(top, path))
    title = " ".join(["dsbisect", *path])
    out = [f"## `{title}`" if path else "## `dsbisect` (global options)", ""]
    out += ["```text", " ".join([title, *helptext.usage_words(cmd, ctx)]), "```", ""]
    out += _help_prose(cmd.help or "")
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    if args:
        out += ["| argument | meaning |", "|---|---|"]
        out += [f"| {_code(helptext.argument_label(a))} | {_cell(helptext.argument_help(a))} |" for a in args]
        out.append("")
    for panel, options in helptext.panels(cmd, ctx, [t for t in order if t not in ("Arguments", "Commands")]):
        out += [f"**{panel}**", "", "| option | meaning |", "|---|---|"]
        out += [f"| {_code(helptext.option_label(o))} | {_cell(helptext.option_help(o))} |" for o in options]
        out.append("")
    if cmd.epilog:
        out += _help_prose(cmd.epilog)
    return out


def cli_reference() -> str:
    """Every visible command of dsbisect, its arguments and its options, from the CLI itself."""
    import typer

    from dsbisect.cli import app, helptext

    top = typer.main.get_command(app)
    _rendered_help(top, [])
    root_ctx = top.context_class(top, info_name="dsbisect")
    out = _command_md(top, top, root_ctx, [], helptext)

    def walk(group, ctx, path):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            sub_ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
            out.extend(_command_md(top, cmd, sub_ctx, [*path, name], helptext))
            if hasattr(cmd, "list_commands"):
                walk(cmd, sub_ctx, [*path, name])

    walk(top, root_ctx, [])
    return "\n".join(out)


# ------------------------------------------------------------------ --format json


def _contract() -> dict:
    """The module-level trees of tests/cli/test_contract.py, evaluated without importing the test
    module (its fixtures need the tests' toy packages): literal assignments and ``_run`` only."""
    tree = ast.parse(CONTRACT.read_text(encoding="utf-8"))
    keep = [n for n in tree.body if (isinstance(n, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id.isupper() for t in n.targets)) or (
        isinstance(n, ast.FunctionDef) and n.name == "_run")]
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(CONTRACT), "exec"), namespace)  # noqa: S102
    return namespace


def _shape(spec, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, tuple):
        lines: list[str] = []
        for i, s in enumerate(spec):
            sub = _shape(s, indent)
            if i:
                sub[0] = "| " + sub[0]
            lines = lines[:-1] + [lines[-1] + " " + sub[0]] + sub[1:] if lines else sub
        return lines
    if isinstance(spec, list):
        inner = _shape(spec[0], indent)
        return ["[" + inner[0], *inner[1:-1], inner[-1] + "]"] if len(inner) > 1 else [f"[{inner[0]}]"]
    lines = ["{"]
    for key, value in spec.items():
        sub = _shape(value, indent + 1)
        name = "(any key)" if key == "*" else (f'"{key[:-1]}"?' if key.endswith("?") else f'"{key}"')
        lines.append(f"{pad}  {name}: {sub[0]}")
        lines += sub[1:]
    lines.append(pad + "}")
    return lines


def _block(spec) -> str:
    return "```text\n" + "\n".join(_shape(spec)) + "\n```\n"


def json_reference() -> str:
    c = _contract()
    runs = c["RUN_BY_OUTCOME"]
    parts = ["### `run --format json` and `report --format json`", "",
             "The grid (`run`; `report` adds `bisections`, below):", "", _block(c["GRID"]),
             "Each element of `runs`, a passing run:", "", _block(runs["pass"])]
    for outcome in ("fail", "hang", "skip"):
        differs = {k: v for k, v in runs[outcome].items() if runs["pass"].get(k) != v}
        parts += [f"A run whose outcome is `{outcome}` differs in:", "", _block(differs)]
    extra = {k: v for k, v in c["REPORT"].items() if k not in c["GRID"]}
    parts += ["`report --format json` adds:", "", _block(extra),
              "### `bisect --format json` (releases, then commits)", "", _block(c["BISECT"]),
              "### `diff --format json`", "", _block(c["DIFF"]),
              "### `bisect --good-config/--bad-config --format json`: a setting among `env_diff.changes`", "",
              _block(c["SETTING_CHANGE"]),
              "### `log`", "", "Its header lines match these patterns (from the contract's toy bisection):", "",
              "```text", *c["LOG_HEADER"], "```", "", "then one line per run the bisection used:", "",
              "```text", c["LOG_MARK"], "```", ""]
    return "\n".join(parts)


# ------------------------------------------------------------------ exit codes


def exit_codes() -> str:
    import inspect

    from dsbisect.core import errors
    from dsbisect.core.model import Answer

    rows = ["| error kind | exit code | what it is |", "|---|---|---|"]
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.DsbisectError) and cls.__module__ == errors.__name__:
            doc = " ".join((cls.__doc__ or "").split())
            code = "128 + the signal" if cls is errors.Interrupted else str(cls.exit_code)
            rows.append(f"| `{name}` | {code} | {_cell(doc)} |")
    rows += ["", "| bisection verdict | exit code |", "|---|---|"]
    rows += [f"| `{a.value}` | {a.exit_code} |" for a in Answer]
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------ the package map


def package_map() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- package-map -->\s*\n(```\n.*?\n```)\n", text, flags=re.S)
    if m is None:
        log.warning("README.md: no fenced block after <!-- package-map -->")
        return ""
    return m[1] + "\n"


# ------------------------------------------------------------------ the hook

GENERATORS = {"cli": cli_reference, "json": json_reference, "exit-codes": exit_codes, "package-map": package_map}
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def fill(m: re.Match) -> str:
        make = GENERATORS.get(m[1])
        if make is None:
            log.warning("%s: no generator named %r", page.file.src_uri, m[1])
            return m[0]
        return make()

    return _rewrite_links(MARKER.sub(fill, markdown), page.file.src_uri)
