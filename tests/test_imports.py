"""The library's import graph (docs/architecture.md, "moe_convert, by concern"): no module of
``moe_convert`` imports one that imports it back, directly or through others, counting every
import statement (``TYPE_CHECKING`` blocks too, so that no guard hides a circle), and none imports
another of the package inside a function (the way to dodge a circle at import time). A
package's ``__init__`` is its front door, not a dependency: an import of the package itself is
left out, as Python runs it first whatever is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "moe_convert"


def _modules() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package's modules an import statement of ``module`` names (a ``from X import name``
    names module ``X.name`` where that is a module, else ``X``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = module.split(".")
        if node.level:
            base = base[: len(base) - node.level + (module in PACKAGES)]
            prefix = ".".join([*base, *([node.module] if node.module else [])])
        else:
            prefix = node.module or ""
        names = [
            f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in MODULES else prefix
            for alias in node.names
        ]
    return [name for name in names if name in MODULES]


def _imports() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """Each module's imports of the package's modules (packages left out), and every import of
    one made inside a function: ``(module, imported, line)``."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    in_functions = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        functions = (
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        )
        inner = {id(node) for function in functions for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(module, node):
                    if id(node) in inner:
                        in_functions.append((module, target, node.lineno))
                    elif target not in PACKAGES:
                        graph[module].add(target)
    return graph, in_functions


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target, [*path, target])):
                return found
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return None


def test_the_package_has_no_import_circle():
    graph, _ = _imports()
    assert _circle(graph) is None, " -> ".join(_circle(graph))


def test_no_module_imports_the_package_inside_a_function():
    _, in_functions = _imports()
    assert in_functions == [], in_functions


@pytest.mark.parametrize(
    ("graph", "circle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"c"}}, ["c", "c"]),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_a_circle_is_found(graph, circle):
    assert _circle(graph) == circle


def test_the_graph_sees_relative_type_checking_and_function_imports(tmp_path, monkeypatch):
    """The reader itself: a ``TYPE_CHECKING`` import is an edge, a function's import is
    reported, a relative import resolves from a package and from a module."""
    source = {
        "moe_convert/__init__.py": "",
        "moe_convert/sub/__init__.py": "from . import b\n",
        "moe_convert/sub/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .b import X\n",
        "moe_convert/sub/b.py": "from ..c import Y\n",
        "moe_convert/c.py": "def f():\n    from .sub import a\n",
    }
    for name, text in source.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (tmp_path / "moe_convert").rglob("*.py")
    }
    monkeypatch.setitem(globals(), "MODULES", modules)
    monkeypatch.setitem(globals(), "PACKAGES", {"moe_convert", "moe_convert.sub"})
    graph, in_functions = _imports()
    assert graph["moe_convert.sub.a"] == {"moe_convert.sub.b"}
    assert graph["moe_convert.sub.b"] == {"moe_convert.c"}
    assert graph["moe_convert.sub"] == {"moe_convert.sub.b"}
    assert in_functions == [("moe_convert.c", "moe_convert.sub.a", 2)]
