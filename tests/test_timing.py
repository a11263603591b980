"""Timing helpers give sane statistics and keep their promises (no wall-clock thresholds here)."""

from __future__ import annotations

import pytest
import torch

from moe_convert import REGISTRY, LayerShape, layer_shape
from moe_convert.measuring.timing import (
    CALIBRATION_BYTES,
    LayerTiming,
    Timing,
    calibration_copy,
    cpu_threads,
    time_call,
    time_layer,
)

TINY = LayerShape("tiny", 1, 2, 256, 128, 3)


def test_timing_statistics():
    timing = Timing((4.0, 1.0, 3.0, 2.0, 5.0))
    assert timing.median == 3.0
    assert timing.iqr == 2.0  # quartiles 2 and 4 (inclusive method)
    assert Timing((0.5,)).iqr == 0.0
    assert timing.spread == 5.0


def test_copy_ratio_pairs_each_call_with_its_copy():
    # Load doubled both sides of the last two pairs (and the strategy of the third call alone):
    # the per-pair ratios are mostly 2, while the ratio of the medians would read 4.
    timed = LayerTiming(
        "s",
        TINY,
        "cpu",
        strategy_time=Timing((2.0, 2.0, 4.0, 4.0, 4.0)),
        copy_time=Timing((1.0, 1.0, 1.0, 2.0, 2.0)),
        minor_faults=None,
    )
    assert timed.copy_ratio == 2.0


def test_every_time_figure_derives_from_one_measurement():
    # 8 of the model's 128 experts timed: the whole model scales by 16 and by the 94 layers.
    model = layer_shape("qwen3-235b-a22b", 4)
    timed = LayerTiming(
        "strided_copy",
        model.with_experts(8),
        "cpu",
        Timing((0.2, 0.3, 0.4)),
        Timing((0.1, 0.1, 0.2)),
        minor_faults=0,
        model_experts=model.experts,
    )
    assert timed.seconds == 0.3 and timed.copy_ratio == 2.0
    assert timed.whole_model_seconds == pytest.approx(0.3 * 16 * 94)
    assert timed.whole_model_copy_seconds == pytest.approx(0.1 * 16 * 94)
    assert timed.bytes_moved == 2 * model.with_experts(8).layer_bytes
    full = LayerTiming("strided_copy", model, "cpu", Timing((0.3,)), Timing((0.1,)), minor_faults=0)
    assert full.whole_model_seconds == pytest.approx(0.3 * 94)  # no model_experts: as timed


def test_calibration_copy_times_a_copy_of_its_size():
    measured = calibration_copy(device="cpu", repeats=3, threads=1)
    assert len(measured.samples) == 3 and measured.spread >= 1.0
    assert CALIBRATION_BYTES == 64 * 2**20


def test_time_call_on_a_trivial_function():
    calls = []
    timing = time_call(
        lambda: calls.append("fn"),
        device="cpu",
        repeats=4,
        warmup=2,
        setup=lambda: calls.append("setup"),
    )
    assert len(timing.samples) == 4
    assert all(s >= 0 for s in timing.samples)
    assert min(timing.samples) <= timing.median <= max(timing.samples)
    assert timing.iqr >= 0
    assert calls == ["setup", "fn"] * 6  # setup before every call, warm-up ones included


def test_time_call_sets_and_restores_cpu_threads():
    before = torch.get_num_threads()
    seen = []
    time_call(lambda: seen.append(torch.get_num_threads()), device="cpu", repeats=2, threads=1)
    assert seen == [1, 1, 1]
    assert torch.get_num_threads() == before
    with cpu_threads() as used:
        assert used >= 1 and torch.get_num_threads() == used
    assert torch.get_num_threads() == before


def test_cpu_threads_leaves_other_devices_alone():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with cpu_threads(target, device="meta") as used:
        assert used is None and torch.get_num_threads() == before
    with cpu_threads(target, device="cpu") as used:
        assert used == target == torch.get_num_threads()
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [{"repeats": 0}, {"warmup": -1}])
def test_time_call_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        time_call(lambda: None, device="cpu", **bad)


@pytest.mark.parametrize("name", ["strided_copy", "strided_inplace", "preallocated"])
def test_time_layer_on_a_tiny_shape(name):
    timed = time_layer(TINY, name, repeats=3)
    assert (timed.strategy, timed.shape.label, timed.device, timed.experts) == (
        name,
        "tiny/tp1",
        "cpu",
        2,
    )
    assert len(timed.strategy_time.samples) == len(timed.copy_time.samples) == 3
    assert timed.bytes_moved == 2 * (TINY.w13_bytes + TINY.w2_bytes)
    assert timed.copy_ratio > 0 and timed.gbps > 0 and timed.copy_gbps > 0
    assert timed.whole_model_seconds == pytest.approx(timed.seconds * TINY.moe_layers)
    assert isinstance(timed.minor_faults, int) and timed.minor_faults >= 0
    assert timed.threads is not None and timed.threads >= 1


def test_time_layer_restores_inplace_input_before_each_call(monkeypatch):
    # An in-place strategy must see checkpoint-layout bytes on every call, not its own output.
    import moe_convert.measuring.timing as timing

    seen = []
    real_convert = timing.convert

    def spy(layer, *, strategy, gated):
        seen.append(layer["w13"].clone())
        return real_convert(layer, strategy=strategy, gated=gated)

    monkeypatch.setattr(timing, "convert", spy)
    assert REGISTRY["strided_inplace"].inplace
    time_layer(TINY, "strided_inplace", repeats=2)
    assert len(seen) == 3  # 1 warm-up round + 2 timed (the cache warm-up is formats' own call)
    assert all(torch.equal(s.view(torch.int16), seen[0].view(torch.int16)) for s in seen)


def test_time_layer_refuses_meta():
    with pytest.raises(ValueError, match="meta"):
        time_layer(TINY, "strided_copy", device="meta")
