"""A format added to the library only (a fake one here: NVFP4's layout under a new name, with one
catalog model of DeepSeek-R1 NVFP4's geometry) reaches the suite's consumers with no edit to
them: the metrics table judges its figures (``moe_bench.metrics.format_figure``; the asv configs'
patterns: tests/test_metrics.py), budgets derive its limits, gpu-check plans it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from moe_bench.gpucheck import plan
from moe_bench.metrics import FORMAT_FIGURES, METRICS, format_figure, metric, quant_sibling
from moe_convert.formats.quant.catalog import QUANT_CATALOG
from moe_convert.formats.records import FORMATS
from moe_convert.formats.table import LAYER_FORMATS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import budgets, formats  # noqa: E402

FAKE, TWIN = "fakefp4", "deepseek-r1-nvfp4"
MODEL = f"deepseek-r1-{FAKE}"


@pytest.fixture
def fake_format(monkeypatch) -> str:
    """``FAKE`` in the format table, its format record and the catalog (as a new format's module
    and catalog entries put it there); its catalog shape's label."""
    spec = dataclasses.replace(QUANT_CATALOG[TWIN], name=MODEL, format=FAKE)
    record = dataclasses.replace(FORMATS["nvfp4"], name=FAKE, title=FAKE.upper())
    monkeypatch.setitem(FORMATS, FAKE, record)
    monkeypatch.setitem(QUANT_CATALOG, MODEL, spec)
    fmt = dataclasses.replace(
        LAYER_FORMATS["nvfp4"],
        name=FAKE,
        catalog=lambda: [spec.shape(tp) for tp in spec.tp_sizes],
        catalog_names=(MODEL,),
    )
    monkeypatch.setitem(LAYER_FORMATS, FAKE, fmt)
    return fmt.catalog()[0].label


def test_a_new_formats_figures_are_judged_as_bf16s_siblings():
    # Every figure the suite makes for a format, and nothing else.
    made = formats.format_benchmarks("nvfp4", "benchmarks.bench_nvfp4")
    assert set(FORMAT_FIGURES) == {
        f"{name}.{method}"
        for name, cls in made.items()
        for method in dir(cls)
        if method.startswith("track_")
    }
    for figure in FORMAT_FIGURES:
        name = f"bench_{FAKE}.{figure}"
        bf16 = next(m for m in METRICS.values() if quant_sibling(m.benchmark, FAKE) == name)
        got = metric(name)
        assert name in METRICS and got.benchmark == name
        assert (got.unit, got.rule, got.column, got.factor) == (
            bf16.unit,
            bf16.rule,
            bf16.column,
            bf16.factor,
        )
        assert got.pytorch_name is None  # the HUD's names stay BF16's
    # Not a format's figure: a retired class, a method no class has, a listed module.
    for name in (
        f"bench_{FAKE}.SleepModeLoad.track_peak_reserved_bytes",
        f"bench_{FAKE}.PeakMemory.track_nothing",
        "bench_noise.PeakMemory.track_peak_transient_bytes",
        "paired.PeakMemory.track_peak_transient_bytes",
    ):
        assert format_figure(name) is None and name not in METRICS
    with pytest.raises(KeyError, match="not in the metrics table"):
        metric(f"bench_{FAKE}.PeakMemory.track_nothing")


def test_budgets_derive_a_new_formats_limit(fake_format):
    twin = next(
        e
        for e in json.loads((ROOT / "budgets.json").read_text())["budgets"]
        if e["shape"] == f"{TWIN}/tp4" and "formula" in e
    )
    # The same geometry as its twin's: the same limit.
    assert budgets.derived_limit({**twin, "shape": fake_format}) == twin["max"]


def test_gpu_check_plans_a_new_format(fake_format):
    labels = plan.quant_check_shapes()
    assert labels[-1] == fake_format
    assert [plan.shape(label).format for label in labels] == [
        name for name in LAYER_FORMATS if name != "bf16"
    ]
