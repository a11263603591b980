"""Markdown reports from asv results: the latest summary per machine, and the PR comment.

``summary_table`` takes ``moe_bench.results.load_results``'s frame and keeps, for each machine,
its latest commit: per model shape x strategy the figures of the metrics table that have a
summary column (``moe_suite.metrics``: time of one layer, copy ratio, traffic ratio, peak
transient bytes, whole-model seconds) and the speed-up over ``legacy``, each with its change
against the previous result of the same point and a mark where the metrics table's rule calls
the change a regression (``metrics.judge``: the PR gate's rule; time figures, with no paired run
in a history, beyond ``metrics.NOISE_FACTOR``, absolute seconds only against a run on
same-looking hardware, ``moe_bench.hardware``). ``render_markdown`` prints it in human units;
``write_summary`` writes ``summary.md`` with the plots linked; ``comment_markdown`` renders
``moe_bench.compare``'s verdict table as the PR comment (it decides nothing itself).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd

from moe_suite.formats import FORMAT_TITLES, titled
from moe_suite.loadtime import DeviceCosts, read_costs
from moe_suite.metrics import (
    EXACT,
    FAILING,
    HARDWARE_BAND,
    METRICS,
    NOISE_FACTOR,
    PAIRED_TIME,
    STEADY_SPREAD,
    STRATEGY_FACTOR,
    TIME,
    Metric,
    figure_format,
    judge,
    quant_sibling,
    same_hardware,
    steady,
)

from .compare import REFERENCE
from .document import Block, Cell, Image, Link, to_html, to_markdown
from .engine_page import EngineAxis, engine_blocks
from .gate import failed_benchmarks
from .hardware import copy_scale, copy_seconds, copy_spread, strategy_changes
from .plots import write_plots, write_rank_load_plot
from .rankload import (
    NO_CURVES,
    every_strategy_blocks,
    layer_curves,
    rank_load_blocks,
    rank_load_table,
    recorded_runs,
)
from .refit import refit_blocks
from .results import load_results
from .units import human

__all__ = [
    "BASELINE",
    "TITLE",
    "changes_block",
    "comment_markdown",
    "format_blocks",
    "summary_blocks",
    "summary_table",
    "write_front_page",
    "write_summary",
]

#: The strategy speed-ups are measured against (vLLM's conversion before #45589).
BASELINE = "legacy"

#: The summary's figures: column -> metric (BF16's: a quantized sibling shares its column, rule
#: and title, ``metrics.quant_sibling``), in the metrics table's order.
_SUMMARY: dict[str, Metric] = {}
for _metric in METRICS.values():
    if _metric.column is not None:
        _SUMMARY.setdefault(_metric.column, _metric)
#: BF16's benchmarks of the summary's columns (each format's siblings share them).
_SUMMARY_BENCHMARKS = tuple(m.benchmark for m in _SUMMARY.values())


def _column_of(benchmark: str) -> str | None:
    """``benchmark``'s summary column (a format's figure: its BF16 sibling's), if any."""
    return METRICS[benchmark].column if benchmark in METRICS else None


#: What the summary says of the run its time figures are compared with (``summary_table``).
_COMPARED = ["previous_commit", "copy_scale", "copy_spread", "previous_copy_spread"]
_POINT = ["machine", "env", "benchmark", "shape", "strategy", "version", "profile"]
#: The summary's absolute seconds, compared only between runs on same-looking hardware.
_HOST_BOUND = ", ".join(m.title for m in _SUMMARY.values() if m.host_bound)
_HEADERS = {
    METRICS[TIME].column: METRICS[TIME].title,
    "speedup": f"speed-up vs {BASELINE}",
    **{column: m.title for column, m in _SUMMARY.items()},
}


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """The latest commit of each machine: one row per model shape x strategy.

    Parameters
    ----------
    df : ``load_results`` frame (any machines, commits, benchmarks; those without a summary
        column in the metrics table are ignored).

    Returns
    -------
    DataFrame with columns ``machine, env, profile, commit, date, format, shape, strategy``
    (profile ``""`` where the machine did not record one; format the figure's,
    ``moe_suite.metrics.figure_format``: ``bf16``, ``nvfp4``, ``mxfp4``, ...), the
    figures ``time`` (s), ``speedup`` (legacy time / time), then the other summary columns of
    the metrics table (``copy_ratio``, ``traffic_ratio``, ``peak_bytes``, ``whole_model``), for
    each figure but
    ``speedup`` its ``<figure>_change`` (new / previous value; NaN without a previous result),
    ``previous_commit`` and ``copy_scale``: the run the time figure is compared with and this
    run's same-size copy time / that run's (``moe_bench.hardware.copy_scale``; NaN without
    one), and ``regressions``: a tuple of the figures whose change ``metrics.judge`` fails (the
    PR gate's rule for the figure, time-derived ones beyond ``NOISE_FACTOR``, absolute seconds
    only on same-looking hardware). "Previous" is the latest earlier valid value of the same
    point (machine, env, benchmark, parameters, benchmark version and profile), so a failed run
    in between neither hides nor fakes a regression. Skipped or failed figures are NaN. Rows
    sorted by machine, shape, strategy as run.

    Raises
    ------
    ValueError
        If ``df`` holds none of the summary's benchmarks.
    """
    columns = df["benchmark"].map(_column_of)
    data = df[columns.notna()].copy()
    if data.empty:
        raise ValueError(
            f"df has none of the summary's benchmarks ({', '.join(_SUMMARY_BENCHMARKS)}, or a "
            "format's); pass load_results() of a results_dir the suite ran into"
        )
    data["metric"] = columns[columns.notna()]
    data["format"] = [
        figure_format(name, shape)
        for name, shape in zip(data["benchmark"], data["shape"], strict=True)
    ]
    data["profile"] = data["profile"].fillna("")  # None where not recorded: still one key
    latest_date = data.groupby("machine")["date"].transform("max")
    latest = data[data["date"] == latest_date]
    earlier = data[(data["date"] < latest_date) & data["value"].notna()]
    previous = earlier.sort_values("date").groupby(_POINT)[["value", "commit"]].last()
    latest = latest.join(
        previous.rename(columns={"value": "previous", "commit": "previous_commit"}), on=_POINT
    )
    latest["change"] = latest["value"] / latest["previous"]
    copies = copy_seconds(data)
    # Per pair of runs (this one, the one its figures are compared with): how their hosts
    # compare (moe_bench.hardware) and which strategies moved as a whole.
    pair = ["machine", "env", "commit", "previous_commit"]
    compared = {}
    for key in latest[pair].dropna().drop_duplicates().itertuples(index=False, name=None):
        run, earlier = key[:3], (*key[:2], key[3])
        moved = {
            name: strategy_changes(data, name, run, earlier, copies)
            for name in data["benchmark"].unique()
            if METRICS[name].by_strategy
        }
        spreads = copy_spread(copies, run), copy_spread(copies, earlier)
        compared[key] = (copy_scale(copies, run, earlier), *spreads, moved)
    found = [
        compared.get(key, (math.nan, math.nan, math.nan, {}))  # NaN keys (no previous) miss
        for key in latest[pair].itertuples(index=False, name=None)
    ]
    for i, column in enumerate(_COMPARED[1:]):
        latest[column] = [f[i] for f in found]
    latest["strategy_change"] = [
        f[3][name].get(strategy, math.nan) if name in f[3] else math.nan
        for f, name, strategy in zip(found, latest["benchmark"], latest["strategy"], strict=True)
    ]
    latest["regressed"] = [
        pd.notna(old)
        and pd.notna(new)
        and judge(METRICS[name], old, new, copy_scale=scale, strategy_change=change) in FAILING
        for name, old, new, scale, change in zip(
            latest["benchmark"],
            latest["previous"],
            latest["value"],
            latest["copy_scale"],
            latest["strategy_change"],
            strict=True,
        )
    ]

    index = ["machine", "env", "profile", "commit", "date", "format", "shape", "strategy"]
    # groupby + unstack, not pivot_table(dropna=False): that one makes the cartesian product of
    # the index levels, so two machines' results gave rows of one machine with the other's commits.
    wide = (
        latest.groupby(index + ["metric"], dropna=False, sort=False)[
            ["value", "change", "regressed", *_COMPARED]
        ]
        .first()
        .unstack("metric")
    )
    table = pd.DataFrame(index=wide.index)
    for column in _SUMMARY:
        table[column] = wide.get(("value", column), math.nan)
        table[f"{column}_change"] = wide.get(("change", column), math.nan)
    marked = {
        c: wide[("regressed", c)].fillna(False).astype(bool).tolist()
        if ("regressed", c) in wide
        else [False] * len(wide)
        for c in _SUMMARY
    }
    table["regressions"] = [tuple(c for c in _SUMMARY if marked[c][i]) for i in range(len(table))]
    time = METRICS[TIME].column
    # The time figure's earlier run: the one its absolute seconds are (or are not) compared with.
    for column in _COMPARED:
        table[column] = wide.get((column, time), math.nan)
    table = table.reset_index()
    run = ["machine", "env", "commit", "shape"]
    legacy = table[table["strategy"] == BASELINE].set_index(run)[time].rename("legacy")
    table["speedup"] = table.join(legacy, on=run)["legacy"] / table[time]
    order = index + [time, "speedup"]
    figures = [c for c in _SUMMARY if c != time]
    changes = [f"{c}_change" for c in _SUMMARY]
    return table[order + figures + changes + _COMPARED + ["regressions"]]


def _cell(row: pd.Series, column: str) -> Cell:
    """The figure ``column`` of ``row`` in human units, marked where the gate marks it, linked
    to its benchmark in the row's format (the speed-up to the time's)."""
    benchmark = _benchmark(_SUMMARY[METRICS[TIME].column if column == "speedup" else column], row)
    if column == "speedup":
        text = "n/a" if math.isnan(row["speedup"]) else f"{row['speedup']:.2f}×"
        return Cell(text, benchmark=benchmark, machine=row["machine"])
    mark = f"⚠ {row[f'{column}_change'] - 1:+.0%}" if column in row["regressions"] else ""
    return Cell(
        human(row[column], _SUMMARY[column].display),
        mark,
        benchmark=benchmark,
        machine=row["machine"],
    )


def _benchmark(figure: Metric, row: pd.Series) -> str | None:
    """``figure``'s benchmark in ``row``'s format (BF16's own, else its sibling), if any."""
    if row["format"] == "bf16":
        return figure.benchmark
    sibling = quant_sibling(figure.benchmark, row["format"])
    return sibling if sibling in METRICS else None


def _newest_first(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a ``date`` column: a machine's latest run) with the newest run's rows first,
    each run's rows in their order."""
    return table.sort_values("date", ascending=False, kind="stable")


def format_blocks(table: pd.DataFrame) -> list[Block]:
    """``summary_table`` as blocks: the legend, then a section per machine (newest run first),
    in it a table per format (BF16, NVFP4, MXFP4, FP8: those the run has), values in human
    units. A quantized row's strategy is its format's of that kind.

    A regressed figure is bold with ``⚠`` and its change against the previous result.
    """
    exact = ", ".join(m.title for m in _SUMMARY.values() if m.factor == 1.0)
    timed = ", ".join(m.title for m in _SUMMARY.values() if m.factor == NOISE_FACTOR)
    blocks = [
        Block(
            "Per format: one layer of every strategy",
            text=(
                f"⚠: worse than the previous result of the same point by the PR gate's rule: "
                f"{exact}: any rise; {timed}: more than {NOISE_FACTOR:g}x (no paired run in a "
                f"history; moe_suite.metrics.NOISE_FACTOR), absolute seconds ({_HOST_BOUND}) only "
                "against a run on same-looking hardware (its same-size copies within "
                f"{HARDWARE_BAND:g}x of this run's; moe_suite.metrics.HARDWARE_BAND); between two "
                f"steady runs, also a copy ratio beyond {STRATEGY_FACTOR:g}x where its strategy "
                "rose so in the median over its shapes (moe_suite.metrics.STRATEGY_FACTOR). "
                f"Speed-up: `{BASELINE}` time / time. Copy ratio: time / a same-size copy's (1 is "
                "the out-of-place limit). Traffic ratio: bytes moved / (2 x layer bytes). Whole "
                "model: every MoE layer of the model on one rank.",
            ),
        )
    ]
    for (machine, env, profile, commit, date), rows in _newest_first(table).groupby(
        ["machine", "env", "profile", "commit", "date"], sort=False
    ):
        regressed = sum(len(r) for r in rows["regressions"])
        run = f"{env}, profile {profile}" if profile else env
        blocks.append(
            Block(
                f"`{machine}`: commit `{commit[:8]}` ({date:%Y-%m-%d %H:%M} UTC, {run})",
                level=3,
                text=tuple(_hardware_notes(rows)),
            )
        )
        for fmt, title in titled(rows["format"].dropna()):  # a table per format, BF16 first
            of_format = rows[rows["format"] == fmt]
            shown = of_format[["shape", "strategy"]].reset_index(drop=True)
            for column in _HEADERS:
                shown[_HEADERS[column]] = [_cell(row, column) for _, row in of_format.iterrows()]
            blocks.append(Block(title, level=4, table=shown))
        tally = f"{regressed} regressed figure(s) against the previous results."
        blocks.append(Block(text=(tally,)))
    return blocks


def changes_block(table: pd.DataFrame) -> Block:
    """What each machine's latest results (newest first) changed against its previous ones: a
    row per figure ``summary_table`` marks (the PR gate's rule), or a line saying none got
    worse."""
    worse, unchanged = [], []
    for (machine, commit), rows in _newest_first(table).groupby(["machine", "commit"], sort=False):
        marked = [(row, column) for _, row in rows.iterrows() for column in row["regressions"]]
        if not marked:
            unchanged.append(f"`{machine}` at `{commit[:8]}`: no figure worse by the gate's rule")
        for row, column in marked:
            cell = _cell(row, column)
            worse.append(
                {
                    "machine": machine,
                    "commit": commit[:8],
                    "shape": row["shape"],
                    "strategy": row["strategy"],
                    "figure": _SUMMARY[column].title,
                    "now": Cell(cell.text, benchmark=cell.benchmark, machine=machine),
                    "change": Cell(cell.mark, benchmark=cell.benchmark, machine=machine),
                }
            )
    return Block(
        "What changed since the previous results",
        table=pd.DataFrame(worse) if worse else None,
        items=tuple(unchanged),
    )


def _hardware_notes(rows: pd.DataFrame) -> list[str]:
    """A paragraph per earlier run the section's time figures are compared with: same-looking
    hardware (every figure judged) or not (absolute seconds shown, the copy ratio judged), and
    whether both runs were steady (whole strategies judged by ``STRATEGY_FACTOR``) or not."""
    runs = rows[_COMPARED].dropna(subset=["previous_commit"])
    notes = []
    for previous, scale, spread, previous_spread in runs.drop_duplicates().itertuples(index=False):
        if math.isnan(scale):
            note = (
                f"Compared with `{previous[:8]}`: one of the two runs timed no same-size copy, "
                "so its hardware is taken for the same as this run's; every figure judged."
            )
        elif same_hardware(scale):
            note = (
                f"Compared with `{previous[:8]}` on same-looking hardware: this run's same-size "
                f"copies took {scale:.2f}x as long as its (within {HARDWARE_BAND:g}x); every "
                "figure judged."
            )
        else:
            note = (
                f"**Other hardware:** compared with `{previous[:8]}`, whose host does not look "
                f"like this one: this run's same-size copies took {scale:.2f}x as long as its "
                f"(beyond {HARDWARE_BAND:g}x). Absolute seconds ({_HOST_BOUND}) are shown, not "
                "judged; the copy ratio (a ratio within one run) is judged instead."
            )
        spreads = (
            f"each shape's copies spread {_spread(spread)} here, {_spread(previous_spread)} there"
        )
        if steady(spread, previous_spread):
            note += (
                f" Both runs steady ({spreads}; within {STEADY_SPREAD:g}x): a strategy whose "
                f"copy ratio rose beyond {STRATEGY_FACTOR:g}x in the median over its shapes is "
                "marked where it rose so."
            )
        else:
            note += (
                f" **Not both steady** ({spreads}; beyond {STEADY_SPREAD:g}x or not timed): a "
                f"copy ratio is marked only beyond {NOISE_FACTOR:g}x; smaller steps are the "
                "paired run's (scripts/compare)."
            )
        notes.append(note)
    return notes


def _spread(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


#: The summary's and the front page's title.
TITLE = "moe-convert-bench: latest results"
#: Where the front page's plots go, in the dashboard's folder.
PAGE_PLOTS = "plots"


def summary_blocks(
    df: pd.DataFrame, costs: DeviceCosts | None, plots: list[str], not_drawn: tuple[str, ...] = ()
) -> list[Block]:
    """What the summary and the front page say, in this order: the whole rank's load under vLLM's
    setting (``moe_bench.rankload``: legacy, preallocated and the best strategy; load time
    measured or predicted from ``costs``, driver calls, peak transient and reserved memory, OOM,
    sleep mode), the refit of the same shapes (``moe_bench.refit``), the per-format tables
    (``format_blocks``), every strategy's rank load, what changed since the previous results
    (``changes_block``), every failed figure of each machine's latest commit (``gate``'s
    ``failed_benchmarks``), then ``plots`` (PNG paths relative to the document, as
    ``write_plots`` names them), after ``not_drawn``: a line per plot not drawn, saying why.
    Machines newest run first.
    """
    table = summary_table(df)
    loads = rank_load_table(df, costs)
    dates = table.groupby("machine")["date"].max().sort_values(ascending=False)
    newest = ", ".join(f"`{m}` ({d:%Y-%m-%d %H:%M} UTC)" for m, d in dates.items())
    blocks = [
        Block(TITLE, level=1, text=(f"Each machine's latest run, the newest first: {newest}.",)),
        *rank_load_blocks(loads, costs),
        *refit_blocks(df, loads),
        *format_blocks(table),
        *every_strategy_blocks(loads),
        changes_block(table),
    ]
    failed = failed_benchmarks(df)
    if failed:  # a cell that crashed, hung or raised: named here, its reason in the asv log
        blocks += [
            Block(f"Failed: {len(failed)} figure(s)", items=tuple(f"`{n}`" for n in failed)),
            Block(
                text=(
                    "Each failed alone, the rest of its grid measured; why (an exception, the "
                    "signal that killed the cell, its time box) is in the run's asv log. The gate "
                    "fails on them.",
                )
            ),
        ]
    by_name = sorted(dates.index, key=len, reverse=True)  # a longer name first: its own prefix
    images = []
    for plot in plots:
        machine = next((m for m in by_name if Path(plot).name.startswith(f"{m}-")), None)
        images.append(Image(plot, TIME if machine else None, machine))
    # Each machine's history first (newest machine first), then the rank load per layer, then
    # the rest of each machine's plots.
    rank = {m: i for i, m in enumerate(dates.index)}
    images.sort(
        key=lambda image: (
            0 if image.path.endswith("-history.png") else 1 if image.machine is None else 2,
            rank.get(image.machine, -1),
        )
    )
    blocks.append(Block("Plots", text=not_drawn, images=tuple(images)))
    return blocks


def _plots(df: pd.DataFrame, out_dir: Path) -> tuple[list[str], tuple[str, ...]]:
    """The PNGs of ``moe_bench.plots`` written into ``out_dir``, their paths relative to it;
    and a line per plot not drawn: the rank load per layer where the library is not installed
    (``rankload.NO_CURVES``)."""
    written = write_plots(df, out_dir)
    curves = layer_curves()
    if curves is not None:
        written.append(write_rank_load_plot(curves, recorded_runs(), out_dir))
    return [p.name for p in written], () if curves is not None else (NO_CURVES,)


def _write_summary(
    df: pd.DataFrame, out_dir: Path, plots: list[str], not_drawn: tuple[str, ...]
) -> Path:
    """``out_dir/summary.md``: ``summary_blocks`` as markdown, ``plots`` (PNGs in ``out_dir``)."""
    path = out_dir / "summary.md"
    path.write_text(to_markdown(summary_blocks(df, read_costs(), plots, not_drawn)))
    return path


def write_summary(results_dir, out_dir) -> Path:
    """Load ``results_dir``, write ``out_dir/summary.md`` (``summary_blocks`` as markdown) and
    its plots, PNGs beside it; return the summary's path. Raises
    ``moe_bench.results.ResultsError`` when there are no results (or a figure the metrics table
    does not know).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = load_results(results_dir)
    return _write_summary(df, out_dir, *_plots(df, out_dir))


def write_front_page(
    results_dir,
    html_dir,
    link: Link,
    explore: str,
    engine: EngineAxis | None = None,
    summary: Path | None = None,
) -> Path:
    """Write the dashboard's front page, ``html_dir/index.html``: ``summary_blocks`` as HTML,
    the plots in ``html_dir/plots/``, every figure linked by ``link`` to its graph, ``explore``
    the explorer's URL relative to the page; return its path. ``summary``: a folder to write
    ``write_summary``'s page of the same results into too, its plots copied from the front
    page's (drawn once: docs/dashboard.md, "Summary and plots"). For an engine's history
    (``engine``: ``engine_page.engine_axis`` of its config) the page is ``engine_blocks``
    instead, titled with the engine and the measured range (its graphs are the explorer's; no
    ``summary``). Raises as ``write_summary``."""
    html_dir = Path(html_dir)
    df = load_results(results_dir)
    if engine is None:
        plots, not_drawn = _plots(df, html_dir / PAGE_PLOTS)
        blocks = summary_blocks(df, read_costs(), [f"{PAGE_PLOTS}/{p}" for p in plots], not_drawn)
        if summary is not None:
            summary.mkdir(parents=True, exist_ok=True)
            for name in plots:
                shutil.copyfile(html_dir / PAGE_PLOTS / name, summary / name)
            _write_summary(df, summary, plots, not_drawn)
    else:
        blocks = engine_blocks(df, engine.engine, engine.branch, engine.commits(set(df["commit"])))
    path = html_dir / "index.html"
    path.write_text(to_html(blocks, link=link, title=blocks[0].heading, explore=explore))
    return path


def comment_markdown(
    table: pd.DataFrame, base: str, head: str, *, paired_threshold: float | None = None
) -> str:
    """The PR comment: ``moe_bench.compare.compare_commits``' verdict, rendered, nothing re-judged.

    ``table`` has ``compare.VERDICT_COLUMNS``; ``base``/``head`` are the commits' hashes;
    ``paired_threshold`` the paired run's threshold (None: no paired run). The verdict line
    counts the failing rows by status; every failing row is listed, then the table in human
    units, failing rows first, each named by its format, figure, shape and strategy. Points
    skipped in both commits (not selected with ``-b``, or not runnable on this machine) are
    counted, not listed: a subset run would otherwise bury the figures under hundreds of empty
    rows. An engine PR's reference cells (``compare.REFERENCE``) are shown and counted, never
    judged.
    """
    failing = table[table["failing"]]
    counts = failing["status"].value_counts()
    verdict = (
        "FAILED: " + ", ".join(f"{n} {status}" for status, n in counts.items())
        if len(failing)
        else "passed"
    )
    rows = "".join(
        f"- {_title(row.format)} `{_name(row.benchmark)}` {row.shape or ''} {row.strategy or ''}: "
        f"{row.status}{_why(row)}\n"
        for row in failing.itertuples()
    )
    if paired_threshold is None:
        how = (
            f"time-derived figures judged by a factor of {NOISE_FACTOR:g} (no paired run: "
            "only gross slowdowns are caught)"
        )
    else:
        how = (
            f"time judged by the paired A/B run (`{PAIRED_TIME}`: regressed when the head/base "
            f"interval lies above {paired_threshold:g})"
        )
    skipped = table["status"] == "n/a"
    references = int((table["status"] == REFERENCE).sum())
    table = table[~skipped]
    shown = pd.DataFrame(
        {
            "format": table["format"].map(_title),
            "benchmark": table["benchmark"].map(_name),
            "shape": table["shape"].fillna(""),
            "strategy": table["strategy"].fillna(""),
            "base": [
                human(v, u) for v, u in zip(table["value_base"], table["display"], strict=True)
            ],
            "head": [
                human(v, u) for v, u in zip(table["value_head"], table["display"], strict=True)
            ],
            "ratio": table["ratio"].map(lambda r: "" if math.isnan(r) else _ratio(r)),
            "verdict": [
                f"⚠ {s}" if bad else s
                for s, bad in zip(table["status"], table["failing"], strict=True)
            ],
            "note": table["note"].fillna(""),
        }
    )
    machines = table["machine"].replace("", pd.NA).dropna()
    if machines.nunique() > 1:
        shown.insert(0, "machine", table["machine"])
    return (
        f"## PR gate: {verdict}\n\n"
        + (f"{rows}\n" if rows else "")
        + f"`{head[:8]}` (head) vs `{base[:8]}` (base). Compared exactly: {_exact_units()}; "
        f"{how}.\n\n"
        + shown.to_markdown(index=False, disable_numparse=True)
        + "\n"
        + (
            f"\n{int(skipped.sum())} points with nothing to compare (n/a: skipped) "
            "are not listed.\n"
            if skipped.any()
            else ""
        )
        + (
            f"\n{references} figures of this suite's reference cells ({REFERENCE}: the same "
            "code at both commits) are shown, not judged.\n"
            if references
            else ""
        )
    )


def _name(benchmark: str) -> str:
    return METRICS[benchmark].short


def _title(fmt: str) -> str:
    return FORMAT_TITLES.get(fmt, fmt)


def _ratio(ratio: float) -> str:
    """``ratio`` to 3 significant digits, more where 3 would show a change as 1.00 (one launch
    more in 2,823: ``1.0004``, not a "regressed" 1.00 beside "allowed 1")."""
    for digits in range(3, 17):
        text = f"{ratio:#.{digits}g}"
        if ratio == 1 or float(text) != 1:
            break
    return text


def _why(row) -> str:
    parts = (
        [f"head / base = {_ratio(row.ratio)}, allowed {row.threshold:g}"]
        if (math.isfinite(row.ratio) and math.isfinite(row.threshold))
        else []
    )
    parts += [row.note] if row.note else []
    return f" ({'; '.join(parts)})" if parts else ""


def _exact_units() -> str:
    exact = [m for m in METRICS.values() if m.rule == EXACT]
    return ", ".join(sorted({m.title if m.unit == "ratio" else m.unit for m in exact}))
