"""Option groups: a command receives frozen dataclasses, Typer sees flat options.

A command parameter whose type is a dataclass (a *group*) stands for the options of its fields,
in field order, each field annotated with an ``Annotated`` alias of ``cli.options`` (or of the
command's module); a field whose type is itself a group stands for that group's options.
``grouped`` gives Typer the flat signature and hands the command its groups, built from the
parsed values; ``build`` does the same for a dict of parsed values (a replayed mark line).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
G = TypeVar("G")


def is_group(annotation: object) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def options(group: type) -> list[inspect.Parameter]:
    """The flat options a group stands for (keyword-only parameters, with the fields' defaults)."""
    hints = typing.get_type_hints(group, include_extras=True)
    out: list[inspect.Parameter] = []
    for f in dataclasses.fields(group):
        hint = hints[f.name]
        if is_group(hint):
            out += options(hint)
            continue
        if not hasattr(hint, "__metadata__"):
            raise TypeError(f"{group.__name__}.{f.name}: a group's field needs an Annotated option or argument")
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else inspect.Parameter.empty)
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
    return out


def build(group: type[G], values: Mapping[str, Any]) -> G:
    """The group (and the groups in it) made of the parsed ``values`` of its options."""
    hints = typing.get_type_hints(group, include_extras=True)
    made = {f.name: build(hints[f.name], values) if is_group(hints[f.name]) else values[f.name]
            for f in dataclasses.fields(group)}
    return group(**made)


def grouped(command: F) -> F:
    """``command`` with each group parameter replaced by its options in the signature Typer reads;
    called, it builds the groups from those options and passes them on."""
    signature = inspect.signature(command, eval_str=True)
    flat: list[inspect.Parameter] = []
    groups: dict[str, type] = {}
    for p in signature.parameters.values():
        if is_group(p.annotation):
            groups[p.name] = p.annotation
            flat += options(p.annotation)
        else:
            flat.append(p)
    names = [p.name for p in flat] + list(groups)
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise TypeError(f"{command.__name__}: options named twice: {', '.join(doubled)}")

    @functools.wraps(command)
    def with_groups(*args: Any, **values: Any) -> Any:
        made = {name: build(group, values) for name, group in groups.items()}
        rest = {k: v for k, v in values.items() if k in signature.parameters}
        return command(*args, **rest, **made)

    with_groups.__signature__ = signature.replace(parameters=flat)  # type: ignore[attr-defined]
    with_groups.__annotations__ = {p.name: p.annotation for p in flat}
    return typing.cast(F, with_groups)
