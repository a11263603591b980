"""Budgets: limits checked into the repository (``budgets.json``), checked against asv results.

A budget names a benchmark of the metrics table (``moe_suite.metrics``), a shape, optionally a
strategy and a machine, and a ``max`` (lower is better: seconds, bytes) or a ``min`` (higher is
better). Each is checked against the latest commit of every machine it applies to (or
``--commit``). Exit status of ``moe-bench gate`` (``moe_bench.cli``): 0 when every budget
checked is met, 1 when any is over (with a table), 2 when the budgets file is malformed, when
results are missing, corrupt or hold a figure the metrics table does not know, when a budgeted
figure is failed, absent or n/a, when any benchmark (budgeted or not) failed in the commit
checked, or when no budget could be checked at all: never a pass on nothing.

Usage: ``moe-bench gate [--results results] [--budgets budgets.json] [--machine NAME]
[--commit HASH]``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from moe_suite.metrics import METRICS

from .results import latest
from .units import human

__all__ = [
    "Budget",
    "BudgetError",
    "Verdict",
    "check_budgets",
    "failed_benchmarks",
    "load_budgets",
    "verdict_table",
]

DIRECTIONS = ("max", "min")


class BudgetError(Exception):
    """The budgets file is missing or malformed; the message names the file and entry."""


@dataclass(frozen=True)
class Budget:
    """One limit: ``value <= limit`` (direction ``max``) or ``value >= limit`` (``min``)."""

    benchmark: str  # e.g. "bench_convert.PeakMemory.track_peak_transient_bytes"
    shape: str  # e.g. "qwen3-235b-a22b/tp4"
    strategy: str | None  # None: every strategy's result must meet it
    machine: str | None  # None: every machine's results must meet it
    direction: str
    limit: float
    why: str = ""


@dataclass(frozen=True)
class Verdict:
    """One budget checked against one result."""

    budget: Budget
    machine: str
    commit: str | None
    strategy: str | None
    value: float
    status: str  # "ok", "over", or an error: "failed", "missing", "n/a"


#: Verdicts that are errors (exit 2), not a figure over budget (exit 1).
ERRORS = ("failed", "missing", "n/a")


def load_budgets(path: str | Path) -> list[Budget]:
    """Read ``path``: ``{"budgets": [{"benchmark", "shape", "max"|"min", ...}, ...]}``.

    Raises ``BudgetError`` (one line naming the file and the entry) for anything else: an entry
    that is not an object, a benchmark not in the metrics table, a limit that is not a finite
    number, a missing or doubled direction.
    """
    path = Path(path)
    try:
        entries = json.loads(path.read_text())["budgets"]
    except FileNotFoundError:
        raise BudgetError(f"{path}: no budgets file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise BudgetError(
            f'{path}: not a budgets file ({err}); expected {{"budgets": [...]}}'
        ) from None
    if not isinstance(entries, list):
        raise BudgetError(
            f"{path}: 'budgets' is {type(entries).__name__}, expected a list of objects"
        )
    budgets = [_budget(path, i, entry) for i, entry in enumerate(entries)]
    if not budgets:
        raise BudgetError(f"{path}: no budgets in the file")
    return budgets


def _budget(path: Path, i: int, entry) -> Budget:
    where = f"{path}: budget #{i}"
    if not isinstance(entry, dict):
        raise BudgetError(
            f'{where} is {entry!r}, expected an object {{"benchmark", "shape", "max"|"min"}}'
        )
    directions = [d for d in DIRECTIONS if d in entry]
    if len(directions) != 1 or "benchmark" not in entry or "shape" not in entry:
        raise BudgetError(
            f"{where} {entry!r} needs 'benchmark', 'shape' and exactly one of "
            f"{' or '.join(DIRECTIONS)}"
        )
    direction = directions[0]
    limit = entry[direction]
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit):
        raise BudgetError(
            f"{where} ({entry['benchmark']}): {direction} is {limit!r}, expected a finite number"
        )
    if entry["benchmark"] not in METRICS:
        raise BudgetError(
            f"{where}: benchmark {entry['benchmark']!r} is not in the metrics table "
            "(moe_suite/metrics.py)"
        )
    return Budget(
        entry["benchmark"],
        entry["shape"],
        entry.get("strategy"),
        entry.get("machine"),
        direction,
        float(limit),
        entry.get("why", ""),
    )


def check_budgets(
    frame: pd.DataFrame, budgets: list[Budget], *, commit: str | None = None
) -> list[Verdict]:
    """Check each budget on each machine of ``frame`` it applies to.

    A budget for a machine not in ``frame`` is not checked (another machine's nightly checks
    it); on a machine that is, a result that is absent is ``missing``, one whose benchmark
    failed is ``failed`` and one skipped or NaN is ``n/a``: each an error (``ERRORS``), since a
    budget that names a machine, or none, says the figure must be measured there.
    """
    rows = latest(frame, commit)
    verdicts = []
    for budget in budgets:
        machines = sorted(frame["machine"].unique())
        for machine in (m for m in machines if budget.machine in (None, m)):
            match = rows[
                (rows["machine"] == machine)
                & (rows["benchmark"] == budget.benchmark)
                & (rows["shape"] == budget.shape)
            ]
            if budget.strategy is not None:
                match = match[match["strategy"] == budget.strategy]
            if match.empty:
                verdicts.append(
                    Verdict(budget, machine, commit, budget.strategy, math.nan, "missing")
                )
                continue
            for row in match.itertuples():
                if row.failed:
                    status = "failed"
                elif math.isnan(row.value):
                    status = "n/a"
                elif budget.direction == "max":
                    status = "ok" if row.value <= budget.limit else "over"
                else:
                    status = "ok" if row.value >= budget.limit else "over"
                verdicts.append(
                    Verdict(budget, machine, row.commit, row.strategy, row.value, status)
                )
    return verdicts


def _number(value: float, benchmark: str) -> str:
    """Exact integers (bytes) with separators, bytes also in binary units; others to 4 digits."""
    if math.isnan(value):
        return "n/a"
    if not float(value).is_integer():
        return f"{value:.4g}"
    display = METRICS[benchmark].display
    return f"{value:,.0f}" + (f" ({human(value, display)})" if display == "bytes" else "")


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """The verdicts as a table, worst first."""
    table = pd.DataFrame(
        [
            {
                "status": v.status,
                "machine": v.machine,
                "commit": (v.commit or "")[:8],
                "benchmark": v.budget.benchmark.rsplit(".", 1)[-1],
                "shape": v.budget.shape,
                "strategy": v.strategy or "",
                "value": _number(v.value, v.budget.benchmark),
                "budget": f"{v.budget.direction} {_number(v.budget.limit, v.budget.benchmark)}",
                "use": f"{v.value / v.budget.limit:.2f}" if v.value == v.value else "",
            }
            for v in verdicts
        ]
    )
    order = {"failed": 0, "missing": 1, "n/a": 2, "over": 3, "ok": 4}
    return table.sort_values("status", key=lambda s: s.map(order), kind="stable")


def failed_benchmarks(frame: pd.DataFrame, commit: str | None = None) -> list[str]:
    """``"benchmark shape strategy on machine at commit"`` of every failed result of the commits
    ``check_budgets`` checks (budgeted or not), sorted."""
    failed = latest(frame, commit).query("failed")
    return sorted(
        {
            f"{r.benchmark} {r.shape or ''} {r.strategy or ''} on {r.machine} at "
            f"{r.commit[:8]}".replace("  ", " ")
            for r in failed.itertuples()
        }
    )
