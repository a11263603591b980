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


# The top packages (docs/architecture.md, "Three layers"): moe_suite below the rest; moe_bench
# reads results and imports neither the suite's folders nor, where it judges and reports, the
# library.

#: The packages of the checkout whose imports are held here, each a folder of ROOT.
TOP = ("moe_suite", "moe_bench", "benchmarks", "engine_benchmarks")
#: What each may not import, anywhere (a function's import too).
FORBIDDEN = {
    "moe_suite": {"moe_convert", "moe_bench", "benchmarks", "engine_benchmarks"},
    "moe_bench": {"benchmarks", "engine_benchmarks"},
    "benchmarks": {"moe_bench"},
    "engine_benchmarks": {"moe_bench"},
}
#: What needs torch: where it is not installed, neither imports.
LIBRARY = {"torch", "moe_convert"}
#: ``moe-bench``'s subcommands that read committed results where torch is not installed: their
#: modules, and every module of moe_bench they import at module level.
READERS = ("moe_bench.cli", "moe_bench.report", "moe_bench.gate", "moe_bench.compare")
READERS += ("moe_bench.publish",)


def _top_modules() -> dict[str, Path]:
    found = {}
    for package in TOP:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(module: str, path: Path) -> list[tuple[str, bool]]:
    """Every import of ``module`` (its file ``path``): ``(absolute dotted name, whether it runs
    at import)``, a ``from X import name`` giving ``X.name`` (a module or not); an import in a
    function or under ``if TYPE_CHECKING:`` does not run at import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    deferred = set()
    for node in ast.walk(tree):
        checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if checking or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            deferred |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".")[
                : len(module.split(".")) - node.level + path.match("*/__init__.py")
            ]
            prefix = (
                ".".join([*base, *([node.module] if node.module else [])])
                if node.level
                else node.module
            )
            names = [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(name, id(node) not in deferred) for name in names]
    return found


def test_the_top_packages_import_only_below_them():
    wrong = [
        (module, name)
        for module, path in _top_modules().items()
        for name, _ in _imported(module, path)
        if name.partition(".")[0] in FORBIDDEN[module.partition(".")[0]]
    ]
    assert wrong == []


def test_the_readers_of_results_and_moe_suite_import_no_torch_at_import():
    """``READERS`` and every module of moe_bench they import at import time (with the packages
    that hold them), and every module of ``moe_suite``, import neither torch nor the library
    but inside a function: tests/test_without_torch.py runs them so."""
    modules = _top_modules()
    seen, todo = set(), [*READERS, *(m for m in modules if m.startswith("moe_suite"))]
    while todo:
        module = todo.pop()
        if module in seen or module not in modules:
            continue
        seen.add(module)
        for name, at_import in _imported(module, modules[module]):
            parts = name.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)] if at_import else []
    assert {"moe_bench.rankload", "moe_bench.plots", "moe_suite.loadtime"} <= seen
    wrong = [
        (module, name)
        for module in sorted(seen)
        for name, at_import in _imported(module, modules[module])
        if at_import and name.partition(".")[0] in LIBRARY
    ]
    assert wrong == []
