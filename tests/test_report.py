"""The markdown summary and PR comment on the fabricated asv results (``fixtures/asv_results``).

Fixture: 4 commits on machine ``fixture-box``; 2 shapes x 4 strategies (``flashinfer`` skipped);
in the latest commit ``strided_copy`` on ``qwen3-235b-a22b/tp4`` takes 1.6 x the time, copy
ratio and whole-model seconds and 1.5 x the peak bytes of the commit before. By the metrics
table's rules the bytes regressed (exact) and the time-derived figures did not (within
``NOISE_FACTOR``), in the summary and in the PR comment alike.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from moe_bench import cli
from moe_bench.compare import compare_commits
from moe_bench.document import to_markdown
from moe_bench.report import changes_block, comment_markdown, format_blocks, summary_table
from moe_bench.results import load_results
from moe_bench.units import human
from moe_suite.metrics import METRICS, NOISE_FACTOR, quant_sibling

RESULTS = Path(__file__).parent / "fixtures" / "asv_results"
LATEST, PREVIOUS = "c2fb4ee0", "7128b89f"
QWEN = "qwen3-235b-a22b/tp4"
STRIDED_QWEN_PEAK = 805306368 + 402653184  # T13 + T2 of the fixture's qwen3 layer, bytes


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    return load_results(RESULTS)


def row(table: pd.DataFrame, shape: str, strategy: str) -> pd.Series:
    (index,) = table.index[(table["shape"] == shape) & (table["strategy"] == strategy)]
    return table.loc[index]


def with_latest(
    results: pd.DataFrame, strategy: str, benchmark_part: str, factor: float
) -> pd.DataFrame:
    """``results`` with the latest value of one qwen3 point multiplied by ``factor``."""
    changed = results.copy()
    point = (
        changed["commit"].str.startswith(LATEST)
        & (changed["shape"] == QWEN)
        & (changed["strategy"] == strategy)
        & changed["benchmark"].str.contains(benchmark_part)
    )
    assert point.sum() == 1
    changed.loc[point, "value"] *= factor
    return changed


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.048, "seconds", "48.0 ms"),
        (0.12, "seconds", "120 ms"),
        (11.28, "seconds", "11.3 s"),
        (2.5e-6, "seconds", "2.50 µs"),
        (1811939328, "bytes", "1.69 GiB"),
        (3 * 2**20, "bytes", "3.00 MiB"),
        (512, "bytes", "512 B"),
        (1.6, "ratio", "1.60"),
        (8, "experts", "8 experts"),
        (3, "launches", "3 launches"),
        (1.0, "ratio", "1.00"),
        (3221225472, "bytes", "3.00 GiB"),
        (math.nan, "bytes", "n/a"),
    ],
)
def test_human_units(value, unit, text):
    assert human(value, unit) == text


def test_summary_has_every_figure_of_the_latest_commit(results):
    table = summary_table(results)
    assert len(table) == 8 and set(table["commit"].str[:8]) == {LATEST}
    strided = row(table, QWEN, "strided_copy")
    assert strided["time"] == pytest.approx(0.048)
    assert strided["speedup"] == pytest.approx(0.120 / 0.048)
    assert strided["copy_ratio"] == pytest.approx(1.6)
    assert strided["peak_bytes"] == int(STRIDED_QWEN_PEAK * 1.5)
    assert strided["whole_model"] == pytest.approx(2.82 * 1.6)
    assert math.isnan(strided["traffic_ratio"])  # the fixture predates the Traffic benchmarks
    assert row(table, QWEN, "legacy")["speedup"] == 1.0
    assert row(table, "deepseek-v3/tp8", "strided_copy")["speedup"] == pytest.approx(4.0)
    skipped = row(table, QWEN, "flashinfer")
    assert (
        math.isnan(skipped["time"])
        and math.isnan(skipped["speedup"])
        and skipped["regressions"] == ()
    )


def test_summary_of_two_machines_keeps_each_machine_to_its_own_commits(results):
    # A fresh machine's first run beside a checked-in history: two machines, other commits.
    other = results.assign(machine="other-box", commit=results["commit"].str.replace("a", "f"))
    table = summary_table(pd.concat([results, other], ignore_index=True))
    assert len(table) == 16
    for _, rows in table.groupby("machine"):
        assert len(rows) == 8 and rows["commit"].nunique() == 1
    assert (table[table["strategy"] == "legacy"]["speedup"] == 1.0).all()


def test_summary_marks_by_the_gate_rules(results):
    table = summary_table(results)
    strided = row(table, QWEN, "strided_copy")
    # bytes are exact: marked; 1.6 x time, copy ratio and whole model: within NOISE_FACTOR.
    assert strided["regressions"] == ("peak_bytes",)
    assert strided["peak_bytes_change"] == pytest.approx(1.5)
    assert strided["time_change"] == pytest.approx(1.6)
    others = table.drop(index=strided.name)
    assert all(r == () for r in others["regressions"])


@pytest.mark.parametrize(
    ("benchmark", "column", "factor", "marked"),
    [
        ("track_layer_seconds", "time", NOISE_FACTOR * 1.01, True),  # just beyond the noise factor
        ("track_layer_seconds", "time", NOISE_FACTOR * 0.99, False),  # within it
        ("track_whole_model_seconds", "whole_model", NOISE_FACTOR * 1.01, True),
        ("LayerTime.track_copy_ratio", "copy_ratio", NOISE_FACTOR * 0.99, False),
        ("PeakMemory", "peak_bytes", 1 + 1e-9, True),  # 3 bytes more of 3 GiB: exact
        ("track_layer_seconds", "time", 0.5, False),  # faster: never a regression
    ],
)
def test_regression_threshold_and_direction(results, benchmark, column, factor, marked):
    table = summary_table(with_latest(results, "legacy", benchmark, factor))
    assert (column in row(table, QWEN, "legacy")["regressions"]) is marked


def test_previous_result_skips_a_failed_run(results):
    failed = results.copy()
    point = (
        failed["commit"].str.startswith(PREVIOUS)
        & (failed["shape"] == QWEN)
        & (failed["strategy"] == "strided_copy")
        & failed["benchmark"].str.contains("PeakMemory")
    )
    failed.loc[point, ["value", "failed"]] = [math.nan, True]
    strided = row(summary_table(failed), QWEN, "strided_copy")
    assert "peak_bytes" in strided["regressions"]  # compared with the commit before the failure
    assert strided["peak_bytes_change"] == pytest.approx(1.5)


def test_summary_needs_the_suite_benchmarks(results):
    with pytest.raises(ValueError, match="none of the summary's benchmarks"):
        summary_table(results[results["benchmark"].str.contains("Profile")])


def test_markdown_in_human_units_with_marks(results):
    text = to_markdown(format_blocks(summary_table(results)))
    assert f"\n### `fixture-box`: commit `{LATEST}` (2026-11-04 12:00 UTC" in text
    lines = {
        line.split("|")[2].strip() + "@" + line.split("|")[1].strip(): line
        for line in text.splitlines()
        if line.startswith("| ") and "strategy" not in line
    }
    strided = lines[f"strided_copy@{QWEN}"]
    assert "| 48.0 ms " in strided and "**1.69 GiB** ⚠ +50%" in strided
    assert "2.50×" in strided and "| 4.51 s " in strided and strided.count("⚠") == 1
    legacy = lines[f"legacy@{QWEN}"]
    assert "120 ms" in legacy and "3.00 GiB" in legacy and "1.00×" in legacy and "⚠" not in legacy
    assert lines[f"flashinfer@{QWEN}"].count("n/a") == 6
    assert "1 regressed figure(s)" in text
    assert f"more than {NOISE_FACTOR:g}x" in text


def with_quantized(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` plus, for every BF16 point of qwen3 that has a quantized sibling figure
    (``metrics.quant_sibling``), the same values as an NVFP4 and an FP8 shape's under their
    format's name (and an MXINT4 one's), each strategy standing for the kind of the same name
    (``legacy``) or for ``fast``."""
    kinds = {"legacy": "legacy", "strided_copy": "fast"}
    rows = results[(results["shape"] == QWEN) & results["strategy"].isin(kinds)]
    quantized = [
        rows.assign(
            benchmark=rows["benchmark"].map({n: quant_sibling(n, fmt) for n in rows["benchmark"]}),
            shape=shape,
            strategy=rows["strategy"].map(kinds),
        ).pipe(lambda frame: frame[[name in METRICS for name in frame["benchmark"]]])
        for fmt, shape in (
            ("fp8", "llama-4-maverick-fp8/tp8"),
            ("nvfp4", "qwen3-235b-a22b-nvfp4/tp4"),
            ("mxint4", "kimi-k2-thinking-mxint4/tp8"),
        )
    ]
    return pd.concat([results, *quantized], ignore_index=True)


def test_the_summary_has_a_table_per_format_bf16_first(results):
    table = summary_table(with_quantized(results))
    assert set(table["format"]) == {"bf16", "nvfp4", "fp8", "mxint4"}
    assert (table.loc[table["shape"] == QWEN, "format"] == "bf16").all()
    fast = row(table, "qwen3-235b-a22b-nvfp4/tp4", "fast")
    assert fast["format"] == "nvfp4" and fast["speedup"] == pytest.approx(0.120 / 0.048)
    # the quantized peak rose 1.5x like its BF16 source: exact, so marked by the gate's rule
    assert fast["regressions"] == ("peak_bytes",)
    text = to_markdown(format_blocks(table))
    headers = [line for line in text.splitlines() if line.startswith("#### ")]
    # FORMATS' order, not the run's; each format's title
    assert headers == ["#### BF16", "#### NVFP4", "#### FP8 per-tensor", "#### MXINT4"]
    nvfp4 = text[text.index("#### NVFP4") : text.index("#### FP8")]
    assert "qwen3-235b-a22b-nvfp4/tp4 | fast" in nvfp4 and "**1.69 GiB** ⚠ +50%" in nvfp4
    assert QWEN + " " not in nvfp4 and "llama-4" not in nvfp4
    assert "kimi-k2-thinking-mxint4/tp8 | fast" in text[text.index("#### MXINT4") :]
    assert "4 regressed figure(s)" in text
    assert "Speed-up: `legacy` time / time." in text  # the legend names the baseline


def test_what_changed_lists_each_figure_the_gate_marks(results):
    text = to_markdown([changes_block(summary_table(results))])
    assert text.startswith("## What changed since the previous results\n")
    (worse,) = [line for line in text.splitlines() if line.startswith("| fixture-box")]
    cells = [cell.strip() for cell in worse.strip("|").split("|")]
    assert cells == [
        "fixture-box",
        LATEST,
        QWEN,
        "strided_copy",
        "peak transient",
        "1.69 GiB",
        "⚠ +50%",
    ]


def test_write_summary_writes_markdown_and_plots(tmp_path, capsys):
    assert cli.main(["summary", "--results", str(RESULTS), "--out", str(tmp_path / "summary")]) == 0
    path = Path(capsys.readouterr().out.strip())  # scripts/bench cats it
    assert path == tmp_path / "summary" / "summary.md"
    text = path.read_text()
    images = [line[line.index("(") + 1 : -1] for line in text.splitlines() if line.startswith("![")]
    assert "fixture-box-history.png" in images and "rank-load-per-layer.png" in images
    assert len(images) == 5
    assert all((path.parent / image).stat().st_size > 0 for image in images)


def test_summary_without_results_is_one_error_line(tmp_path, capsys):
    assert cli.main(["summary", "--results", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moe-bench summary: error: ") and "no such results directory" in err
    assert len(err.splitlines()) == 1


def comment(results, base, head) -> tuple[str, list[str]]:
    """The PR comment of ``base`` vs ``head`` and its table rows."""
    table = compare_commits(results, base, head)
    full = {
        c: results.loc[results["commit"].str.startswith(c), "commit"].iloc[0] for c in (base, head)
    }
    text = comment_markdown(table, full[base], full[head])
    return text, [
        line for line in text.splitlines() if line.startswith("| ") and "benchmark" not in line
    ]


def test_comment_renders_the_gate_verdict(results):
    text, rows = comment(results, PREVIOUS, LATEST)
    assert text.startswith("## PR gate: FAILED: 1 regressed\n")
    assert f"`{LATEST}` (head) vs `{PREVIOUS}` (base)" in text
    # bytes compare exactly: regressed; time (x1.6) is within NOISE_FACTOR without a paired run.
    worse = [r for r in rows if "⚠" in r]
    assert len(worse) == 1 and rows[0] == worse[0]
    assert "PeakMemory.track_peak_transient_bytes" in worse[0] and "⚠ regressed" in worse[0]
    assert "1.12 GiB" in worse[0] and "1.69 GiB" in worse[0] and "1.50" in worse[0]
    timed = next(
        r for r in rows if "track_layer_seconds" in r and QWEN in r and "strided_copy" in r
    )
    assert "30.0 ms" in timed and "48.0 ms" in timed and "1.60" in timed and "| same " in timed
    assert not any("skipped in both" in r for r in rows)  # flashinfer: counted, not listed
    assert "8 points with nothing to compare (n/a: skipped) are not listed" in text


def test_comment_reversed_is_better_and_failures_are_marked(results):
    text, rows = comment(results, LATEST, PREVIOUS)
    assert text.startswith("## PR gate: passed") and sum("| improved " in r for r in rows) == 1
    broken = results.copy()
    broken.loc[
        broken["commit"].str.startswith(LATEST)
        & (broken["strategy"] == "legacy")
        & (broken["shape"] == QWEN)
        & broken["benchmark"].str.contains("track_layer_seconds"),
        ["value", "failed"],
    ] = [math.nan, True]
    text, rows = comment(broken, PREVIOUS, LATEST)
    assert text.startswith("## PR gate: FAILED: 1 failed, 1 regressed")  # in row order
    assert sum("⚠ failed" in r and "failed in head" in r for r in rows) == 1
