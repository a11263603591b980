"""The load-time model: conversions plus allocator events times their recorded costs."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from moe_convert import layer_shape
from moe_convert.load.loadtime import measure_event_costs, predict_replayed
from moe_convert.load.replay import replay_load
from moe_suite.loadtime import DeviceCosts, EventCosts, append_costs, read_costs

GiB = 2**30
QWEN = layer_shape("qwen3-235b-a22b", 4)
# Round numbers, not a device's: the test checks the arithmetic, not a measurement.
COSTS = EventCosts(
    cuda_malloc_seconds=1e-4, cuda_free_seconds=1e-3, failed_cuda_malloc_seconds=1e-5, samples=3
)


def seed_load(strategy: str):
    return replay_load(
        QWEN,
        strategy,
        max_split_size_mb=20,
        pool="default",
        device_bytes=int(139.5 * GiB),
        other_weights_bytes=int(3.86 * GiB),
    )


def test_prediction_is_conversions_plus_each_event_times_its_cost():
    legacy = seed_load("legacy")
    predicted = predict_replayed(legacy, 0.01, COSTS)
    assert predicted == pytest.approx(
        94 * 0.01
        + legacy.num_device_alloc * 1e-4
        + legacy.num_device_free * 1e-3
        + legacy.num_device_alloc_failed * 1e-5
    )
    # preallocated makes 3 segments in the whole load: its prediction is its conversions
    assert predict_replayed(seed_load("preallocated"), 0.01, COSTS) == pytest.approx(
        94 * 0.01 + 3 * 1e-4
    )


def test_an_oom_load_is_predicted_up_to_its_oom_layer():
    oom = replay_load(
        QWEN,
        "legacy",
        max_split_size_mb=20,
        pool="sleep",
        device_bytes=int(139.5 * GiB),
        other_weights_bytes=int(3.86 * GiB),
    )
    assert oom.oom_layer == 22 and oom.layers_converted == 22
    zero = EventCosts(0.0, 0.0, 0.0, 1)
    assert predict_replayed(oom, 1.0, zero) == 22.0


def test_a_run_is_measured_not_predicted():
    run = dataclasses.replace(seed_load("legacy"), num_device_alloc_failed=None, seconds=9.0)
    with pytest.raises(ValueError, match="a run's RankLoad lacks num_device_alloc_failed"):
        predict_replayed(run, 0.01, COSTS)


def test_costs_are_recorded_and_the_last_of_a_device_read_back(tmp_path):
    path = tmp_path / "device-costs.json"
    assert read_costs(path) is None
    first = DeviceCosts("NVIDIA H200", "2.11", "aaaa", "2026-12-01T00:00Z", COSTS, {})
    second = dataclasses.replace(
        first, commit="bbbb", layer_seconds={QWEN.label: {"legacy": 0.0097}}
    )
    other = dataclasses.replace(first, device="NVIDIA GB200", commit="cccc")
    for costs in (first, second, other):
        append_costs(costs, path)
    assert [r["commit"] for r in json.loads(path.read_text())] == ["aaaa", "bbbb", "cccc"]
    assert read_costs(path) == other
    assert read_costs(path, device="NVIDIA H200") == second
    assert read_costs(path, device="NVIDIA B200") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_measuring_costs_needs_cuda():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        measure_event_costs()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_measured_costs_are_positive():
    costs = measure_event_costs(segments=8, refusals=2)
    assert costs.cuda_malloc_seconds > 0 and costs.cuda_free_seconds > 0
    assert costs.failed_cuda_malloc_seconds > 0 and costs.samples == 24
