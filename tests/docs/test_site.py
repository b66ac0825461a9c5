"""The docs site's generated pages (docs/mkdocs/hooks.py): the command reference names every
visible command and option of the real command line, the JSON page every pinned key of the
contract, the exit-code page every error kind.  The build itself (``mkdocs build --strict``) is
.ci/run's step; these check what the hooks generate, without a build.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("dsbisect_docs_hooks", ROOT / "docs/mkdocs/hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands():
    import typer

    from dsbisect.cli import app

    top = typer.main.get_command(app)
    out = []

    def walk(group, path):
        for name, cmd in group.commands.items():
            if not cmd.hidden:
                out.append((" ".join([*path, name]), cmd))
                if hasattr(cmd, "commands"):
                    walk(cmd, [*path, name])

    walk(top, [])
    return out


def test_the_command_reference_has_every_command_and_option(hooks):
    page = hooks.cli_reference()
    for name, cmd in _commands():
        assert f"## `dsbisect {name}`" in page, name
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}" in page or f"`{sorted(param.opts)[0]}" in page, (name, param.opts)
    assert "run-one" not in page  # hidden: the Slurm job's own command


def test_the_json_page_shows_the_contracts_keys(hooks):
    page = hooks.json_reference()
    for key in ('"first_bad"', '"regression"', '"variants"', '"changes"', '"bisections"', '"hang"'):
        assert key in page, key


def test_the_exit_code_page_lists_every_error_kind(hooks):
    from dsbisect.core import errors

    page = hooks.exit_codes()
    kinds = [n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.DsbisectError)]
    assert kinds and all(f"| `{k}` |" in page for k in kinds)
    assert "| `not-reproduced` | 1 |" in page and "| `found` | 0 |" in page


def test_a_link_to_a_repository_file_is_served_and_a_missing_one_is_not(hooks):
    assert hooks._outside_target("how-to/x.md", "../../repro_scripts/byo/train.py") == "repro_scripts/byo/train.py"
    assert hooks._outside_target("how-to/x.md", "../benchmarks.md") is None  # inside docs/
    assert hooks._outside_target("x.md", "https://example.org/a") is None
    rewritten = hooks._rewrite_links("see [t](../../repro_scripts/byo/train.py#L3)", "how-to/x.md")
    assert rewritten == "see [t](../repo/repro_scripts/byo/train.py#L3)"
