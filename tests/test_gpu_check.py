"""``scripts/gpu-check``'s CPU side: the plan and its budget, the steps in dry-run mode, a step
that fails or runs out of time reported while the next one runs, and the targets' verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_bench.gpucheck import exact, load, memory, plan, report
from moe_bench.gpucheck.__main__ import main, plan_lines
from moe_convert import STRATEGIES
from moe_convert.shapes import shape_from_label
from moe_convert.wholemodel import PR45589_SHAPE

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def small(monkeypatch):
    """Every shape label resolves to its per-expert geometry with 2 experts, loads to 3 layers."""
    monkeypatch.setattr(plan, "shape", lambda label: shape_from_label(label).with_experts(2))
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
    assert {(r["shape"], r["strategy"]) for r in rows} == {
        (label, name) for label in plan.CHECK_SHAPES for name in STRATEGIES
    }
    for row in rows:  # the model reserves whole segments, multiples of 2 MiB
        assert row["dispatch_peak_bytes"] > 0
        assert row["model_reserved_bytes"] % (2 * 2**20) == 0
        assert "peak_reserved_bytes" not in row  # the CUDA part did not run


def test_dry_run_allocator_replays_the_model_per_layer(small):
    rows = memory.step_allocator(dry_run=True)["rows"]
    assert [row["strategy"] for row in rows] == list(STRATEGIES)
    for row in rows:
        assert len(row["model_reserved_after_layer"]) == 3
        assert row["match"] is None and row["real_reserved_after_layer"] is None


def test_the_load_step_loads_vllm_45589s_rank():
    assert plan.LOAD_SHAPE == PR45589_SHAPE


def test_dry_run_load_replays_every_configuration(monkeypatch):
    monkeypatch.setattr(plan, "LOAD_STRATEGIES", ("preallocated", "inplace", "no-such"))
    findings = load.step_load(dry_run=True)
    assert findings["ok"] and findings["events"] is None
    rows = findings["rows"]
    assert [(r["strategy"], r["max_split_mb"], r["pool"]) for r in rows] == [
        (name, max_split, pool)
        for max_split, pool in plan.LOAD_CONFIGS
        for name in ("preallocated", "inplace")
    ]
    for row in rows:  # full size, replayed only: no run, no prediction without costs
        assert "run" not in row and "predicted_seconds" not in row
        assert row["replayed"]["layers"] == 94 and row["replayed"]["oom_layer"] is None
    assert rows[0]["replayed"]["num_device_alloc"] == 3  # preallocated: two outputs, indices


def _load_row(strategy: str, max_split, seconds: float, allocs: int) -> dict:
    replayed = {
        "num_device_alloc": allocs,
        "num_device_free": 0,
        "num_alloc_retries": 0,
        "oom_layer": None,
    }
    run = {**replayed, "seconds": seconds}
    return {
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


def test_costs_record_takes_step_4s_costs_and_the_timed_layers():
    costs = {"cuda_malloc_seconds": 1e-4, "cuda_free_seconds": 1e-3}
    costs |= {"failed_cuda_malloc_seconds": 1e-5, "samples": 192}
    summary = {
        "device": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "commit": "abcdef0",
        "started": "2026-12-01 00:00:00 UTC",
        "steps": [
            {"step": "load", "events": costs, "layer_seconds": {"legacy": 0.0097}},
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
    }
    summary["steps"][0] = {"step": "load", "events": None}  # a dry run
    assert report.costs_record(summary) is None


def _timing_row(shape: str, strategy: str, ratio: float, seconds: float) -> dict:
    return {
        "shape": shape,
        "strategy": strategy,
        "inplace": STRATEGIES[strategy].inplace,
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


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path):
    """The command itself, full size: every step runs its CPU part inside its budget."""
    # the script runs `python3`: this interpreter's, as on a GPU box where python3 has torch
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
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
