"""The PR gate's verdict: two commits' asv results compared with a factor per unit.

``asv continuous`` applies one factor to every benchmark. Here each unit has its own, chosen
from this suite's measured noise (README, "PR comparison"):

- ``bytes``, ``experts``, ``retries``: deterministic, compared exactly (any increase fails);
- ``ratio`` (strategy time / same-size copy in one process): the noise mostly cancels, so a
  tight factor;
- ``seconds`` (wall time): on the shared 2-core CPU one layer's time of the same code differed
  by up to 3.9x between two runs, so a generous factor: it catches gross slowdowns only, the
  copy ratio catches the rest.

Lower is better for every metric of this suite. A benchmark that failed in either commit fails
the gate; one skipped (n/a) in both is never a regression; one whose ``version`` differs
between the commits is reported, not compared (asv does the same).

Usage: ``python -m moe_bench.compare RESULTS_DIR BASE HEAD [--markdown FILE]``; exit 0 when
nothing regressed or failed, 1 otherwise, 2 on missing or corrupt results.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from .results import ResultsError, load_results

__all__ = ["FACTORS", "compare_commits", "gate_failed", "markdown_report", "main"]

#: Allowed head/base ratio per unit before a result counts as a regression (README has why).
FACTORS = {
    "bytes": 1.0,
    "experts": 1.0,
    "retries": 1.0,
    "ratio": 1.5,  # same code twice on the shared 2-core CPU: up to 1.36x apart
    "seconds": 5.0,  # same code twice there: TimeConvert up to 3.9x apart, WholeModel 1.5x
}
#: Outcomes that fail the gate.
FAILING = ("regressed", "failed", "missing")

_KEYS = ["machine", "env", "benchmark", "shape", "strategy"]


def _commit_rows(frame: pd.DataFrame, commit: str) -> pd.DataFrame:
    rows = frame[frame["commit"].str.startswith(commit)]
    if rows.empty:
        raise ResultsError(f"no results for commit {commit!r}")
    if rows["commit"].nunique() > 1:
        raise ResultsError(f"commit prefix {commit!r} is ambiguous")
    return rows


def _status(row: pd.Series) -> str:
    if pd.isna(row["unit_head"]):
        return "missing"
    if pd.isna(row["unit_base"]):
        return "new"
    if row["failed_base"] or row["failed_head"]:
        return "failed"
    if row["version_base"] != row["version_head"]:
        return "version changed"
    base, head = row["value_base"], row["value_head"]
    if math.isnan(base) or math.isnan(head):
        return "n/a"
    factor = FACTORS.get(row["unit_head"])
    if factor is None:
        raise ValueError(
            f"{row['benchmark']}: unit {row['unit_head']!r} has no factor in FACTORS "
            f"({', '.join(FACTORS)}); add one"
        )
    if head > base * factor:
        return "regressed"
    if head * factor < base:
        return "improved"
    return "same"


def compare_commits(frame: pd.DataFrame, base: str, head: str) -> pd.DataFrame:
    """One row per benchmark and parameter set: base and head values, ratio, factor, status.

    ``base``/``head`` are commit hashes or unique prefixes. Status is one of ``same``,
    ``improved``, ``regressed``, ``failed``, ``missing`` (in base, not head), ``new``, ``n/a``
    or ``version changed``. ``frame`` is ``load_results``'. Raises ``ResultsError`` when
    either commit has no results.
    """
    old = _commit_rows(frame, base)
    new = _commit_rows(frame, head)
    cols = _KEYS + ["value", "unit", "failed", "version"]
    merged = old[cols].merge(new[cols], on=_KEYS, how="outer", suffixes=("_base", "_head"))
    merged["ratio"] = merged["value_head"] / merged["value_base"]
    merged["factor"] = merged["unit_head"].map(FACTORS)
    merged["status"] = merged.apply(_status, axis=1)
    return merged


def gate_failed(table: pd.DataFrame) -> bool:
    """Whether any row regressed, failed or went missing."""
    return bool(table["status"].isin(FAILING).any())


def markdown_report(frame: pd.DataFrame, table: pd.DataFrame, base: str, head: str) -> str:
    """The PR comment: this gate's verdict, then every point of base against head.

    The table is ``moe_bench.report.compare_markdown`` (the dashboards' own rendering, marking
    with the same ``FACTORS``); ``frame`` is ``load_results``' frame, ``table`` is
    ``compare_commits``' verdict.
    """
    from .report import compare_markdown  # report imports FACTORS from this module

    failing = table[table["status"].isin(FAILING)]
    counts = failing["status"].value_counts()
    verdict = ("FAILED: " + ", ".join(f"{n} {status}" for status, n in counts.items())
               if len(failing) else "passed")
    rows = "".join(
        f"- `{row.benchmark.split('.', 1)[1]}` {row.shape or ''} {row.strategy or ''}: "
        f"{row.status} (head / base = {row.ratio:.3f}, factor {row.factor:g})\n"
        for row in failing.fillna({"shape": "", "strategy": "", "ratio": math.nan,
                                   "factor": math.nan}).itertuples()
    )
    return f"## PR gate: {verdict}\n\n{rows}\n" + compare_markdown(frame, base, head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moe_bench.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir")
    parser.add_argument("base")
    parser.add_argument("head")
    parser.add_argument("--markdown", type=Path, default=None, help="write the PR comment here")
    args = parser.parse_args(argv)
    try:
        frame = load_results(args.results_dir)
        table = compare_commits(frame, args.base, args.head)
    except ResultsError as err:
        print(f"compare: error: {args.results_dir}: {err}", file=sys.stderr)
        return 2
    report = markdown_report(frame, table, args.base, args.head)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report)
    print(report)
    return 1 if gate_failed(table) else 0


if __name__ == "__main__":
    sys.exit(main())
