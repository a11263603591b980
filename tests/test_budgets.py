"""budgets.json's derived limits (``benchmarks.budgets``): current with their formulas, met by the
strategies' registered peaks, and the command that derives them.

The gate that reads them (``moe_bench.gate``) is tested in test_gate.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import budgets, formats  # noqa: E402
from moe_convert import REGISTRY  # noqa: E402

BUDGETS = json.loads((ROOT / "budgets.json").read_text())
PEAK = "bench_convert.PeakMemory.track_peak_transient_bytes"
PEAK_ENTRIES = [entry for entry in BUDGETS["budgets"] if entry["benchmark"] == PEAK]


def test_budgets_json_limits_are_their_formulas():
    assert budgets.stale_entries(BUDGETS) == [], (
        "budgets.json is stale: run `python -m benchmarks.budgets --write`"
    )


@pytest.mark.parametrize("entry", PEAK_ENTRIES, ids=lambda e: f"{e['shape']}-{e['strategy']}")
def test_every_peak_budget_names_a_formula_its_strategy_meets(entry):
    assert "formula" in entry, "a peak budget names its formula; the bytes are derived from it"
    registered = REGISTRY[entry["strategy"]].peak.evaluate(formats.full_shape(entry["shape"]))
    assert registered <= entry["max"], (
        f"{entry['strategy']}'s registered peak ({registered}) is over its budget "
        f"{entry['formula']}"
    )


def test_write_derives_the_limits_and_check_names_a_stale_one(tmp_path, capsys):
    stale = {
        "about": "test",
        "budgets": [
            {**PEAK_ENTRIES[0], "max": 1},
            {
                "benchmark": "bench_convert.WholeModel.track_whole_model_seconds",
                "shape": "deepseek-v3/tp8",
                "strategy": "strided_copy",
                "machine": "gb200",
                "max": 0.123,
                "why": "measured",
            },
        ],
    }
    path = tmp_path / "budgets.json"
    path.write_text(json.dumps(stale, indent=1) + "\n")
    assert budgets.main(["--budgets", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"max is 1, the formula gives {PEAK_ENTRIES[0]['max']}" in err
    assert "python -m benchmarks.budgets --write" in err
    assert budgets.main(["--budgets", str(path), "--write"]) == 0
    written = json.loads(path.read_text())
    assert written["budgets"][0] == PEAK_ENTRIES[0]  # the same keys, in the same order
    assert written["budgets"][1] == stale["budgets"][1]  # no formula: measured, left alone
    assert budgets.main(["--budgets", str(path)]) == 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"formula": "T13 ** 2"}, "'T13 ** 2' is not allowed"),
        ({"shape": "no-such-model/tp1"}, "unknown model 'no-such-model'"),
    ],
)
def test_a_bad_formula_or_shape_is_an_error_naming_it(tmp_path, capsys, change, message):
    path = tmp_path / "budgets.json"
    path.write_text(json.dumps({"budgets": [{**PEAK_ENTRIES[0], **change}]}))
    assert budgets.main(["--budgets", str(path)]) == 2
    assert message in capsys.readouterr().err
