"""Whole-model figures: per-layer time times the MoE layers, and the rank load run on CUDA."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_cuda, requires_flashinfer

from moe_convert import REGISTRY, LayerShape, layer_shape
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.load.replay import tensor_bytes
from moe_convert.load.wholemodel import RUN_POOLS, _loaded_layer, run_load
from moe_convert.measuring.timing import whole_model_seconds

SMALL = LayerShape("small", 1, 8, 1024, 512, 4)
SMALL_NVFP4 = layer_shape("qwen3-235b-a22b-nvfp4", 4).with_experts(2)


def test_whole_model_seconds_is_per_layer_times_moe_layers():
    shape = layer_shape("qwen3-235b-a22b", 4)
    assert whole_model_seconds(shape, 0.25) == 0.25 * 94
    assert whole_model_seconds(layer_shape("deepseek-v3", 8), 2.0) == 2.0 * 58


def test_run_load_rejects_what_it_cannot_run():
    with pytest.raises(ValueError, match="layers"):
        run_load(SMALL, "strided_copy", layers=0)
    with pytest.raises(
        ValueError, match="pool 'sleep' cannot be run here: one of default, mempool"
    ):
        run_load(SMALL, "strided_copy", pool="sleep")
    with pytest.raises(ValueError, match=r"other_weights_bytes \(-1\) must be >= 0"):
        run_load(SMALL, "strided_copy", other_weights_bytes=-1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
@pytest.mark.parametrize(("shape", "name"), [(SMALL, "strided_copy"), (SMALL_NVFP4, "nvfp4-fast")])
def test_run_load_without_cuda_says_why(shape, name):
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        run_load(shape, name, layers=2)


@pytest.mark.parametrize(
    "shape", [SMALL, *(s for s in catalog_shapes() if s.format != "bf16")], ids=lambda s: s.label
)
def test_a_run_loads_each_layer_as_its_replay_does(shape):
    """What ``run_load`` allocates per layer: every tensor its replay loads, each its own
    allocation, in the same order and sizes (``replay.tensor_bytes``: BF16's w13,
    w2; a quantized format's weights, scales and biases), the layer's bytes in all."""
    upstream = shape.fmt.upstream
    layer = _loaded_layer(shape, upstream, torch.device("meta"))
    sizes = {name: t.nbytes for name, t in layer.items()}
    want = tensor_bytes(shape, upstream)
    assert sizes == want and list(sizes) == list(want)
    assert sizes["w13"] == shape.w13_bytes and sizes["w2"] == shape.w2_bytes
    assert sum(sizes.values()) == shape.layer_bytes


@requires_flashinfer
def test_a_flashinfer_helpers_load_is_of_the_bf16_layer_it_takes():
    # fp8-flashinfer quantizes a BF16 layer itself: the rank loads that one (zeros: finite)
    shape = layer_shape("llama-4-maverick-fp8", 8).with_experts(2)
    layer = _loaded_layer(shape, "fp8-flashinfer", torch.device("cpu"))
    sizes = {name: t.nbytes for name, t in layer.items()}
    assert (
        sizes
        == tensor_bytes(shape, "fp8-flashinfer")
        == {
            "w13": 2 * shape.w13_bytes,
            "w2": 2 * shape.w2_bytes,
        }
    )
    assert all(t.dtype == torch.bfloat16 and not t.any() for t in layer.values())


@requires_cuda
@pytest.mark.parametrize("pool", RUN_POOLS)
@pytest.mark.parametrize(
    "name", ["legacy", "preallocated", "strided_copy", "inplace", "strided_inplace"]
)
def test_run_load_of_a_few_small_layers(name, pool):
    result = run_load(SMALL, name, layers=3, pool=pool, other_weights_bytes=3 * 2**20)
    assert not result.oom and result.oom_message is None and result.num_ooms == 0
    assert result.loaded_reserved_bytes >= 3 * SMALL.layer_bytes
    assert result.peak_allocated_bytes >= 3 * SMALL.layer_bytes
    assert result.peak_reserved_bytes >= result.loaded_reserved_bytes
    assert result.peak_reserved_bytes >= result.final_reserved_bytes
    assert len(result.reserved_after_layer) == 3 == len(result.layer_seconds)
    assert result.pool == pool and result.device_bytes > result.peak_reserved_bytes
    assert (result.stranded_segments, result.num_device_alloc_failed) == (None, None)
    assert 0 < sum(result.layer_seconds) <= result.seconds
    if REGISTRY[name].inplace:  # a 2 MiB scratch: one 20 MiB segment, plus a 2 MiB small-pool one
        assert result.transient_reserved_bytes <= 22 * 2**20
    # the setting is restored: a later big block can be split again
    assert torch.cuda.memory_stats().get("max_split_size", -1) != 20 * 2**20
