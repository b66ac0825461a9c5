"""Issue 35: the command line is thin.  Each command parses, calls one domain function, prints and
maps the exit code: it reads no store, venv, index or clone itself (the packages below the
domain entry points are not imported by ``cli/*``), and no command function is long.  Options
shared by several commands are declared once and reach the command as frozen groups; Typer sees
them flat, in the groups' order."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from dsbisect.cli import app
from dsbisect.cli.groups import build, grouped, options
from dsbisect.cli.options import LimitOpts, NodeOpts, SettingsOpts, Shown, SourceOpts
from dsbisect.run.settings import Limits, Settings

CLI = Path(__file__).resolve().parents[2] / "src" / "dsbisect" / "cli"

# What cli/* may import of dsbisect: the values of core, the domain entry points, every renderer.
ALLOWED = {"dsbisect", "dsbisect.cli", "dsbisect.core", "dsbisect.records", "dsbisect.run.session",
           "dsbisect.run.settings", "dsbisect.run.sweep", "dsbisect.run.upkeep", "dsbisect.run.slurm",
           "dsbisect.bisect.jobs", "dsbisect.bisect.marking", "dsbisect.bisect.marks", "dsbisect.envdiff.jobs",
           "dsbisect.offline.wheelhouse", "dsbisect.offline.prefetch", "dsbisect.render"}
# Below them, never from the CLI: what the domain functions read and decide.
FORBIDDEN = ("dsbisect.store", "dsbisect.envs", "dsbisect.forensics", "dsbisect.launch", "dsbisect.search",
             "dsbisect.verdict", "dsbisect.render.htmlsource", "dsbisect.run.matrix", "dsbisect.run.runner")


def _imported(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsbisect"):
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("dsbisect")]
    return found


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_the_cli_imports_only_domain_entry_points(path):
    for line, name in _imported(path):
        assert not name.startswith(FORBIDDEN), f"cli/{path.name}:{line} imports {name}"
        assert any(name == a or name.startswith(a + ".") for a in ALLOWED), f"cli/{path.name}:{line} imports {name}"


def _callbacks():
    def walk(group):
        for name, sub in group.commands.items():
            yield from walk(sub) if hasattr(sub, "commands") else [(name, sub.callback)]
    return list(walk(typer.main.get_command(app)))


@pytest.mark.parametrize("name, callback", _callbacks(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_function_is_short(name, callback):
    """Parse, call one domain function, print, map the exit code: about 40 lines, docstring included."""
    func = inspect.unwrap(callback)
    lines, _ = inspect.getsourcelines(func)
    body = [ln for ln in lines if not ln.lstrip().startswith("@")]
    assert len(body) <= 42, f"{name}: {len(body)} lines"
    assert len(inspect.signature(func).parameters) <= 8, f"{name}: {len(inspect.signature(func).parameters)} parameters"


def test_the_settings_groups_are_the_domain_values_with_their_options():
    made = build(SettingsOpts, {p.name: p.default for p in options(SettingsOpts)} | {"timeout": 5.0, "jobs": 3})
    assert isinstance(made, Settings) and isinstance(made.limits, Limits)
    assert made.limits.timeout == 5.0 and made.placement.jobs == 3 and made.store == Path(".dsbisect")
    names = [p.name for p in options(SettingsOpts)]
    assert names[:5] == ["store", "timeout", "collective_timeout", "idle_timeout", "no_early_hang"]
    assert names[-6:] == ["hostfile", "num_nodes", "launcher_backend", "master_addr", "include", "exclude"]


@dataclass(frozen=True)
class _Inner:
    b: Annotated[int, typer.Option("--b")] = 2


@dataclass(frozen=True)
class _Outer:
    a: Annotated[Optional[str], typer.Argument()] = None
    inner: _Inner = field(default_factory=_Inner)
    c: Annotated[bool, typer.Option("--c")] = False


def test_a_command_receives_its_groups_and_typer_sees_flat_options_in_order():
    got = []

    @grouped
    def command(first: int, *, outer: _Outer, shown: Shown) -> None:
        got.append((first, outer, shown))

    params = inspect.signature(command).parameters
    assert list(params) == ["first", "a", "b", "c", "fmt", "output", "quiet"]
    assert params["b"].default == 2 and params["first"].annotation is int
    command(first=1, a="x", b=3, c=True, fmt=Shown().fmt, output=None, quiet=True)
    assert got == [(1, _Outer("x", _Inner(3), True), Shown(quiet=True))]
    one = typer.Typer()
    one.command()(command)
    res = CliRunner().invoke(one, ["7", "y", "--b", "4", "-q"])
    assert res.exit_code == 0, res.output
    assert got[-1] == (7, _Outer("y", _Inner(4), False), Shown(quiet=True))


def test_a_group_field_without_an_option_and_a_name_given_twice_are_refused():
    @dataclass(frozen=True)
    class Bare:
        x: int = 1

    with pytest.raises(TypeError, match="Bare.x: a group's field needs an Annotated option"):
        options(Bare)

    def twice(*, limits: LimitOpts, again: LimitOpts) -> None: ...

    with pytest.raises(TypeError, match="named twice: .*timeout"):
        grouped(twice)
    assert [p.name for p in options(SourceOpts)] == ["offline", "find_links", "index_url", "extra_index_url"]
    assert [p.name for p in options(NodeOpts)][0] == "hostfile"
