"""``scripts/gpu-check``'s CPU side: the plan and its budget, the steps in dry-run mode, a step
that fails or runs out of time reported while the next one runs, and the targets' verdicts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_convert import STRATEGIES
from moe_convert.shapes import shape_from_label

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up there
_spec.loader.exec_module(gpu_check)


@pytest.fixture
def small(monkeypatch):
    """Every shape label resolves to its per-expert geometry with 2 experts, loads to 3 layers."""
    monkeypatch.setattr(gpu_check, "_shape", lambda label: shape_from_label(label).with_experts(2))
    monkeypatch.setattr(gpu_check, "ALLOCATOR_LAYERS", 3)
    monkeypatch.setattr(gpu_check, "SLEEP_LAYERS", 3)


def test_plan_lists_every_step_within_the_wall_budget():
    lines = gpu_check.plan_lines(dry_run=True)
    for step in gpu_check.STEPS:
        assert any(step.name in line and f"{step.budget_s} s" in line for line in lines)
    assert sum(step.budget_s for step in gpu_check.STEPS) <= gpu_check.WALL_BUDGET_S <= 6 * 60


def test_dry_run_exact_computes_the_cpu_reference_only(small):
    findings = gpu_check.step_exact(dry_run=True)
    assert findings["ok"]
    assert [row["shape"] for row in findings["rows"]] == list(gpu_check.CHECK_SHAPES)
    assert all(row["exact"] is None for row in findings["rows"])


def test_dry_run_memory_gives_formula_and_model_for_every_strategy(small):
    rows = gpu_check.step_memory(dry_run=True)["rows"]
    assert {(r["shape"], r["strategy"]) for r in rows} == {
        (label, name) for label in gpu_check.CHECK_SHAPES for name in STRATEGIES
    }
    for row in rows:  # the model reserves whole segments, multiples of 2 MiB
        assert row["dispatch_peak_bytes"] > 0
        assert row["model_reserved_bytes"] % (2 * 2**20) == 0
        assert "peak_reserved_bytes" not in row  # the CUDA part did not run


def test_dry_run_allocator_replays_the_model_per_layer(small):
    rows = gpu_check.step_allocator(dry_run=True)["rows"]
    assert [row["strategy"] for row in rows] == list(STRATEGIES)
    for row in rows:
        assert len(row["model_reserved_after_layer"]) == 3
        assert row["match"] is None and row["real_reserved_after_layer"] is None


def test_dry_run_sleep_predicts_with_both_pools(small):
    rows = gpu_check.step_sleep(dry_run=True)["rows"]
    assert [row["strategy"] for row in rows] == list(STRATEGIES)
    for row in rows:
        assert row["predicted_sleep_peak_reserved_bytes"] <= gpu_check.SLEEP_DEVICE_BYTES
        assert "oom_layer" not in row


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
    shape = gpu_check.LOAD_SHAPE
    rows = [
        _timing_row(shape, "strided_copy", 1.3, 7e-4),
        _timing_row(shape, "legacy", 9.0, 5e-3),
        _timing_row(shape, "strided_inplace", 1.5, 6e-4),
        {"shape": shape, "strategy": "batched", "error": "RuntimeError: boom"},
    ]
    lines = gpu_check.target_lines(rows)
    assert any(
        "out of place: `strided_copy` x1.300 copy (target <= 1.25: NOT met)" in line
        for line in lines
    )
    assert any(
        "in place: `strided_inplace` x1.500 copy (target <= 1.6: met)" in line for line in lines
    )
    assert any("`strided_inplace` 56.4 ms (target <= 60 ms: met)" in line for line in lines)


def test_a_failed_or_timed_out_step_is_reported_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(
        gpu_check,
        "STEPS",
        (
            gpu_check.Step("sleep", "sleep-mode load", 1),  # importing torch alone takes longer
            gpu_check.Step("asv", "asv", 60),
        ),
    )
    status = gpu_check.main([str(tmp_path), "--dry-run"])
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    steps = {step["step"]: step for step in summary["steps"]}
    assert steps["sleep"]["status"] == "timed out after 1 s"
    assert steps["asv"]["status"] in ("passed", "failed")  # ran: asv importable or not
    assert status == 1
    report = (tmp_path / "gpu-check.md").read_text()
    assert "| sleep: sleep-mode load | timed out after 1 s |" in report


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
    assert [step["step"] for step in summary["steps"]] == [step.name for step in gpu_check.STEPS]
    failed = {s["step"]: s["status"] for s in summary["steps"] if s["status"] != "passed"}
    assert failed in ({}, {"asv": "failed"}), process.stdout[-3000:]  # asv: only in the bench extra
    assert "| exact: " in (tmp_path / "gpu-check.md").read_text()
