"""The house: ``src/dsbisect`` is one package per concept, and imports point one way only.

The order below is the map in the README's Development section and in each package's
``__init__``; a package may import only those before it. A module of a package may import any
module of its own package. Checked on the source text (every ``import`` and ``from ... import``,
also those inside functions), so that a late import cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dsbisect"
README = Path(__file__).resolve().parents[1] / "README.md"

# Lowest first. A package may import the ones before it, never one after it.
ORDER = ["core", "search", "verdict", "records", "store", "forensics", "launch", "envs", "run",
         "bisect", "envdiff", "offline", "render", "cli"]


def _package(path: Path) -> str | None:
    rel = path.relative_to(SRC).parts
    return rel[0] if len(rel) > 1 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, the dsbisect package) of each import of another dsbisect module in ``path``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import (write it whole)"
            mod = node.module or ""
            if mod == "dsbisect":
                found += [(node.lineno, a.name) for a in node.names if not a.name.startswith("__")]
            elif mod.startswith("dsbisect."):
                found.append((node.lineno, mod.split(".")[1]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names if a.name.startswith("dsbisect.")]
    return found


def _modules():
    return sorted(p for p in SRC.rglob("*.py") if "_hook" not in p.parts)


def test_every_package_is_on_the_map_and_every_module_in_a_package():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"_hook"} == set(ORDER)
    loose = {p.name for p in SRC.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py"}, "a module outside every package"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path):
    own = _package(path)
    if own is None:
        return
    rank = ORDER.index(own)
    for line, pkg in _imports(path):
        assert pkg in ORDER, f"{path.name}:{line} imports dsbisect.{pkg}, which is not a package on the map"
        assert ORDER.index(pkg) <= rank, (
            f"{own}/{path.name}:{line} imports {pkg}, which is above {own} (order: {' < '.join(ORDER)})")


def test_each_package_says_what_it_owns_and_what_it_may_import():
    for name in ORDER:
        doc = ast.get_docstring(ast.parse((SRC / name / "__init__.py").read_text())) or ""
        assert "Imports:" in doc, f"{name}/__init__.py does not say what it may import"


def _defined(tree) -> set[str]:
    """The names a module defines itself (functions, classes, methods, attributes it assigns)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def test_no_private_name_is_used_across_modules():
    """``from dsbisect.x.y import _name``, or ``something._name`` where ``_name`` is not this
    module's own: a private reach-in (a public function, or another home, is wanted)."""
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        own = _defined(tree)
        outside = set()  # third-party modules: torch._dynamo is theirs to name
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                outside |= {(a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("dsbisect")}
            elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("dsbisect"):
                outside |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                offenders += [f"{path.relative_to(SRC)}:{node.lineno} imports {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            if isinstance(node.value, ast.Call) and _root(node.value) == "super":
                continue
            if node.attr in own or _root(node) in outside:
                continue
            offenders.append(f"{path.relative_to(SRC)}:{node.lineno} uses .{node.attr}")
    assert not offenders, "\n".join(offenders)


def _imported_names(tree) -> dict[str, str]:
    """The names a module imports from other dsbisect modules -> that module (``dsbisect.run.runner``)."""
    return {a.asname or a.name: node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsbisect.") for a in node.names}


def _privates_of(module: str, cls: str) -> set[str]:
    """The private names (``_x``, not dunders) class ``cls`` of ``module`` defines: methods and attributes."""
    path = SRC.joinpath(*module.split(".")[1:]).with_suffix(".py")
    found = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef) and n.name == cls] \
        if path.exists() else []
    names = {sub.name for n in found for sub in ast.walk(n) if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {sub.attr for n in found for sub in ast.walk(n) if isinstance(sub, ast.Attribute)
              and isinstance(sub.ctx, ast.Store)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _typed(annotation, imported: dict[str, str]) -> bool:
    return annotation is not None and any(isinstance(n, ast.Name) and n.id in imported for n in ast.walk(annotation))


def _typed_fields(cls: ast.ClassDef, imported: dict[str, str]) -> set[str]:
    """The attributes of ``cls`` whose type is another module's class: its annotated fields, and
    what ``__init__`` assigns from an annotated parameter (``self.runner = runner``)."""
    fields = {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
              and _typed(s.annotation, imported)}
    for init in (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"):
        params = {a.arg for a in init.args.args if _typed(a.annotation, imported)}
        for node in (n for n in ast.walk(init) if isinstance(n, ast.Assign)):
            for target in node.targets:
                targets = target.elts if isinstance(target, ast.Tuple) else [target]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                fields |= {t.attr for t, v in zip(targets, values) if isinstance(t, ast.Attribute)
                           and isinstance(v, ast.Name) and v.id in params}
    return fields


def _private(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")


def _reach_ins(path: Path) -> list[str]:
    """What the name test cannot see: a subclass of another module's class that overrides or
    uses its privates (``self._x``, ``super()._x``), and ``param._x`` or ``self.attr._x`` where
    the parameter or attribute is typed with another module's class."""
    tree = ast.parse(path.read_text())
    imported, where, out = _imported_names(tree), path.relative_to(SRC), []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for base in (b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in imported):
            theirs = _privates_of(imported[base], base)
            out += [f"{where}:{n.lineno} overrides {base}.{n.name}" for n in ast.walk(cls)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in theirs]
            out += [f"{where}:{n.lineno} uses {base}.{n.attr}" for n in ast.walk(cls) if _private(n) and n.attr in theirs]
        fields = _typed_fields(cls, imported)
        out += [f"{where}:{n.lineno} uses self.{n.value.attr}.{n.attr}" for n in ast.walk(cls) if _private(n)
                and isinstance(n.value, ast.Attribute) and n.value.attr in fields
                and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"]
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        params = {a.arg for a in (*fn.args.args, *fn.args.kwonlyargs) if _typed(a.annotation, imported)}
        out += [f"{where}:{n.lineno} uses {n.value.id}.{n.attr}" for n in ast.walk(fn) if _private(n)
                and isinstance(n.value, ast.Name) and n.value.id in params]
    return out


def test_no_private_is_reached_through_a_subclass_or_a_typed_object():
    """A class of another module is composed through its public names: neither subclassed to
    override or call its privates (``class _Trials(Bisection)`` overriding ``_label``), nor
    reached into through a typed parameter or attribute (``store._tx``, ``self.runner._ports``)."""
    offenders = [line for path in _modules() for line in _reach_ins(path)]
    assert not offenders, "\n".join(offenders)


def test_the_reach_in_check_sees_what_it_is_for(tmp_path, monkeypatch):
    """The check above on a module written for it: each kind of reach-in is found."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "base.py").write_text("class Base:\n    def _hook(self):\n        self._x = 1\n")
    (tmp_path / "bisect").mkdir()
    (tmp_path / "bisect" / "sub.py").write_text(
        "from dsbisect.run.base import Base\n"
        "class Sub(Base):\n    def _hook(self):\n        return super()._hook()\n"
        "class Holder:\n    base: Base\n    def f(self):\n        return self.base._x\n"
        "def g(b: Base):\n    return b._x\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    found = _reach_ins(tmp_path / "bisect" / "sub.py")
    assert found == ["bisect/sub.py:3 overrides Base._hook", "bisect/sub.py:4 uses Base._hook",
                     "bisect/sub.py:8 uses self.base._x", "bisect/sub.py:10 uses b._x"], found


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The dsbisect modules ``path`` imports (dotted, without ``dsbisect.``), also those inside
    functions and under ``TYPE_CHECKING``: a late or type-only import is still an arrow.  ``from
    dsbisect.pkg import module`` is an arrow to the module; a package's ``__init__`` only where a
    name is taken from it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsbisect."):
            base = node.module.removeprefix("dsbisect.")
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("dsbisect.") for a in node.names if a.name.startswith("dsbisect.")}
    return found


def _module_graph() -> dict[str, set[str]]:
    names = {".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p for p in _modules()}
    return {n: {m for m in _module_imports(p, set(names)) if m in names and m != n} for n, p in names.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((m for m in edges if m not in index or m in on), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            if nxt is not None:
                low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    part.append(m)
                    if m == node:
                        break
                if len(part) > 1:
                    out.append(sorted(part))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


def test_no_two_modules_import_each_other_even_late():
    """Inside a package too, imports point one way: no loop of modules, counting the imports
    made inside functions and for type checking only (a late import hides a loop, not removes it)."""
    assert _circles(_module_graph()) == []


def test_the_circle_check_sees_a_circle():
    assert _circles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "b": {"a.x"}}) == [["a.x", "a.y", "a.z"]]
    assert _circles({"a.x": {"a.y"}, "a.y": set()}) == []


def test_the_readme_shows_the_packages_in_their_order():
    text = README.read_text()
    shown = re.findall(r"^\s*(\w+)/\s", text, flags=re.M)
    on_map = [p for p in shown if p in ORDER]
    assert on_map == ORDER, f"README's package map: {on_map}"


LONGEST = 60  # lines of a function, its signature and docstring included (STYLE.md: under ~40, never over 60)


def test_no_function_is_over_60_lines():
    """A function longer than a screen does more than one thing (issue 35: the CLI's bisect was 100)."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
