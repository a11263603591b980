"""``scripts/gpu-check``'s CPU side: the plan and its budget, the steps in dry-run mode, a step
that fails or runs out of time reported while the next one runs, and the targets' verdicts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from moe_bench.gpucheck import exact, load, memory, plan, report, timing
from moe_bench.gpucheck.__main__ import main, plan_lines
from moe_convert import FORMATS, REGISTRY, UNAVAILABLE, strategies
from moe_convert.load.replay import rank_load
from moe_convert.load.wholemodel import DEVICE_141GB_BYTES, PR45589_SHAPE, VLLM_LOAD_MAX_SPLIT_MB

ROOT = Path(__file__).resolve().parent.parent


def quantized(records: dict) -> dict:
    """The records of every quantized format's strategies among ``records``."""
    return {name: record for name, record in records.items() if record.format != "bf16"}


@pytest.fixture
def small(monkeypatch):
    """Every shape label resolves to its per-expert geometry with 2 experts, loads to 3 layers."""
    full = plan.shape
    monkeypatch.setattr(plan, "shape", lambda label: full(label).with_experts(2))
    monkeypatch.setattr(plan, "ALLOCATOR_LAYERS", 3)


def test_plan_lists_every_step_within_the_wall_budget():
    lines = plan_lines(dry_run=True)
    for step in plan.STEPS:
        assert any(step.name in line and f"{step.budget_s} s" in line for line in lines)
    assert sum(step.budget_s for step in plan.STEPS) <= plan.WALL_BUDGET_S <= 6 * 60


def test_dry_run_exact_computes_the_cpu_reference_only(small):
    findings = exact.step_exact(dry_run=True)
    assert findings["ok"]
    assert [row["shape"] for row in findings["rows"]] == list(plan.CHECK_SHAPES)
    assert all(row["exact"] is None for row in findings["rows"])


def test_dry_run_memory_gives_formula_and_model_for_every_strategy(small):
    rows = memory.step_memory(dry_run=True)["rows"]
    quantized = {
        (label, name)
        for label in plan.quant_check_shapes()
        for name, record in REGISTRY.items()
        if record.format == plan.shape(label).format
    }
    assert {(r["shape"], r["strategy"]) for r in rows} == quantized | {
        (label, name) for label in plan.CHECK_SHAPES for name in strategies("bf16")
    }
    for row in rows:  # the model reserves whole segments, multiples of 2 MiB
        assert row["dispatch_peak_bytes"] > 0
        record = REGISTRY[row["strategy"]]
        if record.not_on_meta:  # FlashInfer's helpers: no meta trace to replay
            assert row["model_reserved_bytes"] is None
        else:
            assert row["model_reserved_bytes"] % (2 * 2**20) == 0
        assert "peak_reserved_bytes" not in row  # the CUDA part did not run
    for row in rows:  # a quantized row's dispatch peak is its record's exact formula
        if (row["shape"], row["strategy"]) in quantized:
            want = REGISTRY[row["strategy"]].peak.evaluate(plan.shape(row["shape"]))
            assert row["dispatch_peak_bytes"] == want


def test_the_cuda_only_flashinfer_helpers_are_planned_where_registered(small, monkeypatch):
    # On a GPU with FlashInfer, MXINT4's, NVFP4's and MXFP8's helpers are registered: steps 1, 2
    # and 5 take them from the table, as every quantized strategy.
    helpers = ("mxint4-flashinfer", "nvfp4-flashinfer", "mxfp8-flashinfer")
    for name in helpers:
        monkeypatch.setitem(REGISTRY, name, REGISTRY.get(name) or UNAVAILABLE[name])
    planned = {(r["shape"], r["strategy"]) for r in memory.step_memory(dry_run=True)["rows"]}
    timed = " ".join(timing.step_timing(dry_run=True)["plan"])
    for name in helpers:
        labels = plan.quant_check_shapes()
        label = next(x for x in labels if name.startswith(f"{plan.shape(x).format}-"))
        assert (label, name) in planned and f"{label} x {name}" in timed


def test_dry_run_allocator_replays_the_model_per_layer(small):
    rows = memory.step_allocator(dry_run=True)["rows"]
    assert [row["strategy"] for row in rows] == list(strategies("bf16"))
    for row in rows:
        assert len(row["model_reserved_after_layer"]) == 3
        assert row["match"] is None and row["real_reserved_after_layer"] is None


def test_the_load_step_loads_vllm_45589s_rank():
    assert plan.LOAD_SHAPE == PR45589_SHAPE
    assert plan.MAX_SPLIT_MB == VLLM_LOAD_MAX_SPLIT_MB
    # the report's legacy / preallocated ratios need both default-pool settings
    assert {(plan.MAX_SPLIT_MB, "default"), (None, "default")} <= set(plan.LOAD_CONFIGS)


def test_the_quantized_shapes_cover_every_format_once():
    labels = plan.quant_check_shapes()
    assert sorted(plan.shape(label).format for label in labels) == sorted(set(FORMATS) - {"bf16"})
    assert set(plan.strategies(plan.shape("kimi-k2-nvfp4/tp8"))) == {
        "nvfp4-legacy",
        "nvfp4-preallocated",
        "nvfp4-inplace",
        "nvfp4-fast",
        "nvfp4-streaming",
    }
    assert plan.strategies(plan.shape(plan.LOAD_SHAPE)) == strategies("bf16")


def test_the_quantized_budgets_are_sized_from_the_records():
    """plan.py's sizing of steps 2 and 5 (a round of every quantized strategy on
    quant_check_shapes() on a GPU with FlashInfer: 34 strategies, 43,172 launches, 509 GB
    moved; 42,788 and 532 GB before the streaming placement's strided copies, 28, 32,804 and
    488 GB before the streaming strategies): a strategy that changes either changes this, and
    the budgets are to be sized again."""
    records = quantized({**REGISTRY, **UNAVAILABLE})
    cells = [
        (plan.shape(label), name)
        for label in plan.quant_check_shapes()
        for name, record in records.items()
        if record.format == plan.shape(label).format and not name.endswith("-vllm")
    ]
    assert len(cells) == 34
    assert sum(records[name].launches.evaluate(shape) for shape, name in cells) == 43_172
    moved = sum(records[name].traffic.evaluate(shape) for shape, name in cells)
    assert round(moved / 1e9) == 509


@pytest.mark.slow
def test_the_quantized_load_is_the_one_whose_upstream_path_the_replay_finds_in_trouble():
    # docs/formats.md: on an H200 under vLLM's setting, DeepSeek-R1 NVFP4 TP4's nvfp4-legacy
    # fits only through 1,797 refused cudaMalloc calls; -fast, the control, makes none
    shape = plan.shape(plan.QUANT_LOAD_SHAPE)
    assert plan.QUANT_LOAD_STRATEGIES == (f"{shape.format}-legacy", f"{shape.format}-fast")
    legacy, fast = (rank_load(shape, n, DEVICE_141GB_BYTES) for n in plan.QUANT_LOAD_STRATEGIES)
    assert (legacy.num_device_alloc_failed, legacy.num_device_free) == (1797, 1797)
    assert (fast.num_device_alloc_failed, fast.num_device_free, fast.oom_layer) == (0, 0, None)


def test_dry_run_load_replays_every_configuration(monkeypatch):
    monkeypatch.setattr(plan, "LOAD_STRATEGIES", ("preallocated", "inplace", "no-such"))
    monkeypatch.setattr(plan, "QUANT_LOAD_STRATEGIES", ("nvfp4-fast",))  # legacy: the slow test
    findings = load.step_load(dry_run=True)
    assert findings["ok"] and findings["events"] is None
    rows = findings["rows"]
    assert [(r["shape"], r["strategy"], r["max_split_mb"], r["pool"]) for r in rows] == [
        (plan.QUANT_LOAD_SHAPE, "nvfp4-fast", plan.MAX_SPLIT_MB, "default")
    ] + [
        (plan.LOAD_SHAPE, name, max_split, pool)
        for max_split, pool in plan.LOAD_CONFIGS
        for name in ("preallocated", "inplace")
    ]
    for row in rows:  # full size, replayed only: no run, no prediction without costs
        assert "run" not in row and "predicted_seconds" not in row
        assert row["replayed"]["oom_layer"] is None
        assert row["replayed"]["device_bytes"] == DEVICE_141GB_BYTES
    # the quantized load is vLLM's as rank_load replays it: 58 layers, no ballast
    quantized = rank_load(plan.shape(plan.QUANT_LOAD_SHAPE), "nvfp4-fast", DEVICE_141GB_BYTES)
    assert rows[0]["replayed"] == dataclasses.asdict(quantized)
    assert rows[0]["replayed"]["layers"] == 58
    assert rows[1]["replayed"]["layers"] == 94
    assert rows[1]["replayed"]["num_device_alloc"] == 3  # preallocated: two outputs, indices


def test_dry_run_timing_lists_every_cell_and_sizes_the_quantized_ones():
    step = timing.step_timing(dry_run=True)
    lines = step["plan"]
    assert "qwen3-235b-a22b/tp4 x legacy" in lines
    assert "kimi-k2-nvfp4/tp8 x nvfp4-legacy (7.45 GB moved, 2,344 launches)" in lines
    # the five kinds, and FlashInfer's helper where flashinfer-python is installed
    assert sum(" x fp8-" in line for line in lines) == 5 + ("fp8-flashinfer" in REGISTRY)
    text = report.report_markdown(_summary({"step": "timing", **step}, dry_run=True))
    assert "- kimi-k2-nvfp4/tp8 x nvfp4-legacy (7.45 GB moved, 2,344 launches)" in text


def test_a_quantized_timing_row_carries_what_its_targets_are_judged_by(monkeypatch):
    # time_strategy with the CPU standing in for the GPU, one timed call on one expert
    monkeypatch.setattr(plan, "TIMING_REPEATS", 1)
    shape = plan.shape("llama-4-maverick-fp8/tp8").with_experts(1)
    row = timing.time_strategy(shape, "fp8-fast", torch.device("cpu"))
    assert (row["shape"], row["format"], row["origin"], row["inplace"]) == (
        "llama-4-maverick-fp8/tp8",
        "fp8",
        "ours",
        False,
    )
    assert row["peak_bytes"] == REGISTRY["fp8-fast"].peak.evaluate(shape)
    assert row["seconds"] > 0 and row["copy_ratio"] > 0 and len(row["samples"]) == 1


def _summary(step: dict, *, dry_run: bool) -> dict:
    """A run's summary holding one step's findings, as ``__main__`` writes it."""
    return {
        "started": "2026-12-01 00:00:00 UTC",
        "device": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "commit": "abcdef0",
        "dry_run": dry_run,
        "seconds": 1.0,
        "steps": [{"title": "t", "status": "passed", "seconds": 1.0, "budget_s": 45, **step}],
    }


def _load_row(strategy: str, max_split, seconds: float, allocs: int) -> dict:
    replayed = {
        "num_device_alloc": allocs,
        "num_device_free": 0,
        "num_alloc_retries": 0,
        "oom_layer": None,
    }
    run = {**replayed, "seconds": seconds}
    return {
        "shape": plan.LOAD_SHAPE,
        "strategy": strategy,
        "max_split_mb": max_split,
        "pool": "default",
        "replayed": replayed,
        "run": run,
        "differences": {},
        "predicted_seconds": seconds * 1.1,
    }


def test_load_report_states_the_ratio_against_vllm_45589():
    step = {
        "events": {"cuda_malloc_seconds": 1e-4},
        "rows": [
            _load_row("legacy", 20, 9.0, 6113),
            _load_row("preallocated", 20, 2.0, 3),
            _load_row("legacy", None, 1.3, 68),
            _load_row("preallocated", None, 1.0, 3),
            {"strategy": "triton", "max_split_mb": 20, "pool": "default", "error": "boom"},
        ],
    }
    text = "\n".join(report.load_lines(step))
    assert "| legacy | 20 | default | 9.000 s | 9.900 s | 6113/6113 |" in text
    assert "max_split_size_mb 20: 4.50x (vLLM #45589: 4.5x at 20; target at 20: >= 3.4x)" in text
    assert "max_split_size_mb None: 1.30x" in text
    assert "- triton 20 default: boom" in text
    assert text.count("### ") == 1  # no quantized section without its rows


def test_load_report_says_whether_a_quantized_run_agrees_with_its_replay():
    legacy = {**_load_row("nvfp4-legacy", 20, 4.0, 4557), "shape": plan.QUANT_LOAD_SHAPE}
    legacy["replayed"] = {**legacy["replayed"], "num_device_free": 1797}
    legacy["run"] = {**legacy["run"], "num_device_free": 1790}
    legacy["differences"] = {"num_device_free": [1797, 1790]}
    fast = {**_load_row("nvfp4-fast", 20, 0.1, 4), "shape": plan.QUANT_LOAD_SHAPE}
    lines = report.load_lines({"events": None, "rows": [legacy, fast]})
    text = "\n".join(lines)
    assert f"### {plan.QUANT_LOAD_SHAPE}: vLLM's load (default pool, max_split_size_mb 20)" in text
    assert "| nvfp4-legacy | 20 | default | 4.000 s | 4.400 s | 4557/4557 | 1790/1797 |" in text
    assert "- nvfp4-legacy: OOM layer None, run and replay DIFFER in num_device_free" in lines
    assert "- nvfp4-fast: OOM layer None, run and replay agree" in lines


def test_costs_record_takes_step_4s_costs_and_the_timed_layers():
    costs = {"cuda_malloc_seconds": 1e-4, "cuda_free_seconds": 1e-3}
    costs |= {"failed_cuda_malloc_seconds": 1e-5, "samples": 192}
    summary = {
        "device": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "commit": "abcdef0",
        "started": "2026-12-01 00:00:00 UTC",
        "steps": [
            {
                "step": "load",
                "events": costs,
                "layer_seconds": {
                    plan.LOAD_SHAPE: {"legacy": 0.0097},
                    plan.QUANT_LOAD_SHAPE: {"nvfp4-legacy": 0.03},
                },
            },
            {"step": "timing", "rows": [_timing_row("deepseek-v3/tp8", "triton", 1.07, 1.4e-3)]},
        ],
    }
    record = report.costs_record(summary)
    assert (record.device, record.commit, record.events.cuda_free_seconds) == (
        "NVIDIA H200",
        "abcdef0",
        1e-3,
    )
    assert record.layer_seconds == {
        "deepseek-v3/tp8": {"triton": 1.4e-3},
        plan.LOAD_SHAPE: {"legacy": 0.0097},
        plan.QUANT_LOAD_SHAPE: {"nvfp4-legacy": 0.03},
    }
    summary["steps"][0] = {"step": "load", "events": None}  # a dry run
    assert report.costs_record(summary) is None


def _timing_row(shape: str, strategy: str, ratio: float, seconds: float) -> dict:
    return {
        "shape": shape,
        "strategy": strategy,
        "inplace": strategies("bf16")[strategy].inplace,
        "copy_ratio": ratio,
        "seconds": seconds,
        "peak_bytes": 2**20,
        "whole_model_seconds": seconds * 94,
        "moe_layers": 94,
    }


def test_targets_take_the_best_strategy_of_each_kind():
    shape = plan.LOAD_SHAPE
    rows = [
        _timing_row(shape, "strided_copy", 1.12, 7e-4),
        _timing_row(shape, "legacy", 9.0, 5e-3),
        _timing_row(shape, "strided_inplace", 1.5, 6e-4),
        {"shape": shape, "strategy": "batched", "error": "RuntimeError: boom"},
    ]
    lines = report.target_lines(rows)
    assert any(
        "out of place: `strided_copy` x1.120 copy (target <= 1.1: NOT met)" in line
        for line in lines
    )
    assert any(
        "in place: `strided_inplace` x1.500 copy (target <= 1.5: met)" in line for line in lines
    )
    assert any("`strided_inplace` 56.4 ms (target <= 60 ms: met)" in line for line in lines)


def _quant_row(strategy: str, ratio: float, seconds: float) -> dict:
    record = quantized(REGISTRY)[strategy]
    return {
        "shape": "kimi-k2-nvfp4/tp8",
        "strategy": strategy,
        "format": record.format,
        "origin": record.origin,
        "inplace": record.inplace,
        "copy_ratio": ratio,
        "seconds": seconds,
    }


@pytest.mark.parametrize(("ratio", "verdict"), [(1.2, "met"), (1.4, "NOT met")])
def test_quant_targets_judge_fast_against_a_copy(ratio, verdict):
    rows = [
        _quant_row("nvfp4-legacy", 30.0, 0.03),
        _quant_row("nvfp4-preallocated", 20.0, 0.02),
        _quant_row("nvfp4-inplace", 10.0, 0.01),
        _quant_row("nvfp4-fast", ratio, 0.6e-3),
        _timing_row(plan.LOAD_SHAPE, "legacy", 9.0, 5e-3),  # BF16: judged by target_lines
    ]
    lines = report.quant_target_lines(rows)
    assert lines == [
        f"- kimi-k2-nvfp4/tp8: `nvfp4-fast` x{ratio:.3f} copy (target <= 1.3: {verdict}), "
        "0.600 ms/layer",
        "- kimi-k2-nvfp4/tp8, ours against `nvfp4-legacy` (30.000 ms): none slower "
        "(`nvfp4-inplace`, `nvfp4-fast`)",
    ]
    assert not any("nvfp4" in line for line in report.target_lines(rows))


def test_quant_targets_name_a_strategy_of_ours_slower_than_legacy():
    rows = [
        _quant_row("nvfp4-legacy", 3.0, 0.03),
        _quant_row("nvfp4-preallocated", 4.0, 0.04),  # upstream (#55407): not judged
        _quant_row("nvfp4-inplace", 4.5, 0.045),
        _quant_row("nvfp4-fast", 1.1, 0.011),
        {"shape": "kimi-k2-nvfp4/tp8", "strategy": "nvfp4-fast", "error": "boom"},
    ]
    lines = report.quant_target_lines(rows)
    assert lines[0].startswith("- kimi-k2-nvfp4/tp8: `nvfp4-fast` x1.100 copy (target <= 1.3: met)")
    assert lines[1] == (
        "- kimi-k2-nvfp4/tp8, ours against `nvfp4-legacy` (30.000 ms): "
        "SLOWER: `nvfp4-inplace` 1.50x its time"
    )


def test_quant_targets_say_when_legacy_or_fast_was_not_timed():
    rows = [_quant_row("nvfp4-inplace", 1.2, 0.01)]
    (line,) = report.quant_target_lines(rows)
    assert line == "- kimi-k2-nvfp4/tp8: `nvfp4-legacy` not timed, ours not compared with it"


def test_memory_report_says_whether_cuda_agrees_with_the_dispatch_peak():
    row = {"shape": "kimi-k2-nvfp4/tp8", "strategy": "nvfp4-fast", "model_reserved_bytes": 0}
    rows = [
        {**row, "dispatch_peak_bytes": 2**20, "requested_peak_bytes": 2**20},
        {**row, "dispatch_peak_bytes": 2**20, "requested_peak_bytes": 2**20 + 512},
        {**row, "dispatch_peak_bytes": 2**20},  # a dry run
    ]
    rows[0]["requested_minus_dispatch"], rows[1]["requested_minus_dispatch"] = 0, 512
    text = report.report_markdown(_summary({"step": "memory", "rows": rows}, dry_run=False))
    assert "| requested = dispatch |" in text
    for cell in ("| agree |", "| DISAGREE (+512 B) |", "| n/a |"):
        assert cell in text


def test_a_failed_or_timed_out_step_is_reported_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(
        plan,
        "STEPS",
        (
            plan.Step("load", "whole-rank load", 1),  # importing torch alone takes longer
            plan.Step("asv", "asv", 60),
        ),
    )
    status = main([str(tmp_path), "--dry-run"])
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    steps = {step["step"]: step for step in summary["steps"]}
    assert steps["load"]["status"] == "timed out after 1 s"
    assert steps["asv"]["status"] in ("passed", "failed")  # ran: asv importable or not
    assert status == 1
    report = (tmp_path / "gpu-check.md").read_text()
    assert "| load: whole-rank load | timed out after 1 s |" in report


def test_the_time_box_scale_is_a_number_above_0():
    assert plan.time_box_scale({}) == 1.0
    assert plan.time_box_scale({plan.TIME_BOX_SCALE_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "four"):
        with pytest.raises(ValueError, match=f"{plan.TIME_BOX_SCALE_ENV}='{bad}'"):
            plan.time_box_scale({plan.TIME_BOX_SCALE_ENV: bad})


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path):
    """The command itself, full size: every step runs its CPU part and passes. Its time boxes
    x4 (GPU_CHECK_TIME_BOX_SCALE): the budgets are the H200's, which a CPU shared with other
    tests can overrun (docs/gpu.md has the dry run's seconds against them)."""
    # the script runs `python3`: this interpreter's, as on a GPU box where python3 has torch
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        GPU_CHECK_TIME_BOX_SCALE="4",
    )
    process = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check"), str(tmp_path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [step["step"] for step in summary["steps"]] == [step.name for step in plan.STEPS]
    failed = {s["step"]: s["status"] for s in summary["steps"] if s["status"] != "passed"}
    assert failed in ({}, {"asv": "failed"}), process.stdout[-3000:]  # asv: only in the bench extra
    assert "| exact: " in (tmp_path / "gpu-check.md").read_text()
    assert "; time boxes x4 (GPU_CHECK_TIME_BOX_SCALE)." in (tmp_path / "gpu-check.md").read_text()
