"""Every exact figure of the suite, computed as asv computes it but without asv: for a change that
must move none of them (a refactor of the library), dump them at two commits and diff the dumps.

::

    python -m benchmarks.exact dump OUT.json [-b REGEX]   # the figures of the library imported
    python -m benchmarks.exact diff BEFORE.json AFTER.json  # every difference; exit 1 if any

A figure is exact where ``moe_suite.metrics`` says so (peaks, traffic, launches, driver calls,
OOM layers, experts). Each benchmark module's classes are run as asv runs them: ``setup_cache``
once per function (asv keys it by its definition, so the formats' classes share one), then
``setup`` and each exact ``track_`` method per parameter combination. A skipped cell is recorded
as ``n/a: <reason>``, a failed one as ``failed: <error>``, so a cell that stops running is a
difference too. ``benchmarks/`` copes with a library that lacks newer names (asv measures old
commits with it), so the dump of an older commit runs this file against that commit's library:
put its ``moe_convert`` first on the path (run from a checkout of it with this ``benchmarks/``).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import itertools
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

from moe_suite.metrics import EXACT, METRICS

__all__ = ["diff", "dump"]


def _benchmark_classes() -> list[tuple[str, type]]:
    """``(module.Class, class)`` of every benchmark class of the suite's ``bench_*`` modules, as
    asv names them (a class holding a ``track_`` method, defined in, or made for, its module)."""
    package = importlib.import_module("benchmarks")
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.name.startswith("bench_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                found.append((f"{info.name}.{name}", cls))
    return found


def _exact_methods(qualname: str, cls: type, pattern: re.Pattern[str]) -> list[str]:
    names = [n for n in dir(cls) if n.startswith("track_")]
    return [
        n
        for n in names
        if (f"{qualname}.{n}" in METRICS and METRICS[f"{qualname}.{n}"].rule == EXACT)
        and pattern.search(f"{qualname}.{n}")
    ]


def _outcome(call) -> Any:
    try:
        return call()
    except NotImplementedError as skip:
        return f"n/a: {skip}"
    except Exception as error:  # noqa: BLE001 (a failed cell is a figure of the dump)
        return f"failed: {type(error).__name__}: {error}"


def dump(pattern: str = "") -> dict[str, Any]:
    """``benchmark[param, ...] -> figure`` of every exact figure whose name matches ``pattern``."""
    regex = re.compile(pattern)
    caches: dict[Any, Any] = {}
    figures: dict[str, Any] = {}
    for qualname, cls in _benchmark_classes():
        methods = _exact_methods(qualname, cls, regex)
        if not methods:
            continue
        instance = cls()
        setup_cache = getattr(cls, "setup_cache", None)
        cached: tuple = ()
        if setup_cache is not None:
            if setup_cache not in caches:
                print(f"  setup_cache of {qualname}", file=sys.stderr, flush=True)
                caches[setup_cache] = setup_cache(instance)
            cached = (caches[setup_cache],)
        for params in itertools.product(*getattr(cls, "params", [])):
            arguments = (*cached, *params)
            setup = getattr(instance, "setup", None)
            skipped = _outcome(functools.partial(setup, *arguments)) if setup else None
            for method in methods:
                key = f"{qualname}.{method}[{', '.join(params)}]"
                if isinstance(skipped, str):
                    figures[key] = skipped
                else:
                    call = functools.partial(getattr(instance, method), *arguments)
                    figures[key] = _outcome(call)
    return figures


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per figure that differs between two dumps, or is in one only."""
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key, "(absent)"), after.get(key, "(absent)")
        if old != new:
            lines.append(f"{key}: {old!r} -> {new!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exact", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump", help="write every exact figure as JSON")
    dumping.add_argument("out", type=Path)
    dumping.add_argument("-b", "--bench", default="", help="only figures matching this regex")
    diffing = commands.add_parser("diff", help="every difference between two dumps")
    diffing.add_argument("before", type=Path)
    diffing.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        figures = dump(args.bench)
        args.out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
        print(f"{len(figures)} figures -> {args.out}")
        return 0
    lines = diff(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    print("\n".join(lines))
    print(f"{len(lines)} differences")
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
