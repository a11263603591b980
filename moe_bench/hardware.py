"""How fast and how steadily a run's host copied memory, read from the run's own results: is it
the same hardware, was it quiet, and which strategies moved as a whole?

asv keys a history by machine name alone, and one name often covers several hosts: a CI pool,
the nightly of several GB200 boxes, a VM moved to another host. ``machine.json`` cannot tell
them apart (same CPU string, same GPU), yet their memory can be 3x apart (two hosts behind
``cpu-2core-epyc``, issue 22). Every ``LayerTime`` cell times a same-size ``copy_`` call by call
beside the strategy, so every run, the committed history included, already holds its host's
copy speed: layer seconds / copy ratio is the cell's copy time (within 21 % of the copies' own
median in two grids timed under loads of 4-7; the cells of one shape agree within 1.25x in
``results/cpu-2core-epyc``). ``copy_scale`` compares two runs by the median over the cells both
timed, so a few odd cells do not decide; ``moe_suite.metrics.same_hardware`` says what the
figure means. The cells of one shape copy the same bytes, so how far their copy times spread
(``copy_spread``) says how steady the host was while the run timed. Between two steady runs a
code change that slows one strategy shows in every shape it runs, noise in one cell at a time:
``strategy_changes`` takes the median over shapes (``moe_suite.metrics.STRATEGY_FACTOR``).
"""

from __future__ import annotations

import math

import pandas as pd

from moe_suite.metrics import COPY_RATIO, TIME, steady

__all__ = [
    "MIN_CELLS",
    "MIN_SHAPES",
    "RUN",
    "copy_seconds",
    "copy_scale",
    "copy_spread",
    "strategy_changes",
]

#: What identifies one run in ``moe_bench.results.load_results``' frame (asv keeps one result
#: file per machine, commit and environment).
RUN = ["machine", "env", "commit"]

#: Cells two runs must share for ``copy_scale`` to say anything: a median outvotes one odd cell
#: (a strategy whose time moved with its copy ratio unchanged) only from three values on.
MIN_CELLS = 3

#: Shapes a strategy must have timed in both runs for ``strategy_changes`` to say anything: the
#: median outvotes one odd shape only from three on, as ``MIN_CELLS``.
MIN_SHAPES = 3


def copy_seconds(df: pd.DataFrame) -> pd.DataFrame:
    """Each timed cell's same-size copy time: ``LayerTime`` layer seconds / copy ratio.

    ``df`` is ``load_results``' frame (or a part of it). Returns seconds, one row per
    ``shape, strategy`` and one column per run (a ``RUN`` tuple); NaN where the run has no
    figure (skipped, failed). A run without ``LayerTime`` (older history, a run of other
    benchmarks only) has no column.
    """
    timed = df[df["benchmark"].isin([TIME, COPY_RATIO])]
    wide = timed.set_index(RUN + ["shape", "strategy", "benchmark"])["value"].unstack("benchmark")
    if not {TIME, COPY_RATIO} <= set(wide.columns):
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["shape", "strategy"]))
    return (wide[TIME] / wide[COPY_RATIO]).unstack(RUN)


def copy_scale(copies: pd.DataFrame, run: tuple, earlier: tuple) -> float:
    """``run``'s same-size copy time / ``earlier``'s: the median over the cells both timed.

    ``copies`` is ``copy_seconds``' result; ``run`` and ``earlier`` are ``RUN`` tuples. 3.0:
    ``run``'s host copies three times slower. NaN where the two runs share fewer than
    ``MIN_CELLS`` timed cells.
    """
    if run not in copies or earlier not in copies:
        return math.nan
    ratios = (copies[run] / copies[earlier]).dropna()
    return float(ratios.median()) if len(ratios) >= MIN_CELLS else math.nan


def copy_spread(copies: pd.DataFrame, run: tuple) -> float:
    """How steady ``run``'s host was: the median over shapes of max / min same-size copy time
    across the shape's cells (they copy the same bytes, so 1.0 is a perfectly steady host).

    ``copies`` is ``copy_seconds``' result, ``run`` a ``RUN`` tuple. Only shapes with at least
    two timed cells count; NaN where the run has none (no ``LayerTime``, or not in ``copies``).
    """
    if run not in copies:
        return math.nan
    by_shape = copies[run].dropna().groupby(level="shape")
    spread = (by_shape.max() / by_shape.min())[by_shape.size() >= 2]
    return float(spread.median()) if len(spread) else math.nan


def strategy_changes(
    df: pd.DataFrame, benchmark: str, run: tuple, earlier: tuple, copies: pd.DataFrame
) -> pd.Series:
    """``run``'s figure / ``earlier``'s per strategy: the median over the shapes both timed.

    ``df`` is ``load_results``' frame, ``benchmark`` a figure of it (a ratio within one run, the
    copy ratio), ``run`` and ``earlier`` ``RUN`` tuples, ``copies`` ``copy_seconds``' result.
    Returns a Series indexed by strategy; NaN for a strategy with fewer than ``MIN_SHAPES``
    shapes in both runs, and for every strategy unless both runs were ``steady``
    (``copy_spread``): a loaded host moves whole strategies too (docs/verdicts.md).
    """
    figures = df[df["benchmark"] == benchmark].set_index(RUN)
    if run not in figures.index or earlier not in figures.index:
        return pd.Series(dtype=float)
    head, base = (
        figures.loc[[r]].set_index(["strategy", "shape"])["value"] for r in (run, earlier)
    )
    changes = (head / base).dropna().groupby(level="strategy")
    median = changes.median().where(changes.size() >= MIN_SHAPES)
    if not steady(copy_spread(copies, run), copy_spread(copies, earlier)):
        median[:] = math.nan
    return median
