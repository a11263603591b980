"""A whole rank's refits, replayed (issue 38 item 6): N refits in a row after the first load.

Small shapes whose bytes are worked out by hand (MiB = 2^20): ``SMALL``'s layer is w13 32 MiB
(each expert 8 MiB) and w2 16 MiB, each its own exact-size segment; three layers, 144 MiB
loaded. Then vLLM #52511's and #41268's OOMs replayed from their own facts, at full size.
"""

from __future__ import annotations

import json

import pytest

from moe_convert import LayerShape
from moe_convert.cli.commands import main
from moe_convert.load.allocator import MiB
from moe_convert.load.refit_replay import REPORTS, align_trace, replay_refits, replay_report
from moe_convert.load.replay import refit_trace

GiB = 2**30
SMALL = LayerShape("small", 1, 4, 2048, 1024, 3, True, "bf16")
LOADED = 144 * MiB  # 3 layers x (32 + 16) MiB


def calls(round_) -> tuple[int, int, int, int]:
    """(cudaMalloc, cudaFree, refused cudaMalloc, retries) of one refit."""
    return (
        round_.num_device_alloc,
        round_.num_device_free,
        round_.num_device_alloc_failed,
        round_.num_alloc_retries,
    )


def test_inplace_strands_one_segment_per_layer_and_refit_until_the_sleep_pool_is_full():
    """inplace's 8 MiB scratch takes a 20 MiB segment that, once free, is oversize at 20: every
    layer of every refit makes a new one (+60 MiB a refit) and the sleep pool never gives one
    back. 364 MiB: the load ends at 204, refits 1 and 2 at 264 and 324; refit 3 fits layers 0
    and 1 (364 MiB) and runs out at layer 2."""
    result = replay_refits(SMALL, "inplace", 5, device_bytes=364 * MiB)
    assert result.load.final_reserved_bytes == LOADED + 60 * MiB
    assert [calls(r) for r in result.rounds] == [(3, 0, 0, 0), (3, 0, 0, 0), (2, 0, 1, 0)]
    assert [r.reserved_growth_bytes for r in result.rounds] == [60 * MiB, 60 * MiB, 40 * MiB]
    assert result.oom_refit == 3 and result.rounds[-1].oom_layer == 2
    assert result.rounds[-1].oom_message.startswith("Tried to allocate 20.00 MiB")
    assert result.margin_bytes == 0
    assert result.unallocated_bytes == 11 * 20 * MiB  # every scratch segment made, stranded


def test_inplace_refits_are_flat_without_the_limit_or_outside_the_sleep_pool():
    """Unlimited, the free 20 MiB segment serves the next scratch: one segment in all. In the
    default pool at 20, once full, each scratch segment costs a refused cudaMalloc and the
    release of one stranded segment (a cudaFree): no OOM, no growth."""
    unlimited = replay_refits(SMALL, "inplace", 3, device_bytes=364 * MiB, max_split_size_mb=None)
    assert unlimited.load.num_device_alloc == 1 and unlimited.oom_refit is None
    assert [calls(r) for r in unlimited.rounds] == [(0, 0, 0, 0)] * 3
    default = replay_refits(SMALL, "inplace", 5, device_bytes=364 * MiB, pool="default")
    assert default.oom_refit is None
    assert [calls(r) for r in default.rounds] == [
        (3, 0, 0, 0),
        (3, 0, 0, 0),
        (3, 1, 1, 0),
        (3, 3, 3, 0),
        (3, 3, 3, 0),
    ]
    assert default.final_reserved_bytes == 364 * MiB


def test_strided_inplace_and_preallocated_refits_make_no_driver_call():
    """strided_inplace's 10 MiB scratch is an exact-size segment below the limit, reused; a
    direct refit of preallocated (out of place) puts its outputs in the segments of the
    outputs it replaces: the load's segments serve every refit."""
    strided = replay_refits(SMALL, "strided_inplace", 3, device_bytes=None)
    assert strided.load.final_reserved_bytes == LOADED + 10 * MiB
    assert [calls(r) for r in strided.rounds] == [(0, 0, 0, 0)] * 3
    preallocated = replay_refits(SMALL, "preallocated", 3, device_bytes=None)
    assert [calls(r) for r in preallocated.rounds] == [(0, 0, 0, 0)] * 3
    assert {r.allocated_bytes for r in preallocated.rounds} == {LOADED}


def test_streamed_refit_allocates_nothing_and_layerwise_pays_fresh_tensors_once():
    """Ours: each expert placed into the held layer, no allocation. vLLM's layerwise way: fresh
    checkpoint tensors (32 + 16 MiB, segments of their own, reused from the second layer on)
    and inplace's scratch (a 20 MiB segment per layer) in the first refit; then the scratch
    alone."""
    streamed = replay_refits(SMALL, "streaming", 2, way="streamed", device_bytes=None)
    assert [calls(r) for r in streamed.rounds] == [(0, 0, 0, 0)] * 2
    assert refit_trace(SMALL, "streaming", "streamed").events == ()
    layerwise = replay_refits(SMALL, "inplace", 2, way="layerwise", device_bytes=None)
    assert [r.reserved_growth_bytes for r in layerwise.rounds] == [108 * MiB, 60 * MiB]


def test_padding_after_load_strands_the_loaded_layer():
    """vLLM 0.25.1's form on a layer that is not gated, loaded at I 896 (w13 and w2 14 MiB each)
    and padded to 1024 (16 MiB each) before preallocated's conversion: the freed 14 MiB segments
    never serve a 16 MiB request, so each layer strands its 28 MiB of loaded weights, and every
    layer's two outputs need two new segments (+32 MiB a layer)."""
    shape = LayerShape("small", 1, 4, 2048, 1024, 3, False, "bf16")
    pad = align_trace(LayerShape("small", 1, 4, 2048, 896, 3, False, "bf16"), 1024)
    assert [(e.kind, e.nbytes) for e in pad.events] == [("alloc", 16 * MiB)] * 2
    result = replay_refits(shape, "preallocated", 1, device_bytes=None, loaded_intermediate=896)
    assert result.load.loaded_reserved_bytes == 84 * MiB
    assert result.load.reserved_growth_per_layer_bytes == 32 * MiB
    # the stranded loaded weights and the last layer's freed padded inputs
    assert result.unallocated_bytes == 3 * 28 * MiB + 32 * MiB
    with pytest.raises(ValueError, match="not gated"):
        align_trace(SMALL, 2048)


def test_refits_must_be_counted():
    with pytest.raises(ValueError, match="refits"):
        replay_refits(SMALL, "inplace", -1, device_bytes=None)


def test_vllm_52511_out_of_memory_replayed_from_its_own_facts():
    """Nemotron-3-Super-120B-A12B BF16 TP2 on a GB200 under NeMo-RL's sleep mode, vLLM 0.25.1:
    each layer's 1344-row w13 and w2 (1.3125 GiB each) padded to 1408 rows (1.375 GiB, "Tried
    to allocate 1.38 GiB") strand 2.625 GiB; the 24th layer's padding finds no room. The 23
    layers before it strand 60.375 GiB: the report's "60.38 GiB allocated in private pools"."""
    report = REPORTS["vllm#52511"]
    result = replay_report("vllm#52511")
    assert result.oom_refit == 0 and result.load.oom_layer == 22
    assert result.load.oom_message.startswith("Tried to allocate 1408.00 MiB")
    assert result.unallocated_bytes == 23 * 2 * 1344 * MiB
    assert round(result.unallocated_bytes / GiB, 2) == pytest.approx(report.private_gib, abs=0.01)


def test_vllm_41268_out_of_memory_replayed_from_its_own_facts():
    """Qwen3-235B-A22B TP4 on a GB200 in sleep mode, vLLM 0.21 (``legacy``): +1300 MiB stranded
    a layer, out of memory at layer 55 on a 20 MiB segment with the device's 181.82 GiB
    reserved (the report: 181.81 GiB); stranded 70.99 GiB (the report: 71.20 GiB)."""
    result = replay_report("vllm#41268")
    assert result.oom_refit == 0 and result.load.oom_layer == 55
    assert result.load.oom_message.startswith("Tried to allocate 20.00 MiB")
    assert result.final_reserved_bytes == 186184 * MiB
    assert result.unallocated_bytes == 76228329472


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_our_forms_load_the_reports_ranks_and_refit_without_growth(report):
    """strided_inplace and streaming (``streamed`` refits) load each report's rank, padded before
    loading, and refit it with no driver call; inplace (vLLM #54699) loads it too but strands
    one 20 MiB segment per layer and refit in the sleep pool at 20."""
    shape = REPORTS[report].shape
    for strategy, way in (("strided_inplace", "direct"), ("streaming", "streamed")):
        result = replay_report(report, strategy, 2, way=way)
        assert result.oom_refit is None, strategy
        assert [calls(r) for r in result.rounds] == [(0, 0, 0, 0)] * 2, strategy
    inplace = replay_report(report, "inplace", 1)
    assert inplace.oom_refit is None
    assert inplace.rounds[0].reserved_growth_bytes == shape.moe_layers * 20 * MiB


def test_cli_replay_refits_json(capsys):
    """One 48 MiB layer (``SMALL``'s, explicit shapes have one) on 0.1 GiB (102.4 MiB): inplace's
    stranded 20 MiB scratch segments reach 68 MiB after the load and 88 MiB after refit 1;
    refit 2 runs out; strided_inplace's 10 MiB scratch segment is all it adds (58 MiB)."""
    shape = ["--experts", "4", "--hidden", "2048", "--intermediate", "1024", "--quiet"]
    argv = ["replay", *shape, "--device-gib", "0.1", "--refits", "3", "--json"]
    assert main([*argv, "--strategy", "inplace,strided_inplace"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["strategy"], r["oom_refit"], len(r["refit_rounds"])) for r in records] == [
        ("inplace", 2, 2),
        ("strided_inplace", None, 3),
    ]
    assert records[0]["refit_rounds"][0]["reserved_bytes"] == 88 * MiB
    assert records[1]["margin_bytes"] == records[1]["device_bytes"] - 58 * MiB
