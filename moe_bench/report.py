"""Markdown reports from asv results: the latest summary per machine, and the PR comparison.

``summary_table`` takes ``moe_bench.results.load_results``'s frame and keeps, for each machine,
its latest commit: per model shape x strategy the time of one layer, the speed-up over
``legacy``, the copy ratio, the peak transient bytes and the whole-model seconds, each with its
change against the previous result of the same point and a regression mark. ``render_markdown``
prints it in human units; ``write_summary`` writes ``summary.md`` with the plots linked;
``compare_markdown`` is the PR comment of ``scripts/compare``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .compare import FACTORS
from .plots import PEAK_BYTES, TIME, write_plots
from .results import load_results
from .units import human

__all__ = [
    "METRICS", "BASELINE", "REGRESSION_FACTOR", "WORSE_WHEN_HIGHER",
    "summary_table", "render_markdown", "write_summary", "compare_markdown",
]

#: The summary's figures: benchmark -> (column, asv unit).
METRICS = {
    TIME: ("time", "seconds"),
    "bench_convert.CopyRatio.track_copy_ratio": ("copy_ratio", "ratio"),
    PEAK_BYTES: ("peak_bytes", "bytes"),
    "bench_convert.WholeModel.track_whole_model_seconds": ("whole_model", "seconds"),
}
#: The strategy speed-ups are measured against (vLLM's conversion before #45589).
BASELINE = "legacy"
#: A summary figure more than this factor worse than the previous result of the same point is
#: marked: asv publish's default ``regressions_thresholds`` (5 %), so the summary marks what
#: the dashboard's regressions view lists. (The PR comment uses the gate's factors instead.)
REGRESSION_FACTOR = 1.05
#: Units where a higher value is worse. Every figure of this suite is one; a unit outside this
#: set (e.g. ``experts``, the profile record) has no better or worse, only "changed".
WORSE_WHEN_HIGHER = frozenset({"seconds", "bytes", "ratio", "retries"})

_POINT = ["machine", "env", "benchmark", "shape", "strategy", "version", "profile"]
_COLUMNS = {column: unit for column, unit in METRICS.values()}
_HEADERS = {
    "time": "time (1 layer)",
    "speedup": f"speed-up vs {BASELINE}",
    "copy_ratio": "copy ratio",
    "peak_bytes": "peak transient",
    "whole_model": "whole model",
}


def _is_worse(ratio: float, unit: str, factor: float) -> bool:
    """Whether a new/old ``ratio`` is a regression for ``unit`` beyond ``factor``."""
    return unit in WORSE_WHEN_HIGHER and ratio > factor


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """The latest commit of each machine: one row per model shape x strategy.

    Parameters
    ----------
    df : ``load_results`` frame (any machines, commits, benchmarks; others than ``METRICS``
        are ignored).

    Returns
    -------
    DataFrame with columns ``machine, env, profile, commit, date, shape, strategy`` (profile
    ``""`` where the machine did not record one), the figures ``time`` (s), ``speedup``
    (legacy time / time), ``copy_ratio``, ``peak_bytes``, ``whole_model`` (s), for each
    figure but ``speedup`` its ``<figure>_change`` (new / previous value; NaN without a
    previous result), and ``regressions``: a tuple of the figures more than
    ``REGRESSION_FACTOR`` worse than before. "Previous" is the latest
    earlier valid value of the same point (machine, env, benchmark, parameters, benchmark
    version and profile), so a failed run in between neither hides nor fakes a regression.
    Skipped or failed figures are NaN. Rows sorted by machine, shape, strategy as run.

    Raises
    ------
    ValueError
        If ``df`` holds none of the ``METRICS`` benchmarks.
    """
    data = df[df["benchmark"].isin(METRICS)].copy()
    if data.empty:
        raise ValueError(
            f"df has none of the summary's benchmarks ({', '.join(METRICS)}); "
            "pass load_results() of a results_dir the suite ran into"
        )
    data["metric"] = data["benchmark"].map(lambda name: METRICS[name][0])
    data["profile"] = data["profile"].fillna("")  # None where not recorded: still one key
    latest_date = data.groupby("machine")["date"].transform("max")
    latest = data[data["date"] == latest_date]
    earlier = data[(data["date"] < latest_date) & data["value"].notna()]
    previous = earlier.sort_values("date").groupby(_POINT)["value"].last()
    latest = latest.join(previous.rename("previous"), on=_POINT)
    latest["change"] = latest["value"] / latest["previous"]

    index = ["machine", "env", "profile", "commit", "date", "shape", "strategy"]
    wide = latest.pivot_table(index=index, columns="metric", values=["value", "change"],
                              aggfunc="first", dropna=False, sort=False)
    table = pd.DataFrame(index=wide.index)
    for column in _COLUMNS:
        table[column] = wide.get(("value", column), math.nan)
        table[f"{column}_change"] = wide.get(("change", column), math.nan)
    table = table.reset_index()
    run = ["machine", "env", "commit", "shape"]
    legacy = table[table["strategy"] == BASELINE].set_index(run)["time"].rename("legacy")
    table["speedup"] = table.join(legacy, on=run)["legacy"] / table["time"]
    table["regressions"] = [
        tuple(c for c, unit in _COLUMNS.items()
              if _is_worse(row[f"{c}_change"], unit, REGRESSION_FACTOR))
        for _, row in table.iterrows()
    ]
    order = ["machine", "env", "profile", "commit", "date", "shape", "strategy", "time", "speedup"]
    figures = [c for c in _COLUMNS if c != "time"]
    changes = [f"{c}_change" for c in _COLUMNS]
    return table[order + figures + changes + ["regressions"]]


def _cell(row: pd.Series, column: str) -> str:
    if column == "speedup":
        return "n/a" if math.isnan(row["speedup"]) else f"{row['speedup']:.2f}×"
    text = human(row[column], _COLUMNS[column])
    if column in row["regressions"]:
        return f"**{text}** ⚠ {row[f'{column}_change'] - 1:+.0%}"
    return text


def render_markdown(table: pd.DataFrame, *, title: str) -> str:
    """``summary_table`` as markdown: a section per machine, values in human units.

    A regressed figure is bold with ``⚠`` and its change against the previous result.
    """
    lines = [f"# {title}", ""]
    lines.append(
        f"⚠: more than {REGRESSION_FACTOR - 1:.0%} worse than the previous result of the same "
        f"point. Speed-up: `{BASELINE}` time / time. Copy ratio: time / a same-size copy's "
        "(1 is the out-of-place limit). Whole model: every MoE layer of the model on one rank."
    )
    for (machine, env, profile, commit, date), rows in table.groupby(
            ["machine", "env", "profile", "commit", "date"], sort=False):
        regressed = sum(len(r) for r in rows["regressions"])
        run = f"{env}, profile {profile}" if profile else env
        lines += ["", f"## `{machine}`: commit `{commit[:8]}` ({date:%Y-%m-%d %H:%M} UTC, {run})", ""]
        shown = rows[["shape", "strategy"]].copy()
        for column in _HEADERS:
            shown[_HEADERS[column]] = [_cell(row, column) for _, row in rows.iterrows()]
        lines.append(shown.to_markdown(index=False, disable_numparse=True))
        lines += ["", f"{regressed} regressed figure(s) against the previous results."]
    return "\n".join(lines) + "\n"


def write_summary(results_dir, out_dir) -> Path:
    """Load ``results_dir``, write ``out_dir/summary.md`` and its plots; return the summary path.

    The plots (``write_plots``) are PNGs in ``out_dir``, shown in the summary as images by
    relative path. Raises ``moe_bench.results.ResultsError`` when there are no results.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = load_results(results_dir)
    text = render_markdown(summary_table(df), title="moe-convert-bench: latest results")
    plots = write_plots(df, out_dir)
    text += "\n## Plots\n\n" + "".join(f"![{p.stem}]({p.relative_to(out_dir)})\n\n" for p in plots)
    path = out_dir / "summary.md"
    path.write_text(text)
    return path


def compare_markdown(df: pd.DataFrame, base: str, head: str) -> str:
    """The PR comment: every benchmark point of commit ``base`` against ``head``.

    ``base``/``head`` are commit hashes or unique prefixes present in ``df``. Columns: base and
    head values in human units, ratio head / base and a mark: ``⚠ worse`` beyond the gate's
    factor for the unit (``moe_bench.compare.FACTORS``: the comment marks what the gate
    fails), ``✓ better`` below its inverse, ``changed`` for a unit without a direction,
    ``failed`` / ``n/a`` (skipped) / ``version changed`` (not comparable, as in asv).
    Worse rows come first.
    """
    picked = {}
    for role, prefix in (("base", base), ("head", head)):
        commits = df.loc[df["commit"].str.startswith(prefix), "commit"].unique()
        if len(commits) != 1:
            found = "no commit" if len(commits) == 0 else f"{len(commits)} commits"
            raise ValueError(f"{role} {prefix!r} matches {found} in df; pass a unique hash prefix")
        picked[role] = df[df["commit"] == commits[0]]
    keys = ["machine", "env", "benchmark", "shape", "strategy"]
    cols = keys + ["value", "unit", "failed", "version"]
    both = picked["base"][cols].merge(picked["head"][cols], on=keys, how="outer", suffixes=("_base", "_head"))
    both["unit"] = both["unit_head"].fillna(both["unit_base"])
    for column in ("failed_base", "failed_head"):  # NaN where the point is in one commit only
        both[column] = both[column].astype("boolean").fillna(False)
    both["ratio"] = both["value_head"] / both["value_base"]
    both["mark"] = both.apply(_mark, axis=1)
    both["order"] = both["mark"].ne("⚠ worse")
    both = both.sort_values(["order"] + keys, kind="stable")
    shown = pd.DataFrame({
        "benchmark": both["benchmark"].str.replace("bench_convert.", "", regex=False),
        "shape": both["shape"].fillna(""),
        "strategy": both["strategy"].fillna(""),
        "base": [human(v, u) for v, u in zip(both["value_base"], both["unit"])],
        "head": [human(v, u) for v, u in zip(both["value_head"], both["unit"])],
        "ratio": both["ratio"].map(lambda r: "" if math.isnan(r) else f"{r:.2f}"),
        "": both["mark"],
    })
    if both["machine"].nunique() > 1:
        shown.insert(0, "machine", both["machine"])
    counts = both["mark"].value_counts()
    summary = ", ".join(f"{counts[m]} {m}" for m in counts.index if m)
    return (
        f"## Benchmarks: `{picked['head']['commit'].iloc[0][:8]}` (head) vs "
        f"`{picked['base']['commit'].iloc[0][:8]}` (base)\n\n"
        f"{summary or 'no change beyond the factors'}. Factors per unit: "
        + ", ".join(f"{unit} {factor:g}" for unit, factor in FACTORS.items())
        + ".\n\n" + shown.to_markdown(index=False, disable_numparse=True) + "\n"
    )


def _mark(row: pd.Series) -> str:
    if row["failed_base"] or row["failed_head"]:
        return "failed"
    if pd.isna(row["version_base"]) or pd.isna(row["version_head"]):
        return "new" if pd.isna(row["version_base"]) else "missing"
    if row["version_base"] != row["version_head"]:
        return "version changed"
    if row["value_base"] == row["value_head"]:  # also 0 == 0, whose ratio is NaN
        return ""
    if math.isnan(row["ratio"]):
        return "n/a"
    unit = row["unit"]
    factor = FACTORS.get(unit, 1.0)
    if unit not in WORSE_WHEN_HIGHER:
        return "" if row["ratio"] == 1 else "changed"
    if _is_worse(row["ratio"], unit, factor):
        return "⚠ worse"
    if row["ratio"] * factor < 1:
        return "✓ better"
    return ""
