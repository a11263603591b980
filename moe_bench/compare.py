"""The PR gate's verdict: two commits' asv results, and the paired A/B result, in one table.

Each figure is judged by its rule in the metrics table (``moe_suite.metrics``): ``exact``
figures (bytes, launches, traffic, experts, retries) fail on any change for the worse;
``paired`` (time-derived) figures the paired run times (one layer's conversion,
``metrics.PAIRED_CLASS``) are decided by it when ``--paired`` is given (``benchmarks.paired``:
base and head alternated in one process, a confidence interval on the head/base time ratio) and
are then shown as ``info (decided by paired)``; without it, and always for the others, they
regress beyond ``metrics.NOISE_FACTOR``, absolute seconds only when the two runs' hosts look
alike (``moe_bench.hardware``; else ``info (other hardware)``: the copy ratio decides);
``info`` figures are never judged. The paired file's
rows join the table as benchmark ``paired.time_ratio``.

Statuses (``metrics.FAILING`` fail the gate): ``regressed``, ``changed`` (a figure without a
direction changed), ``failed`` (in either commit, also a benchmark new in head), ``missing``
(in base, absent from head), ``n/a in head`` (measured in base, skipped in head); passing:
``same``, ``improved``, ``new``, ``n/a`` (skipped in both, or in base only: nothing to compare),
``version changed`` (not comparable, as in asv), ``info``, ``info (decided by paired)``,
``info (other hardware)``, ``reference`` (an engine PR's cell of code that is the same at both
commits: ``compare_commits``' ``engine``).

Usage: ``moe-bench compare BASE HEAD [--results DIR] [--paired FILE] [--out FILE]``
(``moe_bench.cli``); exit 0 when nothing fails, 1 otherwise, 2 on missing or corrupt results or
paired file.
``moe_bench.report.comment_markdown`` renders the table as the PR comment.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from moe_suite.metrics import FAILING, METRICS, PAIRED_TIME, figure_format, judge
from moe_suite.selection import matches

from .hardware import copy_scale, copy_seconds, strategy_changes
from .results import ResultsError

__all__ = [
    "REFERENCE",
    "PairedError",
    "VERDICT_COLUMNS",
    "commit_hash",
    "compare_commits",
    "gate_failed",
    "load_paired",
]

#: Columns of ``compare_commits``' table, in order.
VERDICT_COLUMNS = [
    "machine",
    "env",
    "format",
    "benchmark",
    "shape",
    "strategy",
    "display",
    "value_base",
    "value_head",
    "ratio",
    "threshold",
    "status",
    "failing",
    "note",
]
#: The status of an engine PR's cell whose code is the same at both commits (``compare_commits``).
REFERENCE = "reference"
#: The paired file's verdicts and row keys (``benchmarks.paired`` writes them; a row's
#: ``format`` too, since the engine PR's paired rows: BF16 in a file from before).
#: ``n/a``: nothing to compare (the strategy is new in head, or base raised); not failing.
PAIRED_VERDICTS = ("same", "regressed", "improved", "failed", "n/a")
_PAIRED_ROW = (
    "shape",
    "strategy",
    "ratio",
    "ci_low",
    "ci_high",
    "n_pairs",
    "base_seconds",
    "head_seconds",
    "verdict",
    "error",
)
_KEYS = ["machine", "env", "benchmark", "shape", "strategy"]


class PairedError(Exception):
    """The paired A/B file is missing, corrupt, or for other commits; the message names it."""


def _commit_rows(frame: pd.DataFrame, commit: str) -> pd.DataFrame:
    rows = frame[frame["commit"].str.startswith(commit)]
    if rows.empty:
        raise ResultsError(f"no results for commit {commit!r}")
    if rows["commit"].nunique() > 1:
        raise ResultsError(f"commit prefix {commit!r} is ambiguous")
    return rows


def commit_hash(frame: pd.DataFrame, prefix: str) -> str:
    """The full hash of the one commit of ``frame`` that ``prefix`` starts; ``ResultsError`` if
    there is none, or more than one."""
    return _commit_rows(frame, prefix)["commit"].iloc[0]


def _status(row: pd.Series, paired: bool, scale: float, change: float) -> tuple[str, str]:
    """``(status, note)`` of one merged row of base and head; ``scale``: head's same-size copy
    time / base's on the row's machine and env (``hardware.copy_scale``); ``change``: the row's
    strategy's median change over shapes (``hardware.strategy_changes``; NaN where not known)."""
    in_base, in_head = pd.notna(row["unit_base"]), pd.notna(row["unit_head"])
    if not in_head:
        return "missing", "in base, absent from head's results"
    failed = [
        side
        for side in ("base", "head")
        if pd.notna(row[f"failed_{side}"]) and bool(row[f"failed_{side}"])
    ]
    if failed:
        return "failed", f"failed in {' and '.join(failed)}"
    if not in_base:
        return ("new", "") if not math.isnan(row["value_head"]) else ("n/a", "new in head, skipped")
    if row["version_base"] != row["version_head"]:
        return (
            "version changed",
            f"version {row['version_base']} -> {row['version_head']}: not compared",
        )
    base, head = row["value_base"], row["value_head"]
    if math.isnan(head):
        return (
            ("n/a", "skipped in both")
            if math.isnan(base)
            else ("n/a in head", "measured in base, skipped in head")
        )
    if math.isnan(base):
        return "n/a", "skipped in base: nothing to compare"
    m = METRICS[row["benchmark"]]
    status = judge(m, base, head, paired=paired, copy_scale=scale, strategy_change=change)
    if status == "info (other hardware)":
        return status, f"head's same-size copies took {scale:.2f}x base's: the copy ratio decides"
    if status != "same" and m.by_strategy and not math.isnan(change):
        return status, f"{row['strategy']}: {change:.2f}x in the median over its shapes"
    return status, ""


def compare_commits(
    frame: pd.DataFrame,
    base: str,
    head: str,
    paired: pd.DataFrame | None = None,
    *,
    engine: str | None = None,
    bench: str | None = None,
) -> pd.DataFrame:
    """The PR verdict: one row per benchmark and parameter set, then the paired rows.

    Parameters
    ----------
    frame : ``load_results``' frame (its benchmarks are all in the metrics table).
    base, head : commit hashes or unique prefixes present in ``frame``.
    paired : ``load_paired``'s rows, or None: without them time-derived figures are judged by
        ``metrics.NOISE_FACTOR``.
    engine : an engine PR's engine (``vllm``, ``flashinfer``): the commits are the engine's, and
        only its own cells (the strategy named as it) are judged; every other cell (this
        suite's transcriptions, another engine's adapter) runs the same code at both commits
        and is shown with status ``reference``, its figures not judged (one that failed, is
        missing or skipped keeps its status).
    bench : the asv ``-b`` regex the PR run was limited to: only the cells it selects
        (``moe_suite.selection.matches``, asv's rule) are compared. Without it a commit
        measured in full before (a base shared by several PRs, in the same results folder)
        has figures the other lacks: ``missing`` where nothing is.

    Returns
    -------
    DataFrame with ``VERDICT_COLUMNS``: ``format`` the figure's (``metrics.figure_format``; a
    paired row's from its file), ``display`` the unit to print values in, ``ratio``
    head / base, ``threshold`` the allowed ratio (NaN where not judged by one), ``failing``
    whether ``status`` fails the gate, ``note`` why a row is not compared (or the paired
    interval). Failing rows first, then by benchmark and parameters.

    Raises
    ------
    ResultsError
        If either commit has no results, or a prefix is ambiguous.
    """
    if bench is not None:
        cells = frame[["benchmark", "shape", "strategy"]].itertuples(index=False)
        params = [(name, tuple(p for p in ps if isinstance(p, str))) for name, *ps in cells]
        frame = frame[[matches(bench, name, values) for name, values in params]]
    old = _commit_rows(frame, base)
    new = _commit_rows(frame, head)
    cols = _KEYS + ["value", "unit", "failed", "version"]
    merged = old[cols].merge(new[cols], on=_KEYS, how="outer", suffixes=("_base", "_head"))
    both = pd.concat([old, new])
    copies = copy_seconds(both)
    head_hash, base_hash = new["commit"].iloc[0], old["commit"].iloc[0]
    scales = {
        (machine, env): copy_scale(copies, (machine, env, head_hash), (machine, env, base_hash))
        for machine, env in merged[["machine", "env"]].drop_duplicates().itertuples(index=False)
    }
    moved = {
        (machine, env, name): strategy_changes(
            both, name, (machine, env, head_hash), (machine, env, base_hash), copies
        )
        for machine, env in scales
        for name in merged["benchmark"].unique()
        if name in METRICS and METRICS[name].by_strategy
    }
    verdicts = [
        _status(
            row,
            paired is not None,
            scales[row["machine"], row["env"]],
            moved.get((row["machine"], row["env"], row["benchmark"]), {}).get(
                row["strategy"], math.nan
            ),
        )
        for _, row in merged.iterrows()
    ]
    merged["status"] = [status for status, _ in verdicts]
    merged["note"] = [note for _, note in verdicts]
    if engine is not None:
        # a reference that failed, is missing or skipped says so: the run, not the PR, is wrong
        kept = merged["status"].isin(("failed", "missing", "n/a in head", "n/a"))
        reference = (merged["strategy"] != engine) & ~kept
        merged.loc[reference, "status"] = REFERENCE
        merged.loc[reference, "note"] = f"the same code at both commits of {engine}: not judged"
    merged["format"] = [
        figure_format(name, shape)
        for name, shape in zip(merged["benchmark"], merged["shape"], strict=True)
    ]
    merged["display"] = merged["benchmark"].map(lambda name: METRICS[name].display)
    merged["ratio"] = merged["value_head"] / merged["value_base"]
    merged["threshold"] = [
        math.nan
        if status.startswith("info") or status == REFERENCE
        else (METRICS[name].factor or math.nan)
        for name, status in zip(merged["benchmark"], merged["status"], strict=True)
    ]
    table = merged if paired is None else pd.concat([merged, paired], ignore_index=True)
    table["failing"] = table["status"].isin(FAILING)
    table = table.sort_values(
        ["failing", "benchmark", "shape", "strategy"],
        ascending=[False, True, True, True],
        kind="stable",
        na_position="first",
    )
    return table[VERDICT_COLUMNS].reset_index(drop=True)


def load_paired(path: str | Path, base: str, head: str) -> tuple[float, pd.DataFrame]:
    """The paired A/B file of ``benchmarks.paired``: ``(threshold, rows)`` in verdict-table form.

    ``base``/``head`` are the full hashes the asv results were resolved to; the file must be for
    the same two commits. Raises ``PairedError`` naming the file and the problem when it is
    missing, not JSON, not of the schema (``{"base", "head", "threshold", "rows": [{"shape",
    "strategy", "ratio", "ci_low", "ci_high", "n_pairs", "base_seconds", "head_seconds",
    "verdict", "error"}, ...]}``, each row's ``format`` optional), or is for other commits. No
    rows is valid: the ``-b`` subset held no timed benchmark, so there was no time to judge.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        threshold, rows = float(data["threshold"]), data["rows"]
        for role, commit in (("base", base), ("head", head)):
            if data[role] != commit:
                raise PairedError(
                    f"{path}: {role} is {str(data[role])[:12]!r}, the results' {role} "
                    f"is {commit[:12]!r}: a paired file of other commits"
                )
        if not isinstance(rows, list):
            raise PairedError(f"{path}: 'rows' is not a list")
        table = pd.DataFrame(
            [_paired_row(row, threshold) for row in rows],
            columns=[c for c in VERDICT_COLUMNS if c != "failing"],
        )
    except FileNotFoundError:
        raise PairedError(f"{path}: no such paired file (benchmarks.paired writes it)") from None
    except json.JSONDecodeError as err:
        raise PairedError(f"{path}: not JSON ({err})") from None
    except (KeyError, TypeError, ValueError) as err:
        raise PairedError(
            f"{path}: not a paired file ({type(err).__name__}: {err}); expected "
            '{"base", "head", "threshold", "rows": [...]}'
        ) from None
    return threshold, table


def _paired_row(row: dict, threshold: float) -> dict:
    missing = [key for key in _PAIRED_ROW if key not in row]
    if missing:
        raise KeyError(f"row {row!r} lacks {', '.join(missing)}")
    if row["verdict"] not in PAIRED_VERDICTS:
        raise ValueError(f"verdict {row['verdict']!r} is not one of {', '.join(PAIRED_VERDICTS)}")
    number = {
        key: math.nan if row[key] is None else float(row[key])
        for key in ("ratio", "ci_low", "ci_high", "base_seconds", "head_seconds")
    }
    measured = row["verdict"] not in ("failed", "n/a")
    if measured and not all(math.isfinite(v) for v in number.values()):
        raise ValueError(f"row {row['shape']} {row['strategy']}: a verdict with non-finite figures")
    note = (
        f"CI [{number['ci_low']:.3f}, {number['ci_high']:.3f}], {row['n_pairs']} pairs"
        if measured
        else f"{row['verdict']}: {row['error']}"
    )
    return {
        "machine": "",
        "env": "",
        "format": row.get("format") or figure_format(PAIRED_TIME, row["shape"]),
        "benchmark": PAIRED_TIME,
        "shape": row["shape"],
        "strategy": row["strategy"],
        "display": METRICS[PAIRED_TIME].display,
        "value_base": number["base_seconds"],
        "value_head": number["head_seconds"],
        "ratio": number["ratio"],
        "threshold": threshold,
        "status": row["verdict"],
        "note": note,
    }


def gate_failed(table: pd.DataFrame) -> bool:
    """Whether any row of ``compare_commits``' table fails the gate."""
    return bool(table["failing"].any())
