"""The command line's ``--help``, laid out for the terminal it is read on: nothing cut.

Typer's rich help puts an option's names, its negative names, its type and its help in columns
of one table; at 80 columns the table's minimum widths exceed the line and rich cuts what does
not fit (``--verify-commit…``, ``transformers==4.…``, ``[default: verify-commit-en…``).  Here
an option is a row of two columns, its names with the value they take (``--case NAME``) and its
help; a name wider than its column has the row to itself, the help on the lines below; help
wraps at spaces (a word wider than the column is broken, never dropped).  The panels are
typer's ``rich_help_panel`` of each option, the options with none first; flags take no
metavar; arguments read as the usage line writes them (``RUN_ID``, ``[GOOD]``).

Pure: click's objects in, rich renderables out (``cli`` prints them); no option is parsed here.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from enum import Enum

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

MAIN = "Options"
_KEEP = re.compile(r"\[(?:default|env): [^\]\s]*\]")  # kept on one line
NAME = "bold cyan"


def render(command, ctx, width: int, order: Sequence[str] = ()) -> Group:
    """The whole help of ``command`` (a click command or group) at ``width`` columns; ``order``:
    the panels' titles in the order they are shown (after ``MAIN``; others after them)."""
    width = max(40, width)
    parts: list[RenderableType] = [Text(""), _usage(command, ctx, width), Text("")]
    parts += _prose(command.help or "", width)
    args = [p for p in command.params if p.param_type_name == "argument"]
    if args:
        parts.append(_panel("Arguments", [(argument_label(a), argument_help(a)) for a in args], width))
    for title, options in panels(command, ctx, order):
        parts.append(_panel(title, [(option_label(o), option_help(o)) for o in options], width))
    subs = _commands(command, ctx)
    if subs:
        parts.append(_panel("Commands", subs, width, name_style=NAME))
    if command.epilog:
        parts += [Text(""), *_prose(command.epilog, width)]
    return Group(*parts)


def panels(command, ctx, order: Sequence[str] = ()) -> list[tuple[str, list]]:
    """The visible options by panel: the unpanelled ones (``MAIN``) first, then the panels in
    ``order``, then any other in the order its first option comes."""
    groups: dict[str, list] = {MAIN: [], **{title: [] for title in order}}
    for param in command.get_params(ctx):
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            groups.setdefault(getattr(param, "rich_help_panel", None) or MAIN, []).append(param)
    return [(title, opts) for title, opts in groups.items() if opts]


def option_label(param) -> str:
    """``--case NAME``, ``--output, -o FILE``, ``--prove / --no-prove`` (a flag takes no value)."""
    def order(names: Sequence[str]) -> list[str]:
        return sorted(names, key=lambda n: not n.startswith("--"))

    label = ", ".join(order(param.opts))
    if param.secondary_opts:
        label += " / " + ", ".join(order(param.secondary_opts))
    if not param.is_flag and not getattr(param, "count", False):
        label += f" {param.metavar or param.name.upper()}"
    return label


def option_help(param) -> str:
    """The option's help, then what it is when not given and the variable it reads."""
    text = " ".join((param.help or "").split())
    default = _default(param)
    if default:
        text += f" [default: {default}]"
    if param.envvar and getattr(param, "show_envvar", True):
        text += f" [env: {param.envvar if isinstance(param.envvar, str) else ', '.join(param.envvar)}]"
    return text.strip()


def _default(param) -> str:
    value = param.default
    if callable(value) or value is None or getattr(param, "show_default", None) is False:
        return ""
    if param.secondary_opts:  # an on/off pair: the name that is in force
        return param.opts[0] if value else param.secondary_opts[0]
    if param.is_flag or value == () or value == []:
        return ""
    return str(value.value if isinstance(value, Enum) else value)


def argument_label(param) -> str:
    name = param.metavar or param.name.upper()
    if param.metavar is None and param.nargs != 1:
        name += "..."
    return name


def argument_help(param) -> str:
    text = " ".join((getattr(param, "help", None) or "").split())
    return text + (" [required]" if param.required else "")


def usage_words(command, ctx) -> list[str]:
    """``[OPTIONS]`` and the arguments, as a user types them: ``RUN_ID``, ``[GOOD]``."""
    words = ["[OPTIONS]"] if any(p.param_type_name == "option" for p in command.get_params(ctx)) else []
    for p in command.params:
        if p.param_type_name != "argument":
            continue
        name = argument_label(p)
        words.append(name if p.required or name.startswith("[") else f"[{name}]")
    if _commands(command, ctx):
        words += ["COMMAND", "[ARGS]..."]
    return words


def _usage(command, ctx, width: int) -> Text:
    """The usage line, wrapped between words (``[-- COMMAND...]`` is one)."""
    head = f" Usage: {ctx.command_path} "
    lines = [""]
    for word in usage_words(command, ctx):
        if lines[-1] and len(head) + len(lines[-1]) + 1 + len(word) > width:
            lines.append("")
        lines[-1] += (" " if lines[-1] else "") + word
    text = Text(head, style="bold")
    text.append(lines[0])
    for line in lines[1:]:
        text.append("\n" + " " * len(head) + line)
    return text


def _prose(doc: str, width: int) -> list[Text]:
    """A docstring's paragraphs, wrapped; a paragraph after click's ``\\b`` keeps its lines (each
    too long one goes on, indented, on the next)."""
    out: list[Text] = []
    for para in doc.strip().split("\n\n"):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            for line in lines[1:]:
                indent = len(line) - len(line.lstrip())
                wrapped = textwrap.wrap(line.strip(), width=width - 2 - indent, subsequent_indent="    ",
                                        break_long_words=False, break_on_hyphens=False)
                out += [Text(" " + " " * indent + w) for w in wrapped]
        else:
            out += [Text(" " + w) for w in textwrap.wrap(" ".join(para.split()), width=width - 2)]
        out.append(Text(""))
    return out


def _commands(command, ctx) -> list[tuple[str, str]]:
    subs = getattr(command, "commands", None)
    if not subs:
        return []
    rows = []
    for name in command.list_commands(ctx):
        sub = subs[name]
        if not sub.hidden:
            first = (sub.help or "").strip().split("\n\n")[0]
            rows.append((name, " ".join(first.split())))
    return rows


def _panel(title: str, rows: Iterable[tuple[str, str]], width: int, name_style: str = NAME) -> Panel:
    rows = list(rows)
    inner = width - 4  # the border and one space of padding on each side
    column = min(max(len(name) for name, _ in rows) + 2, max(16, inner * 3 // 10))
    body = Text()
    for i, (name, help_) in enumerate(rows):
        if i:
            body.append("\n")
        lines = [w.replace("\0", " ") for w in textwrap.wrap(_KEEP.sub(lambda m: m[0].replace(" ", "\0"), help_),
                                                            width=inner - column, break_on_hyphens=False)] or [""]
        body.append(name, style=name_style)
        if len(name) + 2 > column:  # the name has the line to itself
            body.append("\n" + " " * column + lines[0])
        else:
            body.append(" " * (column - len(name)) + lines[0])
        for line in lines[1:]:
            body.append("\n" + " " * column + line)
    return Panel(body, title=title, title_align="left", border_style="dim", padding=(0, 1), width=width)
