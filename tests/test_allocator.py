"""The caching-allocator model, rule by rule (docs/allocator.md), with exact bytes."""

from __future__ import annotations

import pytest

from moe_convert.load.allocator import (
    Allocator,
    MiB,
    OutOfMemory,
    get_allocation_size,
    round_size,
)


def allocator(
    max_split_mb: int | None = None, *, capacity_mb: int | None = None, pool: str = "sleep"
) -> Allocator:
    return Allocator(
        capacity_bytes=None if capacity_mb is None else capacity_mb * MiB,
        max_split_size=None if max_split_mb is None else max_split_mb * MiB,
        pool=pool,
    )


def segment_sizes_mb(alloc: Allocator) -> list[float]:
    return [s.size / MiB for s in alloc.stats().segments]


def test_round_size_to_512_bytes():
    assert [round_size(n) for n in (1, 511, 512, 513, 1024, 6 * MiB + 1)] == [
        512,
        512,
        512,
        1024,
        1024,
        6 * MiB + 512,
    ]


def test_segment_sizes_2_mib_20_mib_or_rounded_to_2_mib():
    assert get_allocation_size(512) == 2 * MiB
    assert get_allocation_size(1 * MiB) == 2 * MiB  # the largest small request
    assert get_allocation_size(1 * MiB + 512) == 20 * MiB
    assert get_allocation_size(10 * MiB - 512) == 20 * MiB
    assert get_allocation_size(10 * MiB) == 10 * MiB
    assert get_allocation_size(10 * MiB + 512) == 12 * MiB
    alloc = allocator()
    for nbytes in (100, 11 * MiB, 3 * MiB, 768 * MiB):  # each fills what came before it
        alloc.malloc(nbytes)
    assert segment_sizes_mb(alloc) == [2, 12, 20, 768]
    assert [s.small for s in alloc.stats().segments] == [True, False, False, False]


@pytest.mark.parametrize(
    "max_split_mb, reserved_mb, stranded", [(20, 40, 1), (25, 20, 0), (None, 20, 0)]
)
def test_worked_example(max_split_mb, reserved_mb, stranded):
    """6, 6, 6 MiB allocated and freed, then 6 MiB: the merged 20 MiB block is oversize at 20."""
    alloc = allocator(max_split_mb)
    blocks = [alloc.malloc(6 * MiB) for _ in range(3)]
    assert [(b.offset // MiB, b.size // MiB) for b in blocks] == [(0, 6), (6, 6), (12, 6)]
    assert segment_sizes_mb(alloc) == [20]  # one segment split 6 + 14, 6 + 8, 6 + 2
    for block in blocks:
        alloc.free(block)
    again = alloc.malloc(6 * MiB)
    stats = alloc.stats()
    assert stats.reserved_bytes == reserved_mb * MiB
    assert stats.stranded_segments == stranded
    assert stats.allocated_bytes == 6 * MiB
    assert again.offset == 0


def test_each_free_and_allocate_cycle_strands_a_segment_at_20():
    alloc = allocator(20)
    for cycle in range(1, 5):
        alloc.free(alloc.malloc(6 * MiB))
        assert alloc.stats().stranded_segments == cycle
    assert alloc.reserved_bytes == 80 * MiB


def test_oversize_block_serves_a_large_request_only_within_20_mib():
    alloc = allocator(20)
    alloc.free(alloc.malloc(64 * MiB))
    taken = alloc.malloc(48 * MiB)  # 64 < 48 + 20: served, not split (48 >= max_split)
    assert (taken.size, alloc.reserved_bytes) == (64 * MiB, 64 * MiB)
    assert alloc.allocated_bytes == 64 * MiB  # the whole unsplit block counts
    alloc.free(taken)
    alloc.malloc(40 * MiB)  # 64 >= 40 + 20: refused, a new 40 MiB segment
    assert segment_sizes_mb(alloc) == [64, 40]


def test_unlimited_max_split_splits_any_block():
    alloc = allocator(None)
    alloc.free(alloc.malloc(64 * MiB))
    taken = alloc.malloc(6 * MiB)
    assert (taken.size, alloc.reserved_bytes) == (6 * MiB, 64 * MiB)


def test_large_pool_splits_only_a_remainder_above_1_mib():
    alloc = allocator(None)
    assert alloc.malloc(11 * MiB).size == 12 * MiB  # remainder exactly 1 MiB: not split
    assert alloc.malloc(11 * MiB - 512).size == 11 * MiB - 512  # remainder 1 MiB + 512: split
    assert segment_sizes_mb(alloc) == [12, 12]


def test_large_pool_does_not_split_at_or_above_max_split():
    alloc = allocator(25)
    assert alloc.malloc(6 * MiB).size == 6 * MiB  # below 25: the 20 MiB segment is split
    big = alloc.malloc(30 * MiB)  # 30 MiB segment, whole
    alloc.free(big)
    assert alloc.malloc(26 * MiB).size == 30 * MiB  # >= 25: the 30 MiB block is not split


def test_small_pool_splits_down_to_512_bytes():
    alloc = allocator(20)
    first = alloc.malloc(1 * MiB)
    second = alloc.malloc(1 * MiB - 512)  # leaves 512 B: split
    third = alloc.malloc(1)  # rounded to 512 B: takes the last 512 B
    assert [b.size for b in (first, second, third)] == [1 * MiB, 1 * MiB - 512, 512]
    assert segment_sizes_mb(alloc) == [2]
    assert alloc.allocated_bytes == 2 * MiB


def test_small_and_large_pools_are_apart():
    alloc = allocator(None)
    alloc.free(alloc.malloc(4096))  # a free 2 MiB small segment
    alloc.malloc(1 * MiB + 512)  # large: never served from the small pool
    assert segment_sizes_mb(alloc) == [2, 20]


def test_free_merges_with_both_neighbours():
    alloc = allocator(None)
    a, b, c = (alloc.malloc(6 * MiB) for _ in range(3))
    alloc.free(b)  # free 6 MiB at offset 6, free 2 MiB at offset 18: not adjacent
    alloc.malloc(7 * MiB)  # neither fits: a new segment
    assert segment_sizes_mb(alloc) == [20, 20]
    alloc.free(a)  # merges with b (its next): 12 MiB free at offset 0
    taken = alloc.malloc(12 * MiB)
    assert (taken.offset, taken.segment.order, alloc.reserved_bytes) == (0, 0, 40 * MiB)
    alloc.free(taken)
    alloc.free(c)  # merges with the 12 MiB before and the 2 MiB after: the whole segment
    assert alloc.malloc(20 * MiB).segment.order == 0


def test_no_merge_across_segments():
    alloc = allocator(None)
    blocks = [alloc.malloc(6 * MiB) for _ in range(4)]  # 3 in segment 0, 1 in segment 1
    for block in blocks:
        alloc.free(block)
    alloc.malloc(30 * MiB)  # two free 20 MiB segments side by side do not make 30 MiB
    assert segment_sizes_mb(alloc) == [20, 20, 30]


def events(alloc: Allocator) -> tuple[int, int, int, int]:
    """(cudaMalloc calls, cudaFree calls, refused cudaMalloc calls, retries)."""
    s = alloc.stats()
    return s.num_device_alloc, s.num_device_free, s.num_device_alloc_failed, s.num_alloc_retries


def test_stranded_segments_sleep_pool_runs_out_where_default_pool_releases():
    """Three stranded 20 MiB segments fill a 60 MiB device; a fourth 6 MiB request needs a new
    segment. The sleep pool fails; the default pool and a MemPool release one stranded segment
    (6b) first: a refused cudaMalloc, a cudaFree, a cudaMalloc, no retry."""
    for pool in ("sleep", "default", "mempool"):
        alloc = allocator(20, capacity_mb=60, pool=pool)
        for _ in range(3):
            alloc.free(alloc.malloc(6 * MiB))
        if pool == "sleep":
            with pytest.raises(OutOfMemory, match=r"Tried to allocate 20\.00 MiB") as error:
                alloc.malloc(6 * MiB)
            assert (error.value.request_bytes, error.value.alloc_bytes) == (6 * MiB, 20 * MiB)
            assert (alloc.num_ooms, alloc.reserved_bytes) == (1, 60 * MiB)
            assert events(alloc) == (3, 0, 1, 0)
        else:
            alloc.malloc(6 * MiB)
            stats = alloc.stats()
            assert (stats.num_ooms, stats.num_alloc_retries) == (0, 0)
            assert (stats.reserved_bytes, stats.stranded_segments) == (60 * MiB, 2)
            assert events(alloc) == (4, 1, 1, 0)


def test_release_available_frees_oversize_blocks_from_the_largest_down():
    alloc = allocator(20, capacity_mb=64, pool="default")
    for _ in range(3):  # three stranded 20 MiB segments
        alloc.free(alloc.malloc(6 * MiB))
    alloc.malloc(30 * MiB)  # none >= 30 free: 20 + 20 released (>= 30), then 30 allocated
    assert segment_sizes_mb(alloc) == [20, 30]
    assert alloc.num_alloc_retries == 0


def test_release_cached_blocks_then_retry_in_the_default_pool_only():
    """No max_split_size: 6b does nothing; 6c frees every free whole segment and retries, only
    where no use_mem_pool context is open (not in a MemPool, not in the sleep pool)."""
    for pool in ("default", "mempool", "sleep"):
        alloc = allocator(None, capacity_mb=40, pool=pool)
        alloc.free(alloc.malloc(30 * MiB))
        if pool == "default":
            alloc.malloc(32 * MiB)
            assert segment_sizes_mb(alloc) == [32]
            assert (alloc.num_alloc_retries, alloc.num_ooms) == (1, 0)
            # cudaMalloc 30, refused 32, cudaFree 30, retried cudaMalloc 32
            assert events(alloc) == (2, 1, 1, 1)
        else:
            with pytest.raises(OutOfMemory):
                alloc.malloc(32 * MiB)
            assert (alloc.num_alloc_retries, alloc.num_ooms) == (0, 1)
            assert events(alloc) == (1, 0, 1, 0)


def test_mempool_frees_its_own_oversize_blocks_but_never_flushes():
    """At 20 MiB a MemPool's failed request releases stranded oversize segments (6b) like the
    default pool; where those are not enough (a free 10 MiB segment is below max_split_size),
    the default pool's flush (6c) still finds memory and the MemPool runs out."""
    for pool in ("default", "mempool"):
        alloc = allocator(20, capacity_mb=40, pool=pool)
        alloc.free(alloc.malloc(6 * MiB))  # a stranded 20 MiB segment
        alloc.free(alloc.malloc(10 * MiB))  # its own free 10 MiB segment: not oversize
        # A refused cudaMalloc of 30; 6b frees the 20 and, not enough, tries no allocation.
        if pool == "default":
            alloc.malloc(30 * MiB)  # 6c frees the 10 and the retried cudaMalloc succeeds
            assert segment_sizes_mb(alloc) == [30]
            assert events(alloc) == (3, 2, 1, 1)
        else:
            with pytest.raises(OutOfMemory, match=r"Tried to allocate 30\.00 MiB"):
                alloc.malloc(30 * MiB)
            assert segment_sizes_mb(alloc) == [10]  # 6b released the 20; then nothing more
            assert events(alloc) == (2, 1, 1, 0)


def test_default_pool_out_of_memory_after_both_release_steps():
    alloc = allocator(20, capacity_mb=40, pool="default")
    alloc.malloc(6 * MiB)  # its segment is in use: nothing can be released
    with pytest.raises(OutOfMemory, match=r"Tried to allocate 30\.00 MiB"):
        alloc.malloc(30 * MiB)
    assert (alloc.num_alloc_retries, alloc.num_ooms, alloc.reserved_bytes) == (1, 1, 20 * MiB)


def test_peaks_and_accounting():
    alloc = allocator(20)
    a = alloc.malloc(6 * MiB)
    b = alloc.malloc(100)
    alloc.free(a)
    alloc.free(b)
    stats = alloc.stats()
    assert (stats.allocated_bytes, stats.peak_allocated_bytes) == (0, 6 * MiB + 512)
    assert (stats.reserved_bytes, stats.peak_reserved_bytes) == (22 * MiB, 22 * MiB)


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="max_split_size .* must be >= 20971520"):
        allocator(19)
    with pytest.raises(ValueError, match="pool 'cumem'"):
        allocator(pool="cumem")
    alloc = allocator()
    with pytest.raises(ValueError, match="nbytes .0. must be > 0"):
        alloc.malloc(0)
    block = alloc.malloc(10)
    alloc.free(block)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(block)


def test_measure_event_costs_rounds_are_one_refusal_each():
    """``loadtime.measure_event_costs``' refused rounds, replayed: a device filled with 20 MiB
    segments until one is refused, one of them back in the cache; then each
    ``ROUND_REQUEST_BYTES`` request, freed before the next, is one refused ``cudaMalloc``, one
    ``cudaFree`` and one ``cudaMalloc``, with no retry of the whole cache and no OOM (the round
    a legacy load meets). Held instead, five requests would share one segment."""
    from moe_convert.load.loadtime import ROUND_REQUEST_BYTES  # imports torch

    alloc = allocator(20, capacity_mb=2 * 1024 + 7, pool="default")
    filling = []
    with pytest.raises(OutOfMemory):
        while True:
            filling.append(alloc.malloc(20 * MiB))
    alloc.free(filling.pop())
    before = alloc.stats()
    for _ in range(8):
        alloc.free(alloc.malloc(ROUND_REQUEST_BYTES))
    after = alloc.stats()
    moved = {
        field: getattr(after, field) - getattr(before, field)
        for field in ("num_device_alloc", "num_device_free", "num_device_alloc_failed",
                      "num_alloc_retries", "num_ooms")
    }  # fmt: skip
    assert moved == {
        "num_device_alloc": 8,
        "num_device_free": 8,
        "num_device_alloc_failed": 8,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
