"""Whole-model replays: vLLM PR #45589's table, and which strategies grow reserved memory.

Seed 000: Qwen3-235B-A22B TP4 under vLLM sleep mode on a 141 GB GPU (139.5 GiB lent), 109.61 GiB
of weights per rank (105.75 GiB MoE + 3.86 GiB other). Legacy ran out of memory with
``max_split_size_mb=20`` ("Tried to allocate 20.00 MiB") and loaded with 25, 32, 64 and 128;
preallocated loaded with 20.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from moe_convert import REGISTRY, LayerShape, layer_shape, strategies
from moe_convert.cli.commands import main
from moe_convert.load.allocator import Allocator, MiB
from moe_convert.load.replay import LayerTrace, _replay_trace, layer_trace, replay_load
from moe_convert.load.wholemodel import RankLoad
from moe_convert.measuring.memory import MemoryEvent

GiB = 2**30
QWEN = layer_shape("qwen3-235b-a22b", 4)
SEED = dict(pool="sleep", device_bytes=int(139.5 * GiB), other_weights_bytes=int(3.86 * GiB))


def seed_replay(strategy: str, max_split_size_mb: int | None):
    return replay_load(QWEN, strategy, max_split_size_mb=max_split_size_mb, **SEED)


@pytest.mark.parametrize("strategy", sorted(strategies("bf16")))
def test_trace_leaves_exactly_the_outputs_of_out_of_place_strategies(strategy):
    trace = layer_trace(QWEN, strategy)
    assert trace.output_bytes == (0 if REGISTRY[strategy].inplace else QWEN.layer_bytes)


def test_seed_table_legacy_runs_out_at_20_only():
    oom = seed_replay("legacy", 20)
    assert oom.oom and oom.num_ooms == 1
    assert oom.oom_message.startswith(
        "Tried to allocate 20.00 MiB"
    )  # the error vLLM #45589 reported
    # 30606 MiB free after loading; layer 0 leaves 3220 MiB reserved, each later layer strands
    # 1300 MiB more (65 segments of 20 MiB): layer 21 ends at 30520 MiB, layer 22 cannot finish.
    assert oom.oom_layer == 22
    assert oom.reserved_growth_per_layer_bytes == 1300 * MiB
    for max_split_size_mb in (25, 32, 64, 128, None):
        ok = seed_replay("legacy", max_split_size_mb)
        assert not ok.oom, max_split_size_mb
        assert ok.reserved_growth_per_layer_bytes == 0
        assert ok.peak_reserved_bytes == ok.loaded_reserved_bytes + 3220 * MiB


def test_seed_table_preallocated_loads_at_20():
    result = seed_replay("preallocated", 20)
    assert not result.oom
    assert result.reserved_growth_per_layer_bytes == 0
    # the two outputs (T13 + T2) and one small-pool segment for the index temporaries
    assert result.peak_reserved_bytes == result.loaded_reserved_bytes + QWEN.layer_bytes + 2 * MiB


def test_one_expert_scratch_strands_one_segment_per_layer_at_20():
    """inplace's 6 MiB scratch gets a slice of a 20 MiB segment; freed whole, that segment is
    oversize at 20 and the next layer's scratch needs a new one. Not at 25: 20 MiB is below it."""
    at20 = seed_replay("inplace", 20)
    assert not at20.oom
    assert at20.reserved_growth_per_layer_bytes == 20 * MiB
    assert at20.stranded_segments == QWEN.moe_layers
    at25 = seed_replay("inplace", 25)
    assert at25.reserved_growth_per_layer_bytes == 0
    assert at25.peak_reserved_bytes == at25.loaded_reserved_bytes + 20 * MiB


@pytest.mark.parametrize("max_split_size_mb", [20, 25, None])
def test_strided_inplace_scratch_owns_a_reused_segment(max_split_size_mb):
    """strided_inplace asks for >= 10 MiB: an own 10 MiB segment, reused by every layer."""
    result = seed_replay("strided_inplace", max_split_size_mb)
    assert not result.oom
    assert result.reserved_growth_per_layer_bytes == 0
    assert result.peak_reserved_bytes == result.loaded_reserved_bytes + 10 * MiB


@pytest.mark.parametrize("strategy", ["batched", "strided_copy"])
def test_whole_tensor_transients_reuse_their_segments(strategy):
    result = seed_replay(strategy, 20)
    assert not result.oom and result.reserved_growth_per_layer_bytes == 0


def test_default_pool_releases_stranded_segments_instead_of_failing():
    result = replay_load(QWEN, "legacy", max_split_size_mb=20, **{**SEED, "pool": "default"})
    assert not result.oom and result.num_ooms == 0
    assert result.peak_reserved_bytes <= SEED["device_bytes"]


def events(result) -> tuple[int, int, int, int]:
    """(cudaMalloc, cudaFree, refused cudaMalloc, retries) of the conversions."""
    return (
        result.num_device_alloc,
        result.num_device_free,
        result.num_device_alloc_failed,
        result.num_alloc_retries,
    )


def test_preallocated_allocates_three_segments_in_a_whole_rank_load():
    """Layer 0's two outputs (T13, T2) and one small segment for the index temporaries; every
    later layer's outputs take the segments of the parameters the previous layer replaced."""
    for pool in ("default", "mempool", "sleep"):
        for max_split_size_mb in (20, None):
            result = replay_load(
                QWEN, "preallocated", max_split_size_mb=max_split_size_mb, **{**SEED, "pool": pool}
            )
            assert events(result) == (3, 0, 0, 0), (pool, max_split_size_mb)


def test_legacy_at_20_makes_65_segments_per_layer_and_pays_for_each_once_the_device_is_full():
    """vLLM #45589's slow load, to the event. Layer 0 makes what a single layer makes; each later
    layer strands 1300 MiB (65 segments of 20 MiB) at 20 and nothing when unlimited. On the
    141 GB device of the seed, once the device is full every new segment first fails a
    cudaMalloc and releases one stranded segment (a cudaFree), never a retry."""
    one = replay_load(
        dataclasses.replace(QWEN, moe_layers=1),
        "legacy",
        max_split_size_mb=20,
        pool="default",
        device_bytes=None,
    )
    unbounded = replay_load(QWEN, "legacy", max_split_size_mb=20, pool="default", device_bytes=None)
    assert unbounded.num_device_alloc == one.num_device_alloc + (QWEN.moe_layers - 1) * 65
    assert events(unbounded)[1:] == (0, 0, 0)
    full = replay_load(QWEN, "legacy", max_split_size_mb=20, **{**SEED, "pool": "default"})
    assert full.num_device_alloc == unbounded.num_device_alloc  # the same requests need segments
    assert full.num_device_free == full.num_device_alloc_failed > 0
    assert full.num_alloc_retries == 0 and not full.oom
    assert (
        events(replay_load(QWEN, "legacy", max_split_size_mb=20, **{**SEED, "pool": "mempool"}))[:3]
        == events(full)[:3]
    )
    unlimited = replay_load(QWEN, "legacy", max_split_size_mb=None, **{**SEED, "pool": "default"})
    assert events(unlimited) == (one.num_device_alloc, 0, 0, 0)


def test_out_of_place_results_replace_the_weights():
    result = replay_load(
        QWEN, "strided_copy", max_split_size_mb=None, pool="sleep", device_bytes=None
    )
    assert result.loaded_reserved_bytes == QWEN.model_bytes
    assert result.peak_reserved_bytes == QWEN.model_bytes + QWEN.layer_bytes
    assert len(result.reserved_after_layer) == QWEN.moe_layers


def test_weights_that_do_not_fit_are_an_error():
    with pytest.raises(ValueError, match="cannot hold the weights"):
        replay_load(QWEN, "inplace", max_split_size_mb=20, pool="sleep", device_bytes=100 * GiB)


def test_replay_skips_empty_storages_and_reallocates_a_grown_one():
    shape = LayerShape("explicit", 1, 1, 128, 128, 1)
    events = (
        MemoryEvent("alloc", 0, 0, "empty"),
        MemoryEvent("free", 0, 0, ""),
        MemoryEvent("alloc", 1, 6 * MiB, "empty"),
        MemoryEvent("alloc", 1, 6 * MiB, "index_select"),  # out= grew it to 12 MiB
        MemoryEvent("free", 1, 12 * MiB, ""),
    )
    alloc = Allocator(capacity_bytes=None, max_split_size=None, pool="sleep")
    _replay_trace(alloc, LayerTrace(shape, "synthetic", events))
    stats = alloc.stats()
    assert [s.size for s in stats.segments] == [20 * MiB]  # 6 MiB, then 12 MiB beside it
    assert (stats.peak_allocated_bytes, stats.allocated_bytes) == (18 * MiB, 0)


def test_cli_replay_json(capsys):
    assert (
        main(
            [
                "replay",
                "--model",
                "qwen3-235b-a22b",
                "--tp",
                "4",
                "--strategy",
                "legacy,preallocated",
                "--max-split-mb",
                "20,none",
                "--device-gib",
                "139.5",
                "--other-weights-gib",
                "3.86",
                "--json",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["strategy"], r["max_split_mb"], r["oom"], r["oom_layer"]) for r in records] == [
        ("legacy", 20, True, 22),
        ("legacy", None, False, None),
        ("preallocated", 20, False, None),
        ("preallocated", None, False, None),
    ]
    assert all(r["pool"] == "sleep" and r["peak_reserved_bytes"] > 0 for r in records)
    assert records[0]["reserved_growth_per_layer_bytes"] == 1300 * MiB


def test_cli_simulate_is_the_old_name_of_replay(capsys):
    assert (
        main(
            [
                "simulate",
                "--model",
                "qwen3-235b-a22b",
                "--tp",
                "4",
                "--strategy",
                "legacy",
                "--max-split-mb",
                "20,25",
                "--device-gib",
                "139.5",
                "--other-weights-gib",
                "3.86",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "OOM layer 22" in out and "1.27 GiB" in out
    assert out.startswith("replay qwen3-235b-a22b/tp4")


def test_replayed_load_is_one_record_of_the_rank_load():
    # The same type as the CUDA run's (wholemodel.run_load): fields a run cannot know are None
    # there and left out of the comparison; the rest compare one by one.
    replayed = seed_replay("strided_copy", 20)
    assert isinstance(replayed, RankLoad)
    assert (replayed.shape, replayed.layers, replayed.max_split_size_mb) == (QWEN.label, 94, 20)
    assert replayed.oom_message is None and isinstance(replayed.stranded_segments, int)
    assert replayed.seconds is None and replayed.layer_seconds is None
    run = dataclasses.replace(
        replayed,
        stranded_segments=None,
        num_device_alloc_failed=None,
        seconds=2.5,
        layer_seconds=(0.1,) * 94,
        other_weights_bytes=0,
    )
    assert run.differences(replayed) == {"other_weights_bytes": (0, SEED["other_weights_bytes"])}
    late = dataclasses.replace(run, oom_layer=3, peak_reserved_bytes=1, num_device_free=7)
    assert set(late.differences(run)) == {"oom_layer", "peak_reserved_bytes", "num_device_free"}
    assert replayed.transient_reserved_bytes == QWEN.layer_bytes
