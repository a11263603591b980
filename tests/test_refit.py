"""The refit (``moe_convert.load.refit``): vLLM 0.34's direct and layerwise reload of every
strategy, the two properties that make one reload-safe (addresses kept, a cold conversion's
bytes), a test per class, and the refit's figures, exact on meta.

Classes met here: reload-safe (``inplace``); addresses lost (``mxfp4-inplace``'s biases, every
out-of-place strategy's outputs under a direct reload); no checkpoint view (``fp8-flashinfer``:
its fp8 storage is half its bf16 checkpoint); bytes differ (no registered strategy: a probe that
keeps a stale result, as vLLM #48312's stale derived tensors).
"""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import REGISTRY, Layer, LayerShape, convert, layer_shape, register
from moe_convert.cli import commands as cli
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.formats.placement import checkpoint_views, specs_of
from moe_convert.formats.table import strategy_input
from moe_convert.load.refit import (
    REFITS,
    VLLM_WAYS,
    check_refit,
    check_shapes,
    direct_refit,
    refit_call,
    refit_memory,
    refit_traffic,
    reload_safety,
    time_refit,
)
from moe_convert.measuring.memory import strategy_memory
from moe_convert.measuring.traffic import strategy_traffic

# Every strategy that needs nothing beyond this library: its class is docs/library.md's.
PLAIN = sorted(name for name, record in REGISTRY.items() if not record.needs)
SMALL_BF16 = LayerShape("refit", 1, 2, 64, 64, 1, True, "bf16")  # w13 [2, 128, 64], w2 [2, 64, 64]


def fresh(shape: LayerShape, strategy: str, seed: int) -> Layer:
    return strategy_input(shape, strategy, "cpu", seed=seed)


def storages(layer: Layer) -> dict[str, int]:
    return {name: t.untyped_storage().data_ptr() for name, t in layer.items()}


def assert_same_bytes(got: Layer, want: Layer) -> None:
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert (got[name].shape, got[name].dtype) == (tensor.shape, tensor.dtype), name
        assert torch.equal(got[name].view(torch.uint8), tensor.view(torch.uint8)), name


def test_the_in_place_strategies_keep_every_address_but_mxfp4_inplace_s_biases():
    """The measured classes (issue 38): of the in-place strategies, every one reload-safe but
    ``mxfp4-inplace``, whose float32 biases get new storage; every out-of-place one loses its
    outputs' addresses under a direct reload and keeps them under a layerwise one."""
    for name in PLAIN:
        got = reload_safety(name)
        if name == "mxfp4-inplace":
            assert got == "not reload-safe: direct: w13_bias, w2_bias in new storage (E2 H128 I128)"
        elif REGISTRY[name].inplace:
            assert got == "reload-safe", name
        else:
            assert got.startswith("not reload-safe: direct: w13, w2") and "layerwise" not in got
            assert got.count("in new storage") == 1 and "bytes" not in got, name


def test_a_reload_safe_strategy_refits_in_its_own_storage_to_a_cold_conversion_s_bytes():
    held = convert(fresh(SMALL_BF16, "inplace", 0), strategy="inplace")
    pointers = (held.w13.data_ptr(), held.w2.data_ptr())
    new = fresh(SMALL_BF16, "inplace", 1)
    cold = convert(Layer(new.w13.clone(), new.w2.clone()), strategy="inplace")
    for _ in range(3):  # refit after refit, as RL does
        got = direct_refit(held, new, strategy="inplace", gated=True)
        assert (got.w13.data_ptr(), got.w2.data_ptr()) == pointers
        assert_same_bytes(got, cold)
    for way in REFITS:
        for shape in check_shapes("bf16"):
            check = check_refit(shape, "inplace", way)
            assert check.safe and check.reason == "", (way, check.shape)


def test_a_strategy_that_loses_addresses_names_the_tensors():
    (shape,) = check_shapes("mxfp4")  # gated only
    direct = check_refit(shape, "mxfp4-inplace", "direct")
    assert direct.moved == ("w13_bias", "w2_bias") and direct.differ == () and not direct.safe
    assert direct.reason == "w13_bias, w2_bias in new storage"
    assert check_refit(shape, "mxfp4-inplace", "layerwise").safe


def test_an_out_of_place_strategy_under_a_direct_reload_writes_the_views_then_moves():
    held = convert(fresh(SMALL_BF16, "strided_copy", 0), strategy="strided_copy")
    before = storages(held)
    new = fresh(SMALL_BF16, "strided_copy", 1)
    got = direct_refit(held, new, strategy="strided_copy", gated=True)
    # the loader's bytes went into the first load's storage, the conversion into new storage
    views = checkpoint_views(held, specs_of(new))
    assert storages(views) == before
    assert_same_bytes(views, new)
    assert set(storages(got).values()).isdisjoint(before.values())
    check = check_refit(SMALL_BF16, "strided_copy", "direct")
    assert check.moved == ("w13", "w2") and check.differ == ()


def test_a_strategy_whose_refit_bytes_differ_is_not_reload_safe():
    """A probe that keeps its first result per storage (a derived tensor not refilled): the
    direct refit returns the first load's storage unconverted; the layerwise one converts fresh
    tensors and is safe."""
    kept = {}

    def stale(w13, w2, gated):
        """Test probe. In place. Peak transient: one expert."""
        key = w13.untyped_storage().data_ptr()
        if key not in kept:  # the kept result holds its storage: no address is reused
            kept[key] = REGISTRY["strided_inplace"].function(Layer(w13, w2), gated)
        return kept[key]

    try:
        register("_stale", format="bf16", inplace=True, origin="test probe")(stale)
        check = check_refit(SMALL_BF16, "_stale", "direct")
        assert check.moved == () and check.differ == ("w13", "w2")
        assert check.reason == "w13, w2 not a cold conversion's bytes"
        assert check_refit(SMALL_BF16, "_stale", "layerwise").safe
        assert reload_safety("_stale") == (
            "not reload-safe: direct: w13, w2 not a cold conversion's bytes (E2 H64 I64)"
        )
    finally:
        REGISTRY.pop("_stale", None)


@requires_flashinfer
def test_a_strategy_whose_storage_cannot_hold_its_checkpoint_is_refused_a_direct_refit():
    shape = LayerShape("refit", 1, 2, 64, 64, 1, True, "fp8")
    check = check_refit(shape, "fp8-flashinfer", "direct")
    assert not check.safe and check.moved == check.differ == ()
    assert check.refused.startswith("no checkpoint view (w13: its storage holds 16384 bytes")
    with pytest.raises(ValueError, match=r"^cannot view the converted layer.*needs 32768$"):
        refit_call(shape, "fp8-flashinfer", "direct", "cpu")
    assert check_refit(shape, "fp8-flashinfer", "layerwise").safe


def test_a_checkpoint_view_is_the_converted_storage_from_its_first_byte():
    (shape,) = check_shapes("mxfp4")
    held = convert(fresh(shape, "mxfp4-inplace", 0), strategy="mxfp4-inplace")
    new = fresh(shape, "mxfp4-inplace", 1)
    views = checkpoint_views(held, specs_of(new))
    for name, tensor in new.items():
        view = views[name]
        assert (view.shape, view.dtype, view.is_contiguous()) == (tensor.shape, tensor.dtype, True)
        assert view.data_ptr() == held[name].data_ptr()
    # float32 biases hold twice their bf16 checkpoint: the view is their first half
    assert views.w13_bias.nbytes * 2 == held.w13_bias.nbytes


def test_an_unknown_way_is_one_line_naming_the_ways():
    with pytest.raises(
        ValueError, match=r"^unknown refit way 'sideways'; ways: direct, layerwise, streamed$"
    ):
        refit_call(SMALL_BF16, "inplace", "sideways")


def test_the_strategies_command_prints_each_class(capsys):
    assert cli.main(["strategies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("mxfp4-inplace "))
    assert lines[at + 1] == (
        "    reload          not reload-safe: direct: w13_bias, w2_bias in new storage "
        "(E2 H128 I128)"
    )
    at = next(i for i, line in enumerate(lines) if line.startswith("inplace "))
    assert lines[at + 1] == "    reload          reload-safe"


@pytest.mark.parametrize("strategy", ["inplace", "nvfp4-inplace"])
def test_full_size_refit_figures_on_meta(strategy):
    """Exact at full size: a direct refit costs the checkpoint's write (2 L, one launch per
    tensor) and the conversion; a layerwise one holds the fresh layer (L) under the conversion's
    peak and copies the result (as many bytes as the layer, in place) back."""
    shape = layer_shape("qwen3-235b-a22b-nvfp4" if strategy != "inplace" else "qwen3-235b-a22b", 4)
    record, size, tensors = REGISTRY[strategy], shape.layer_bytes, len(shape.tensor_specs)
    peak, traffic = record.peak.evaluate(shape), record.traffic.evaluate(shape)
    launches = record.launches.evaluate(shape)
    assert refit_memory(shape, strategy, "direct").peak_bytes == peak
    assert refit_memory(shape, strategy, "layerwise").peak_bytes == size + peak
    direct = refit_traffic(shape, strategy, "direct")
    assert (direct.traffic_bytes, direct.launches) == (2 * size + traffic, tensors + launches)
    layerwise = refit_traffic(shape, strategy, "layerwise")
    assert layerwise.traffic_bytes == 4 * size + traffic
    assert layerwise.launches == 2 * tensors + launches


def _catalog_shape(fmt: str) -> LayerShape:
    return next(s for s in catalog_shapes() if s.format == fmt and s.conversion_error is None)


@pytest.mark.parametrize("strategy", PLAIN)
def test_every_refit_is_the_write_and_the_conversion_on_meta(strategy):
    """Every strategy's refit figures from the conversion's own (``strategy_memory``,
    ``strategy_traffic``), on a catalog shape of its format with four experts: nothing else
    allocates or moves data. O: the conversion's output bytes, copied back layerwise."""
    shape = _catalog_shape(REGISTRY[strategy].format).with_experts(4)
    taken = strategy_input(shape, strategy, "meta")
    size, tensors = sum(t.nbytes for t in taken.values()), len(taken)
    out = convert(taken, strategy=strategy, gated=shape.gated)
    out_bytes, outputs = sum(t.nbytes for t in out.values()), len(out)
    peak = strategy_memory(shape, strategy).peak_bytes
    work = strategy_traffic(shape, strategy)
    assert refit_memory(shape, strategy, "direct").peak_bytes == peak
    assert refit_memory(shape, strategy, "layerwise").peak_bytes == size + peak
    direct = refit_traffic(shape, strategy, "direct")
    assert direct.traffic_bytes == 2 * size + work.traffic_bytes
    assert direct.launches == tensors + work.launches
    layerwise = refit_traffic(shape, strategy, "layerwise")
    assert layerwise.traffic_bytes == 2 * size + work.traffic_bytes + 2 * out_bytes
    assert layerwise.launches == tensors + work.launches + outputs


# Every strategy that takes its format's checkpoint: a streamed refit places into its layer.
PLACEABLE = [name for name in PLAIN if REGISTRY[name].takes == REGISTRY[name].format]


@pytest.mark.parametrize("strategy", PLACEABLE)
def test_a_streamed_refit_keeps_every_address_and_gives_a_cold_conversion_s_bytes(strategy):
    """Ours: whatever strategy made the held layer, its experts placed in it (no conversion
    run) keep every output's storage and give the bytes a cold conversion of the new weights
    gives, gated and not."""
    for shape in check_shapes(REGISTRY[strategy].format):
        check = check_refit(shape, strategy, "streamed")
        assert check.safe, check.reason


def test_the_reload_class_is_vllm_s_ways_only():
    assert VLLM_WAYS == ("direct", "layerwise") and set(REFITS) == {*VLLM_WAYS, "streamed"}
    # out of place: lost under vLLM's direct reload, however safe our streamed refit of it is
    assert reload_safety("strided_copy").startswith("not reload-safe: direct:")


@requires_flashinfer
def test_a_streamed_refit_of_a_strategy_that_quantizes_its_input_is_refused():
    shape = check_shapes("fp8")[0]
    check = check_refit(shape, "fp8-flashinfer", "streamed")
    assert not check.safe and "quantizes a bf16 layer itself" in check.refused
    with pytest.raises(ValueError, match="quantizes a bf16 layer itself"):
        refit_call(shape, "fp8-flashinfer", "streamed")


@pytest.mark.parametrize("fmt", sorted({REGISTRY[name].format for name in PLACEABLE}))
def test_a_streamed_refit_costs_the_streaming_strategy_s_placement_without_its_output(fmt):
    """Exact on meta, a catalog shape of every format: the streamed refit moves what the
    format's streaming strategy moves, in as many launches, and holds what it holds but the
    converted layer it allocates (nothing at all but MXINT4's one slice)."""
    streaming = "streaming" if fmt == "bf16" else f"{fmt}-streaming"
    shape = _catalog_shape(fmt)
    out = convert(strategy_input(shape, streaming, "meta"), strategy=streaming, gated=shape.gated)
    held = sum(t.nbytes for t in out.values())
    peak = refit_memory(shape, f"{fmt}-inplace" if fmt != "bf16" else "inplace", "streamed")
    assert peak.peak_bytes == strategy_memory(shape, streaming).peak_bytes - held
    if fmt != "mxint4":
        assert peak.peak_bytes == 0
    refit = refit_traffic(shape, streaming, "streamed")
    work = strategy_traffic(shape, streaming)
    assert (refit.traffic_bytes, refit.launches) == (work.traffic_bytes, work.launches)


@pytest.mark.parametrize("way", ["direct", "streamed"])
def test_a_refit_is_timed_against_a_copy_of_the_new_weights(way):
    """``time_refit``: the calls interleaved with a copy of what the refit takes in (its layer's
    bytes), the new weights left as they are (nothing restored between calls)."""
    shape = LayerShape("refit", 1, 2, 256, 128, 1, True, "nvfp4")
    timing = time_refit(shape, "nvfp4-inplace", way, repeats=3, threads=1, model_experts=8)
    assert (timing.strategy, timing.shape, timing.device) == ("nvfp4-inplace", shape, "cpu")
    assert len(timing.strategy_time.samples) == len(timing.copy_time.samples) == 3
    assert timing.bytes_moved == 2 * shape.layer_bytes and timing.copy_ratio > 0
    assert timing.whole_model_seconds == timing.seconds * 4 * shape.moe_layers
