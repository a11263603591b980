"""The cells a run of asv reads, told to the ``setup_cache`` that measures them.

asv runs the benchmarks its ``--bench`` regex selects, matched (``re.search``) against each
benchmark's name and, for a parameterized one, against ``name('shape', 'strategy')``; but a
``setup_cache`` serves every class that shares it and is not told the selection, so it measures
every cell, read or not: a bisection step of one cell measured every grid. The commands of this
suite that give asv a regex (scripts/compare, gpu-check's asv step, ``moe_bench.engine``'s
``pr``, ``find`` and its re-runs) put it in ``ENV`` too, and both suites' ``setup_cache``
measure the selected cells only (``benchmarks.formats._selected``,
``engine_benchmarks/bench_engine._selected``). Unset (asv run by hand, a nightly): every
cell.

Standard library only: read inside asv's environments, which hold this package but not asv.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["ENV", "environ", "matches", "selects"]

#: The environment variable holding the run's ``--bench`` regex.
ENV = "MOE_BENCH_SELECT"


def environ(regex: str | None, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``base`` with ``ENV`` set to ``regex`` (removed for ``None``: the run selects all)."""
    env = {key: value for key, value in base.items() if key != ENV}
    if regex is not None:
        env[ENV] = regex
    return env


def matches(regex: str, name: str, params: tuple[str, ...] = ()) -> bool:
    """Whether asv's ``--bench`` ``regex`` selects benchmark ``name`` at ``params`` (its
    parameter values, ``str``): searched in ``name``, or for a parameterized one in
    ``name('shape', 'strategy')`` only, as asv 0.6.6's ``Benchmarks`` does."""
    shown = f"{name}({', '.join(repr(p) for p in params)})" if params else name
    return re.search(regex, shown) is not None


def selects(
    name: str, params: tuple[str, ...] = (), environ: Mapping[str, str] = os.environ
) -> bool:
    """Whether the run selects benchmark ``name`` at ``params`` (``matches``): every benchmark
    where ``ENV`` is unset or empty."""
    regex = environ.get(ENV)
    return not regex or matches(regex, name, params)
