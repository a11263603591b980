"""The PR gate (moe_bench.compare), the budgets gate (moe_bench.gate) and load_results, on
fabricated asv result files (asv 0.6 format, read back through asv's own loader)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from moe_bench import compare, gate
from moe_bench.results import COLUMNS, ResultsError, load_results

PEAK = "bench_convert.PeakMemory.track_peak_transient_bytes"
RATIO = "bench_convert.CopyRatio.track_copy_ratio"
TIME = "bench_convert.TimeConvert.time_convert"
SHAPES = ["qwen3-30b-a3b/tp2", "deepseek-v3/tp4"]
STRATEGIES = ["strided_copy", "flashinfer"]
UNITS = {PEAK: "bytes", RATIO: "ratio", TIME: "seconds"}
BASE, HEAD = "a" * 40, "b" * 40
# values in (shape, strategy) order; NaN = skipped (n/a), None = failed
GOOD = {PEAK: [1000.0, math.nan, 5000.0, math.nan], RATIO: [1.2, math.nan, 1.1, math.nan],
        TIME: [0.010, math.nan, 0.050, math.nan]}


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def write_results(root, commit, values, *, machine="cpu-box", date=1_700_000_000_000,
                  versions=None):
    """One asv result file for ``commit`` with ``values[benchmark]``, plus benchmarks.json and
    machine.json, as ``asv run`` writes them."""
    params = [[repr(s) for s in SHAPES], [repr(s) for s in STRATEGIES]]
    _write(root / "benchmarks.json", {
        **{name: {"name": name, "param_names": ["shape", "strategy"], "params": params,
                  "unit": unit, "version": "1", "type": "track"} for name, unit in UNITS.items()},
        "version": 2,
    })
    _write(root / machine / "machine.json", {"machine": machine, "profile": "cpu", "version": 1})
    _write(root / machine / f"{commit[:8]}-existing-py.json", {
        "commit_hash": commit, "env_name": "existing-py", "date": date, "python": "3.11",
        "params": {"machine": machine, "python": "3.11"}, "requirements": {}, "env_vars": {},
        "result_columns": ["result", "params", "version"],
        "results": {name: [vals, params, (versions or {}).get(name, "1")]
                    for name, vals in values.items()},
        "durations": {}, "version": 2,
    })


def scaled(benchmark, factor):
    """GOOD with ``benchmark``'s first value times ``factor``."""
    values = {name: list(vals) for name, vals in GOOD.items()}
    values[benchmark][0] *= factor
    return values


def run_compare(tmp_path, head_values, capsys, **kwargs):
    write_results(tmp_path, BASE, GOOD)
    write_results(tmp_path, HEAD, head_values, date=1_700_000_100_000, **kwargs)
    code = compare.main([str(tmp_path), BASE[:8], HEAD[:8], "--markdown",
                         str(tmp_path / "comment.md")])
    return code, capsys.readouterr()


def test_load_results_table(tmp_path):
    write_results(tmp_path, BASE, {**GOOD, PEAK: [1000.0, math.nan, None, math.nan]})
    frame = load_results(tmp_path)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 3 * 4
    row = frame[(frame.benchmark == PEAK) & (frame["shape"] == "qwen3-30b-a3b/tp2")
                & (frame.strategy == "strided_copy")].iloc[0]
    assert (row.value, row.unit, row.failed, row.version, row.profile) == (1000.0, "bytes", False,
                                                                           "1", "cpu")
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
    data["results"]["bench_misc.track_one"] = [[7.0], [], "1"]
    path.write_text(json.dumps(data))
    bench = json.loads((tmp_path / "benchmarks.json").read_text())
    bench["bench_misc.track_one"] = {"name": "bench_misc.track_one", "param_names": [],
                                     "params": [], "unit": "widgets", "version": "1"}
    (tmp_path / "benchmarks.json").write_text(json.dumps(bench))
    row = load_results(tmp_path).query("benchmark == 'bench_misc.track_one'")
    assert row[["value", "unit"]].values.tolist() == [[7.0, "widgets"]]


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "no such results directory"),
    (lambda root: (root / "cpu-box").mkdir(parents=True), "benchmarks.json: missing"),
    (lambda root: write_results(root, BASE, GOOD)
     or (root / "cpu-box" / f"{BASE[:8]}-existing-py.json").write_text("{not json"), "corrupt"),
    (lambda root: write_results(root, BASE, GOOD)
     or (root / "cpu-box" / f"{BASE[:8]}-existing-py.json").unlink(), "no benchmark results"),
])
def test_load_results_refuses_missing_or_corrupt(tmp_path, make, message):
    root = tmp_path / "results"
    make(root)
    with pytest.raises(ResultsError, match=message) as err:
        load_results(root)
    assert str(root) in str(err.value)


@pytest.mark.parametrize("benchmark, factor, expected", [
    (PEAK, 1.0, 0),  # unchanged
    (PEAK, 0.5, 0),  # improved
    (PEAK, 1.001, 1),  # one byte more in a thousand: bytes are exact
    (RATIO, 1.4, 0),  # inside the copy-ratio factor
    (RATIO, 1.6, 1),
    (TIME, 4.9, 0),  # inside the wall-time factor (noise)
    (TIME, 5.1, 1),
    (TIME, 0.3, 0),
])
def test_compare_factor_per_unit(tmp_path, capsys, benchmark, factor, expected):
    code, out = run_compare(tmp_path, scaled(benchmark, factor), capsys)
    assert code == expected
    comment = (tmp_path / "comment.md").read_text()
    assert ("FAILED" in comment) == bool(expected)
    if expected:
        assert "regressed" in comment and "qwen3-30b-a3b/tp2" in comment


def test_compare_failed_benchmark_fails(tmp_path, capsys):
    values = {**GOOD, RATIO: [None, math.nan, 1.1, math.nan]}
    code, out = run_compare(tmp_path, values, capsys)
    assert code == 1
    assert "failed" in (tmp_path / "comment.md").read_text()


def test_compare_missing_benchmark_fails(tmp_path, capsys):
    values = {name: vals for name, vals in GOOD.items() if name != RATIO}
    code, _ = run_compare(tmp_path, values, capsys)
    assert code == 1


def test_compare_version_change_is_not_compared(tmp_path, capsys):
    code, _ = run_compare(tmp_path, scaled(PEAK, 3.0), capsys, versions={PEAK: "2"})
    assert code == 0
    assert "version changed" in (tmp_path / "comment.md").read_text()


def test_compare_without_head_results_is_an_error(tmp_path, capsys):
    write_results(tmp_path, BASE, GOOD)
    assert compare.main([str(tmp_path), BASE, HEAD]) == 2
    assert f"no results for commit '{HEAD}'" in capsys.readouterr().err


def write_budgets(path, entries):
    path.write_text(json.dumps({"budgets": entries}))
    return str(path)


def budget(benchmark=PEAK, **limit):
    return {"benchmark": benchmark, "shape": "qwen3-30b-a3b/tp2", "strategy": "strided_copy",
            **limit}


@pytest.mark.parametrize("entry, expected", [
    (budget(max=1000), 0),  # at the limit
    (budget(max=999), 1),  # one byte over
    (budget(RATIO, min=1.0), 0),  # higher is better: met
    (budget(RATIO, min=1.5), 1),
    ({**budget(max=1), "strategy": None}, 1),  # every strategy's result counts
])
def test_gate_direction_aware(tmp_path, capsys, entry, expected):
    write_results(tmp_path / "results", BASE, GOOD)
    budgets = write_budgets(tmp_path / "budgets.json", [entry])
    code = gate.main(["--results", str(tmp_path / "results"), "--budgets", budgets])
    out = capsys.readouterr()
    assert code == expected
    if expected:
        assert "over" in out.out and "qwen3-30b-a3b/tp2" in out.out


def test_gate_uses_latest_commit(tmp_path, capsys):
    write_results(tmp_path / "results", BASE, scaled(PEAK, 5.0))
    write_results(tmp_path / "results", HEAD, GOOD, date=1_700_000_100_000)
    budgets = write_budgets(tmp_path / "budgets.json", [budget(max=1000)])
    assert gate.main(["--results", str(tmp_path / "results"), "--budgets", budgets]) == 0
    assert gate.main(["--results", str(tmp_path / "results"), "--budgets", budgets,
                      "--commit", BASE[:8]]) == 1


@pytest.mark.parametrize("case, message", [
    ("no results", "no such results directory"),
    ("corrupt", "corrupt"),
    ("failed", "failed or missing"),
    ("absent", "failed or missing"),
    ("other machine", "no budget"),
    ("bad budgets", "exactly one of max or min"),
])
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
    if case == "other machine":
        entry = {**entry, "machine": "gb200"}
    if case == "bad budgets":
        entry = {**entry, "min": 1}
    budgets = write_budgets(tmp_path / "budgets.json", [entry])
    assert gate.main(["--results", str(results), "--budgets", budgets]) == 2
    assert message in capsys.readouterr().err
