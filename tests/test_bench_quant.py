"""The quantized formats in the suite and the replay: every catalog shape and kind benchmarked,
each figure in the metrics table, the grid's figures the records', and an OOM the replay finds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from moe_bench.metrics import EXACT, metric
from moe_convert import QUANT_STRATEGIES
from moe_convert.quant_formats import quant_catalog_shapes, quant_layer_shape
from moe_convert.quant_replay import replay_quant_load

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import bench_quant  # noqa: E402

CLASSES = [bench_quant.QuantPeakMemory, bench_quant.QuantTraffic, bench_quant.QuantSleepModeReplay]


def test_every_quantized_shape_and_strategy_is_benchmarked():
    labels = [shape.label for shape in quant_catalog_shapes()]
    assert list(bench_quant.QUANT_SHAPES) == labels
    for shape in quant_catalog_shapes():
        for kind in bench_quant.QUANT_KINDS:
            assert f"{shape.format}-{kind}" in QUANT_STRATEGIES
    assert {name.split("-", 1)[1] for name in QUANT_STRATEGIES} == set(bench_quant.QUANT_KINDS)
    for cls in CLASSES:
        assert cls.params == [list(bench_quant.QUANT_SHAPES), list(bench_quant.QUANT_KINDS)]
        assert cls.param_names == ["shape", "strategy"]  # what moe_bench keys results by
        for method in (m for m in dir(cls) if m.startswith("track_")):
            assert metric(f"bench_quant.{cls.__name__}.{method}").rule == EXACT


def test_the_grid_reads_the_records_peaks(monkeypatch):
    monkeypatch.setattr(bench_quant, "QUANT_SHAPES", ("gpt-oss-20b-mxfp4/tp1",))
    bench = bench_quant.QuantPeakMemory()
    results = bench.setup_cache()
    shape = quant_layer_shape("gpt-oss-20b-mxfp4", 1)
    for kind in bench_quant.QUANT_KINDS:
        bench.setup(results, shape.label, kind)
        got = bench.track_peak_transient_bytes(results, shape.label, kind)
        assert got == QUANT_STRATEGIES[f"mxfp4-{kind}"].peak.evaluate(shape)


def test_a_library_without_quantized_formats_makes_every_cell_na():
    with pytest.raises(NotImplementedError, match="no quantized formats"):
        bench_quant.QuantPeakMemory().setup({}, "kimi-k2-nvfp4/tp8", "fast")


def test_the_replay_finds_the_upstream_oom_and_ours_fit():
    # gpt-oss-20b's 24 MXFP4 layers on a 15 GiB device (10.1 GiB of MoE weights): vLLM's path
    # reserves a second copy of a layer and strands segments every layer; ours fit, no growth.
    shape = quant_layer_shape("gpt-oss-20b-mxfp4", 1)
    device = 15 * 2**30

    def load(kind: str):
        return replay_quant_load(
            shape, f"mxfp4-{kind}", max_split_size_mb=20, pool="sleep", device_bytes=device
        )

    legacy = load("legacy")
    assert legacy.oom_layer is not None and legacy.num_ooms == 1
    for kind in ("fast", "inplace"):
        ours = load(kind)
        assert ours.oom_layer is None and ours.reserved_growth_per_layer_bytes == 0, kind


def test_gpu_check_compares_the_quantized_strategies_and_names_a_missing_interleave(monkeypatch):
    # Step 1's quantized part with the CPU standing in for the GPU: FlashInfer's interleave
    # rejects CPU tensors (its rows fail, saying why), every strategy matches its -legacy.
    import torch

    from moe_bench.gpucheck import exact, plan

    monkeypatch.setattr(plan, "cuda_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(plan, "QUANT_CHECK_EXPERTS", 1)
    monkeypatch.setattr(plan, "SWIZZLE_CHECK_SHAPES", ((128, 4),))
    assert exact._quantized_exact(dry_run=True) == []
    rows = exact._quantized_exact(dry_run=False)
    strategies = [row["strategy"] for row in rows if row["strategy"] in QUANT_STRATEGIES]
    assert sorted(strategies) == sorted(QUANT_STRATEGIES)
    assert all(row["exact"] for row in rows if row["strategy"] in QUANT_STRATEGIES)
    (interleave,) = [row for row in rows if row["strategy"] not in QUANT_STRATEGIES]
    assert interleave["exact"] in (False, None) and "error" in interleave
