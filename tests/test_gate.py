"""The PR gate (moe-bench compare), the budgets gate (moe-bench gate) and load_results, on
fabricated asv result files (asv 0.6 format, read back through asv's own loader), and the
paired A/B file (``fixtures/paired.json``, the schema of ``benchmarks.paired``'s output).

Every former silent pass of issue 13 has a test here asserting the exit code and the message."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from moe_bench import cli
from moe_bench.results import COLUMNS, ResultsError, load_results
from moe_suite.metrics import NOISE_FACTOR

PEAK = "bench_convert.PeakMemory.track_peak_transient_bytes"
RATIO = "bench_convert.LayerTime.track_copy_ratio"
TIME = "bench_convert.LayerTime.track_layer_seconds"
SHAPES = ["qwen3-30b-a3b/tp2", "deepseek-v3/tp4"]
STRATEGIES = ["strided_copy", "flashinfer"]
EXPERTS = "bench_convert.Profile.track_timed_experts"
UNITS = {PEAK: "bytes", RATIO: "ratio", TIME: "seconds", EXPERTS: "experts"}
BASE, HEAD = "a" * 40, "b" * 40
# values in (shape, strategy) order; NaN = skipped (n/a), None = failed
GOOD = {
    PEAK: [1000.0, math.nan, 5000.0, math.nan],
    RATIO: [1.2, math.nan, 1.1, math.nan],
    TIME: [0.010, math.nan, 0.050, math.nan],
    EXPERTS: [8.0, 8.0, 8.0, 8.0],
}
PAIRED = Path(__file__).parent / "fixtures" / "paired.json"


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def write_results(
    root, commit, values, *, machine="cpu-box", date=1_700_000_000_000, versions=None, units=None
):
    """One asv result file for ``commit`` with ``values[benchmark]``, plus benchmarks.json and
    machine.json, as ``asv run`` writes them (``units`` adds or overrides benchmarks' units)."""
    params = [[repr(s) for s in SHAPES], [repr(s) for s in STRATEGIES]]
    _write(
        root / "benchmarks.json",
        {
            **{
                name: {
                    "name": name,
                    "param_names": ["shape", "strategy"],
                    "params": params,
                    "unit": unit,
                    "version": "1",
                    "type": "track",
                }
                for name, unit in {**UNITS, **(units or {})}.items()
            },
            "version": 2,
        },
    )
    _write(root / machine / "machine.json", {"machine": machine, "profile": "cpu", "version": 1})
    _write(
        root / machine / f"{commit[:8]}-existing-py.json",
        {
            "commit_hash": commit,
            "env_name": "existing-py",
            "date": date,
            "python": "3.11",
            "params": {"machine": machine, "python": "3.11"},
            "requirements": {},
            "env_vars": {},
            "result_columns": ["result", "params", "version"],
            "results": {
                name: [vals, params, (versions or {}).get(name, "1")]
                for name, vals in values.items()
            },
            "durations": {},
            "version": 2,
        },
    )


def scaled(benchmark, factor):
    """GOOD with ``benchmark``'s first value times ``factor``."""
    values = {name: list(vals) for name, vals in GOOD.items()}
    values[benchmark][0] *= factor
    return values


def run_compare(tmp_path, head_values, capsys, *, args=(), base_values=GOOD, **kwargs):
    """Compare ``base_values`` (commit BASE) with ``head_values`` (HEAD, written with kwargs)."""
    write_results(tmp_path, BASE, base_values)
    write_results(tmp_path, HEAD, head_values, date=1_700_000_100_000, **kwargs)
    code = cli.main(
        [
            "compare",
            BASE[:8],
            HEAD[:8],
            "--results",
            str(tmp_path),
            "--out",
            str(tmp_path / "comment.md"),
            *args,
        ]
    )
    return code, capsys.readouterr()


def comment(tmp_path) -> str:
    return (tmp_path / "comment.md").read_text()


def table_row(text: str, *cells: str) -> str:
    """The one markdown table row of ``text`` holding every one of ``cells``."""
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and all(c in line for c in cells)
    ]
    return line


def test_load_results_table(tmp_path):
    write_results(tmp_path, BASE, {**GOOD, PEAK: [1000.0, math.nan, None, math.nan]})
    frame = load_results(tmp_path)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == len(GOOD) * 4
    row = frame[
        (frame.benchmark == PEAK)
        & (frame["shape"] == "qwen3-30b-a3b/tp2")
        & (frame.strategy == "strided_copy")
    ].iloc[0]
    assert (row.value, row.unit, row.failed, row.version, row.profile) == (
        1000.0,
        "bytes",
        False,
        "1",
        "cpu",
    )
    assert row.commit == BASE and row.date == pd.Timestamp(1_700_000_000_000, unit="ms", tz="UTC")
    failed = frame[(frame.benchmark == PEAK) & frame.failed]
    assert failed[["shape", "strategy"]].values.tolist() == [["deepseek-v3/tp4", "strided_copy"]]
    assert math.isnan(failed.iloc[0].value)
    skipped = frame[(frame.benchmark == PEAK) & (frame.strategy == "flashinfer")]
    assert skipped.value.isna().all() and not skipped.failed.any()


def test_load_results_unparametrised_benchmark(tmp_path):
    write_results(tmp_path, BASE, GOOD)
    path = tmp_path / "cpu-box" / f"{BASE[:8]}-existing-py.json"
    data = json.loads(path.read_text())
    data["results"][EXPERTS] = [[7.0], [], "1"]
    path.write_text(json.dumps(data))
    bench = json.loads((tmp_path / "benchmarks.json").read_text())
    bench[EXPERTS] = {
        "name": EXPERTS,
        "param_names": [],
        "params": [],
        "unit": "experts",
        "version": "1",
    }
    (tmp_path / "benchmarks.json").write_text(json.dumps(bench))
    row = load_results(tmp_path).query(f"benchmark == '{EXPERTS}'")
    assert (
        row[["value", "unit"]].values.tolist() == [[7.0, "experts"]] and row["shape"].isna().all()
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: None, "no such results directory"),
        (lambda root: (root / "cpu-box").mkdir(parents=True), "benchmarks.json: missing"),
        (
            lambda root: (
                write_results(root, BASE, GOOD)
                # JSON, not asv's (not JSON at all, cut short, is left out: test_reliability.py)
                or (root / "cpu-box" / f"{BASE[:8]}-existing-py.json").write_text('{"not": 1}')
            ),
            "corrupt",
        ),
        (
            lambda root: (
                write_results(root, BASE, GOOD)
                or (root / "cpu-box" / f"{BASE[:8]}-existing-py.json").unlink()
            ),
            "no benchmark results",
        ),
    ],
)
def test_load_results_refuses_missing_or_corrupt(tmp_path, make, message):
    root = tmp_path / "results"
    make(root)
    with pytest.raises(ResultsError, match=message) as err:
        load_results(root)
    assert str(root) in str(err.value)


@pytest.mark.parametrize(
    "benchmark, factor, expected",
    [
        (PEAK, 1.0, 0),  # unchanged
        (PEAK, 0.5, 0),  # improved
        (PEAK, 1.001, 1),  # one byte more in a thousand: bytes are exact
        (RATIO, NOISE_FACTOR * 0.99, 0),  # time-derived, no paired run: the noise factor
        (RATIO, NOISE_FACTOR * 1.01, 1),
        (TIME, NOISE_FACTOR * 0.99, 0),
        (TIME, NOISE_FACTOR * 1.01, 1),
        (TIME, 0.3, 0),
    ],
)
def test_compare_rule_per_metric(tmp_path, capsys, benchmark, factor, expected):
    code, out = run_compare(tmp_path, scaled(benchmark, factor), capsys)
    assert code == expected
    assert ("FAILED: 1 regressed" in comment(tmp_path)) == bool(expected)
    assert comment(tmp_path) == out.out.removesuffix("\n")
    if expected:
        assert f"regressed (head / base = {factor:#.3g}" in comment(tmp_path)
        assert "⚠ regressed" in table_row(
            comment(tmp_path), benchmark.split(".", 1)[1], "qwen3-30b-a3b/tp2", "strided_copy"
        )


def test_a_regression_that_rounds_to_1_shows_its_ratio(tmp_path, capsys):
    """One launch more in 2,823 (vLLM 0.34.0's FP8 rotation with a clone): not "1.00" beside
    "allowed 1", in the verdict line and in the table."""
    code, _ = run_compare(tmp_path, scaled(PEAK, 2824 / 2823), capsys)
    text = comment(tmp_path)
    assert code == 1 and "regressed (head / base = 1.0004, allowed 1)" in text
    assert "| 1.0004 " in table_row(
        text, PEAK.split(".", 1)[1], "qwen3-30b-a3b/tp2", "strided_copy"
    )


def test_compare_experts_change_fails_and_the_comment_says_so(tmp_path, capsys):
    code, _ = run_compare(tmp_path, {**GOOD, EXPERTS: [16.0, 8.0, 8.0, 8.0]}, capsys)
    assert code == 1
    text = comment(tmp_path)
    assert text.startswith("## PR gate: FAILED: 1 changed")
    assert "⚠ changed" in table_row(
        text, "track_timed_experts", "qwen3-30b-a3b/tp2", "strided_copy"
    )


def test_compare_failed_benchmark_fails(tmp_path, capsys):
    values = {**GOOD, RATIO: [None, math.nan, 1.1, math.nan]}
    code, out = run_compare(tmp_path, values, capsys)
    assert code == 1
    assert comment(tmp_path).startswith("## PR gate: FAILED: 1 failed")
    assert "failed in head" in table_row(
        comment(tmp_path), "track_copy_ratio", "qwen3-30b-a3b/tp2", "strided_copy"
    )


def test_compare_missing_benchmark_fails(tmp_path, capsys):
    values = {name: vals for name, vals in GOOD.items() if name != RATIO}
    code, _ = run_compare(tmp_path, values, capsys)
    assert code == 1
    assert comment(tmp_path).startswith("## PR gate: FAILED: 4 missing")


def test_a_run_limited_by_bench_compares_what_it_selected(tmp_path, capsys):
    """A base measured in full before (a base several PRs share) against a head run with asv's
    ``-b``: the figures ``-b`` left out are not missing (the engine PR tests' runs found 48)."""
    values = {name: vals for name, vals in GOOD.items() if name != RATIO}
    selected = r"^bench_convert\.(PeakMemory|Profile)\."
    code, _ = run_compare(tmp_path, values, capsys, args=("--bench", selected))
    assert code == 0 and comment(tmp_path).startswith("## PR gate: passed")
    assert "track_copy_ratio" not in comment(tmp_path)
    code, _ = run_compare(tmp_path, values, capsys, args=("-b", r"LayerTime"))
    assert code == 1 and comment(tmp_path).startswith("## PR gate: FAILED: 4 missing")


def test_compare_new_benchmark_that_failed_in_head_fails(tmp_path, capsys):
    base = {name: vals for name, vals in GOOD.items() if name != RATIO}
    code, _ = run_compare(
        tmp_path, {**GOOD, RATIO: [None, math.nan, 1.1, math.nan]}, capsys, base_values=base
    )
    assert code == 1
    text = comment(tmp_path)
    assert text.startswith("## PR gate: FAILED: 1 failed") and "passed" not in text
    assert "⚠ failed" in table_row(text, "track_copy_ratio", "qwen3-30b-a3b/tp2", "strided_copy")
    assert "| new " in table_row(text, "track_copy_ratio", "deepseek-v3/tp4", "strided_copy")


def test_compare_measured_in_base_but_na_in_head_fails(tmp_path, capsys):
    code, _ = run_compare(tmp_path, {**GOOD, PEAK: [math.nan, math.nan, 5000.0, math.nan]}, capsys)
    assert code == 1
    text = comment(tmp_path)
    assert text.startswith("## PR gate: FAILED: 1 n/a in head")
    assert "measured in base, skipped in head" in table_row(
        text, "track_peak_transient_bytes", "qwen3-30b-a3b/tp2", "strided_copy"
    )


def write_paired(tmp_path, **changes):
    data = json.loads(PAIRED.read_text())
    rows = changes.pop("rows", None)
    if rows is not None:
        data["rows"] = [{**data["rows"][0], **row} for row in rows]
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({**data, **changes}))
    return str(path)


def paired_with(tmp_path, **fields):
    """The fixture with top-level ``fields`` replaced as they are (``rows`` too)."""
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({**json.loads(PAIRED.read_text()), **fields}))
    return str(path)


def test_compare_paired_rows_decide_time(tmp_path, capsys):
    # A 3x one-layer time in asv's run, but the paired run says "same": time is not failed.
    paired = write_paired(tmp_path)
    code, _ = run_compare(tmp_path, scaled(TIME, 3.0), capsys, args=["--paired", paired])
    assert code == 0
    text = comment(tmp_path)
    assert text.startswith("## PR gate: passed") and "interval lies above 1.1" in text
    assert "info (decided by paired)" in table_row(
        text, "track_layer_seconds", "qwen3-30b-a3b/tp2", "strided_copy"
    )
    row = table_row(text, "paired.time_ratio", "qwen3-30b-a3b/tp2")
    assert "10.2 ms" in row and "10.3 ms" in row and "CI [0.970, 1.040], 15 pairs" in row


@pytest.mark.parametrize("verdict, error", [("regressed", None), ("failed", "head crashed")])
def test_compare_paired_regression_or_failure_fails(tmp_path, capsys, verdict, error):
    paired = write_paired(
        tmp_path,
        rows=[{"verdict": verdict, "error": error, "ratio": 1.3, "ci_low": 1.2, "ci_high": 1.4}],
    )
    code, _ = run_compare(tmp_path, GOOD, capsys, args=["--paired", paired])
    assert code == 1
    text = comment(tmp_path)
    assert text.startswith(f"## PR gate: FAILED: 1 {verdict}")
    assert f"⚠ {verdict}" in table_row(text, "paired.time_ratio", "qwen3-30b-a3b/tp2")
    if error:
        assert "failed: head crashed" in text


def test_compare_paired_without_rows_or_with_nothing_to_compare_passes(tmp_path, capsys):
    # -b PeakMemory selects no timed benchmark: the paired run has no rows, nothing to judge.
    code, _ = run_compare(
        tmp_path, GOOD, capsys, args=["--paired", write_paired(tmp_path, rows=[])]
    )
    assert code == 0
    # A strategy new in head has no base to pair with: listed with its reason, not failing.
    why = "strategy 'triton' is not registered in base"
    paired = write_paired(
        tmp_path,
        rows=[
            {
                "verdict": "n/a",
                "error": why,
                "ratio": None,
                "ci_low": None,
                "ci_high": None,
                "base_seconds": None,
                "head_seconds": None,
            }
        ],
    )
    code, _ = run_compare(tmp_path, GOOD, capsys, args=["--paired", paired])
    assert code == 0
    assert comment(tmp_path).startswith("## PR gate: passed")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: str(tmp / "absent.json"), "no such paired file"),
        (lambda tmp: (tmp / "p.json").write_text("{") and str(tmp / "p.json"), "not JSON"),
        (
            lambda tmp: write_paired(tmp, rows=[{"verdict": "maybe"}]),
            "verdict 'maybe' is not one of",
        ),
        (
            lambda tmp: write_paired(tmp, rows=[{"ratio": None}]),
            "a verdict with non-finite figures",
        ),
        (lambda tmp: write_paired(tmp, threshold=None), "not a paired file"),
        (lambda tmp: paired_with(tmp, rows="none"), "'rows' is not a list"),
        (lambda tmp: write_paired(tmp, head="c" * 40), "a paired file of other commits"),
    ],
)
def test_compare_bad_paired_file_is_an_error(tmp_path, capsys, make, message):
    code, out = run_compare(tmp_path, GOOD, capsys, args=["--paired", make(tmp_path)])
    assert code == 2
    assert message in out.err and "Traceback" not in out.err
    assert len(out.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown benchmark", "not in the metrics table: bench_misc.Widgets.track_widgets"),
        (
            "unknown unit",
            "bench_convert.PeakMemory.track_peak_transient_bytes is in unit 'kilobytes'",
        ),
        ("infinite", "infinite value of bench_convert.PeakMemory.track_peak_transient_bytes"),
    ],
)
def test_compare_refuses_what_the_table_does_not_cover(tmp_path, capsys, case, message):
    units, head = None, GOOD
    if case == "unknown benchmark":
        units, head = (
            {"bench_misc.Widgets.track_widgets": "widgets"},
            {**GOOD, "bench_misc.Widgets.track_widgets": [1.0, 1.0, 1.0, 1.0]},
        )
    if case == "unknown unit":
        units = {PEAK: "kilobytes"}
    if case == "infinite":
        head = {**GOOD, PEAK: [math.inf, math.nan, 5000.0, math.nan]}
    code, out = run_compare(tmp_path, head, capsys, units=units)
    assert code == 2
    assert message in out.err and "Traceback" not in out.err


def test_compare_version_change_is_not_compared(tmp_path, capsys):
    code, _ = run_compare(tmp_path, scaled(PEAK, 3.0), capsys, versions={PEAK: "2"})
    assert code == 0
    assert "version changed" in (tmp_path / "comment.md").read_text()


def test_compare_without_head_results_is_an_error(tmp_path, capsys):
    write_results(tmp_path, BASE, GOOD)
    assert cli.main(["compare", BASE, HEAD, "--results", str(tmp_path)]) == 2
    assert f"no results for commit '{HEAD}'" in capsys.readouterr().err


def write_budgets(path, entries):
    path.write_text(json.dumps({"budgets": entries}))
    return str(path)


def budget(benchmark=PEAK, **limit):
    return {
        "benchmark": benchmark,
        "shape": "qwen3-30b-a3b/tp2",
        "strategy": "strided_copy",
        **limit,
    }


@pytest.mark.parametrize(
    "entry, expected",
    [
        (budget(max=1000), 0),  # at the limit
        (budget(max=999), 1),  # one byte over
        (budget(RATIO, min=1.0), 0),  # higher is better: met
        (budget(RATIO, min=1.5), 1),
        ({**budget(max=1), "strategy": None}, 1),  # every strategy's result counts
    ],
)
def test_gate_direction_aware(tmp_path, capsys, entry, expected):
    write_results(tmp_path / "results", BASE, {**GOOD, PEAK: [1000.0, 900.0, 5000.0, 4000.0]})
    budgets = write_budgets(tmp_path / "budgets.json", [entry])
    code = cli.main(["gate", "--results", str(tmp_path / "results"), "--budgets", budgets])
    out = capsys.readouterr()
    assert code == expected
    if expected:
        assert "over" in out.out and "qwen3-30b-a3b/tp2" in out.out


def test_gate_uses_latest_commit(tmp_path, capsys):
    write_results(tmp_path / "results", BASE, scaled(PEAK, 5.0))
    write_results(tmp_path / "results", HEAD, GOOD, date=1_700_000_100_000)
    budgets = write_budgets(tmp_path / "budgets.json", [budget(max=1000)])
    assert cli.main(["gate", "--results", str(tmp_path / "results"), "--budgets", budgets]) == 0
    assert (
        cli.main(
            [
                "gate",
                "--results",
                str(tmp_path / "results"),
                "--budgets",
                budgets,
                "--commit",
                BASE[:8],
            ]
        )
        == 1
    )


@pytest.mark.parametrize(
    "case, message",
    [
        ("no results", "no such results directory"),
        ("corrupt", "corrupt"),
        ("failed", "failed, missing or n/a"),
        ("absent", "failed, missing or n/a"),
        ("n/a", "failed, missing or n/a"),
        ("other machine", "no budget"),
        ("bad budgets", "exactly one of max or min"),
        (
            "string max",
            "budget #0 (bench_convert.PeakMemory.track_peak_transient_bytes): max is '1000', "
            "expected a finite number",
        ),
        ("null max", "max is None, expected a finite number"),
        ("not an object", "budget #0 is 'peak', expected an object"),
        (
            "unknown benchmark",
            "benchmark 'bench_convert.Nope.track_nope' is not in the metrics table",
        ),
        ("no machine.json", "gb200: results without machine.json"),
        (
            "failed unbudgeted",
            "1 benchmark(s) failed in the results checked: "
            "bench_convert.LayerTime.track_copy_ratio deepseek-v3/tp4 strided_copy",
        ),
        ("unknown unit", "bench_convert.LayerTime.track_copy_ratio is in unit 'percent'"),
        ("infinite", "infinite value of bench_convert.PeakMemory.track_peak_transient_bytes"),
    ],
)
def test_gate_errors_are_not_a_pass(tmp_path, capsys, case, message):
    results = tmp_path / "results"
    entry = budget(max=1000)
    if case != "no results":
        write_results(results, BASE, GOOD)
    if case == "corrupt":
        (results / "benchmarks.json").write_text("[")
    if case == "failed":
        write_results(results, BASE, {**GOOD, PEAK: [None, math.nan, 5000.0, math.nan]})
    if case == "absent":
        entry = {**entry, "shape": "deepseek-v2-lite/tp1"}
    if case == "n/a":
        write_results(results, BASE, {**GOOD, PEAK: [math.nan, math.nan, 5000.0, math.nan]})
    if case == "other machine":
        entry = {**entry, "machine": "gb200"}
    if case == "bad budgets":
        entry = {**entry, "min": 1}
    if case == "string max":
        entry = {**entry, "max": "1000"}
    if case == "null max":
        entry = {**entry, "max": None}
    if case == "not an object":
        entry = "peak"
    if case == "unknown benchmark":
        entry = {**entry, "benchmark": "bench_convert.Nope.track_nope"}
    if case == "no machine.json":  # a second machine's results, over budget, without machine.json
        write_results(results, BASE, scaled(PEAK, 5.0), machine="gb200")
        (results / "gb200" / "machine.json").unlink()
    if case == "failed unbudgeted":
        write_results(results, BASE, {**GOOD, RATIO: [1.2, math.nan, None, math.nan]})
    if case == "unknown unit":
        write_results(results, BASE, GOOD, units={RATIO: "percent"})
    if case == "infinite":
        write_results(results, BASE, {**GOOD, PEAK: [math.inf, math.nan, 5000.0, math.nan]})
    budgets = write_budgets(tmp_path / "budgets.json", [entry])
    assert cli.main(["gate", "--results", str(results), "--budgets", budgets]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_summary_names_the_failed_cells(tmp_path):
    """A cell that crashed (asv records its figures as failed) is named after the tables."""
    from moe_bench.report import write_summary

    write_results(tmp_path / "results", BASE, {**GOOD, RATIO: [1.2, math.nan, None, math.nan]})
    text = write_summary(tmp_path / "results", tmp_path / "summary").read_text()
    assert (
        "## Failed: 1 figure(s)\n\n- `bench_convert.LayerTime.track_copy_ratio deepseek-v3/tp4 "
        "strided_copy on cpu-box at aaaaaaaa`\n"
    ) in text


def test_an_engine_prs_reference_cells_are_shown_not_judged(tmp_path):
    """In an engine PR (``compare_commits(engine=...)``) only the engine's own cells are judged:
    a peak rise of a cell of another strategy (this suite's transcription: the same code at both
    commits) is ``reference``, a skipped one stays n/a; the engine's own rise fails, named by
    its format in the comment."""
    from moe_bench.compare import compare_commits
    from moe_bench.report import comment_markdown

    # (shape, strategy) order: qwen3 strided_copy, qwen3 flashinfer, deepseek ..., deepseek ...
    base = {**GOOD, PEAK: [1000.0, 2000.0, 5000.0, math.nan]}
    write_results(tmp_path, BASE, base)
    write_results(
        tmp_path, HEAD, {**GOOD, PEAK: [2000.0, 4000.0, 5000.0, math.nan]}, date=1_700_000_100_000
    )
    table = compare_commits(load_results(tmp_path), BASE, HEAD, engine="strided_copy")
    status = table.set_index(["benchmark", "shape", "strategy"])["status"]
    assert status[PEAK, "qwen3-30b-a3b/tp2", "strided_copy"] == "regressed"
    assert status[PEAK, "qwen3-30b-a3b/tp2", "flashinfer"] == "reference"
    assert status[PEAK, "deepseek-v3/tp4", "flashinfer"] == "n/a"  # skipped stays skipped
    text = comment_markdown(table, BASE, HEAD)
    assert text.startswith("## PR gate: FAILED: 1 regressed\n")
    assert "- BF16 `PeakMemory.track_peak_transient_bytes` qwen3-30b-a3b/tp2 strided_copy: " in text
    assert "are shown, not judged" in text


@pytest.mark.parametrize(
    ("bench", "cells"),
    [
        (r"PeakMemory", {("qwen3-30b-a3b/tp2", s) for s in ("strided_copy", "flashinfer")}
         | {("deepseek-v3/tp4", s) for s in ("strided_copy", "flashinfer")}),
        (r"PeakMemory\.\w+\('[^']+', 'strided_copy'\)",
         {("qwen3-30b-a3b/tp2", "strided_copy"), ("deepseek-v3/tp4", "strided_copy")}),
        (r"PeakMemory\.\w+\('deepseek-v3/tp4', 'flashinfer'\)$",
         {("deepseek-v3/tp4", "flashinfer")}),
    ],
)  # fmt: skip
def test_a_pr_limited_to_some_cells_compares_the_cells_asv_ran(tmp_path, bench, cells):
    """``compare_commits(bench=...)`` keeps the cells asv's ``-b`` selects, a parameterized
    benchmark's by ``name('shape', 'strategy')`` as asv's ``Benchmarks`` matches them
    (``moe_suite.selection.matches``): a PR run limited to the engine's own cells compares
    those."""
    from moe_bench.compare import compare_commits

    write_results(tmp_path, BASE, GOOD)
    write_results(tmp_path, HEAD, GOOD, date=1_700_000_100_000)
    table = compare_commits(load_results(tmp_path), BASE, HEAD, bench=bench)
    assert set(zip(table["shape"], table["strategy"], strict=True)) == cells
    assert set(table["benchmark"]) <= {PEAK}
