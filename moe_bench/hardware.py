"""How fast a run's host copies memory, read from the run's own results: is it the same hardware?

asv keys a history by machine name alone, and one name often covers several hosts: a CI pool,
the nightly of several GB200 boxes, a VM moved to another host. ``machine.json`` cannot tell
them apart (same CPU string, same GPU), yet their memory can be 3x apart (two hosts behind
``cpu-2core-epyc``, issue 22). Every ``LayerTime`` cell times a same-size ``copy_`` call by call
beside the strategy, so every run, the committed history included, already holds its host's
copy speed: layer seconds / copy ratio is the cell's copy time (within 21 % of the copies' own
median in two grids timed under loads of 4-7; the cells of one shape agree within 1.25x in
``results/cpu-2core-epyc``). ``copy_scale`` compares two runs by the median over the cells both
timed, so a few odd cells do not decide; ``moe_bench.metrics.same_hardware`` says what the
figure means.
"""

from __future__ import annotations

import math

import pandas as pd

from .metrics import COPY_RATIO, TIME

__all__ = ["MIN_CELLS", "RUN", "copy_seconds", "copy_scale"]

#: What identifies one run in ``moe_bench.results.load_results``' frame (asv keeps one result
#: file per machine, commit and environment).
RUN = ["machine", "env", "commit"]

#: Cells two runs must share for ``copy_scale`` to say anything: a median outvotes one odd cell
#: (a strategy whose time moved with its copy ratio unchanged) only from three values on.
MIN_CELLS = 3


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
