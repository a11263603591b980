"""A format added to the library only (a fake one here: NVFP4's layout under a new name, with one
catalog model of DeepSeek-R1 NVFP4's geometry) reaches the suite's consumers with no edit to
them: the metrics table judges its figures (``moe_suite.metrics.format_figure``; the asv configs'
patterns: tests/test_metrics.py), budgets derive its limits, gpu-check plans it, and the library
converts, measures, replays and reports it.

A new format is its module (its ``Format`` record in ``records.FORMATS``, its strategies
registered with ``register(..., format=...)``), its catalog entries (``ModelSpec(...,
format=...)`` in ``catalog.CATALOG``) and a short asv module."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from moe_bench.gpucheck import plan
from moe_convert import (
    CATALOG,
    FORMATS,
    REGISTRY,
    LayerShape,
    ModelSpec,
    convert,
    register,
    strategies,
)
from moe_convert.cli.report import peaks_markdown
from moe_convert.formats.catalog import catalog_shapes, shape_from_label
from moe_convert.formats.kinds import SCALED_FAST, SCALED_INPLACE, register_kinds
from moe_convert.formats.layer import check_layer
from moe_convert.formats.table import layer_call, reference_conversion, strategy_input
from moe_convert.load.replay import rank_load
from moe_convert.load.wholemodel import DEVICE_141GB_BYTES
from moe_convert.measuring.memory import measure_memory
from moe_suite.metrics import FORMAT_FIGURES, METRICS, format_figure, metric, quant_sibling

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import budgets, formats  # noqa: E402

FAKE, TWIN = "fakefp4", "deepseek-r1-nvfp4"
MODEL = f"deepseek-r1-{FAKE}"
KINDS = ("legacy", "preallocated", "inplace", "fast")  # NVFP4's strategies, and the fake's


@pytest.fixture
def fake_format(monkeypatch):
    """``FAKE`` as a new format's module and catalog entries put it: its record in
    ``FORMATS``, its strategies in ``REGISTRY`` (NVFP4's upstream paths under its name, and this
    library's kinds), its catalog entry in ``CATALOG``; its catalog shape's label. Every
    registration is undone after the test."""
    record = dataclasses.replace(
        FORMATS["nvfp4"],
        name=FAKE,
        title=FAKE.upper(),
        check=check_layer,
        upstream=f"{FAKE}-legacy",
    )
    monkeypatch.setitem(FORMATS, FAKE, record)
    before = set(REGISTRY)
    try:
        for kind in ("legacy", "preallocated"):  # the engine's paths, transcribed
            twin = REGISTRY[f"nvfp4-{kind}"]
            register(
                f"{FAKE}-{kind}",
                format=FAKE,
                inplace=twin.inplace,
                origin=twin.origin,
                peak=twin.peak,
                traffic=twin.traffic,
                launches=twin.launches,
            )(twin.function)
        register_kinds(record, {"inplace": SCALED_INPLACE, "fast": SCALED_FAST})
        twin = CATALOG[TWIN]
        spec = ModelSpec(
            MODEL,
            twin.hf_id,
            twin.moe_layers,
            twin.experts,
            twin.hidden,
            twin.intermediate,
            format=FAKE,
            tp_sizes=twin.tp_sizes,
        )
        monkeypatch.setitem(CATALOG, MODEL, spec)
        yield catalog_shapes(FAKE)[0].label
    finally:
        for name in set(REGISTRY) - before:
            del REGISTRY[name]


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
        name for name in FORMATS if name != "bf16"
    ]


def test_the_library_converts_measures_replays_and_reports_a_new_format(fake_format):
    shape = shape_from_label(fake_format)
    assert (shape.format, shape.fmt.upstream) == (FAKE, f"{FAKE}-legacy")
    assert list(strategies(FAKE)) == [f"{FAKE}-{kind}" for kind in KINDS]
    # Converted byte for byte as its upstream path does, each strategy's peak its formula.
    small = LayerShape("small", 1, 2, 256, 128, 1, format=FAKE)
    for name, record in strategies(FAKE).items():
        layer = strategy_input(small, name, "cpu", seed=1)
        _, want = reference_conversion(small, name)
        expected = want(layer)
        got = convert({key: t.clone() for key, t in layer.items()}, strategy=name)
        assert got.keys() == expected.keys()
        for key, tensor in expected.items():
            assert torch.equal(got[key].view(torch.uint8), tensor.view(torch.uint8)), (name, key)
        peak = measure_memory(layer_call(small, name, "cpu")).peak_bytes
        assert peak == record.peak.evaluate(small)
    # Its rank load replayed as its twin's: the same geometry, the same allocator events (-fast:
    # the upstream path's full-size trace takes seconds to replay).
    twin = shape_from_label(f"{TWIN}/tp{shape.tp}")
    mine = dataclasses.asdict(rank_load(shape, f"{FAKE}-fast", DEVICE_141GB_BYTES))
    theirs = dataclasses.asdict(rank_load(twin, "nvfp4-fast", DEVICE_141GB_BYTES))
    assert (mine.pop("shape"), mine.pop("strategy")) == (fake_format, f"{FAKE}-fast")
    del theirs["shape"], theirs["strategy"]
    assert mine == theirs
    # Reported in the quantized catalog's peak table, as its twin is.
    rows = {line.split(" | ")[0]: line for line in peaks_markdown().splitlines()}
    assert rows[f"| {fake_format}"].split(" | ")[2:] == rows[f"| {twin.label}"].split(" | ")[2:]
