"""A model of PyTorch's CUDA caching allocator, for one device and one stream.

It replays a sequence of ``malloc``/``free`` calls the way ``c10/cuda/CUDACachingAllocator.cpp``
(``DeviceCachingAllocator``) serves them and tells reserved and allocated bytes, segments, and
whether and where a request runs out of memory. Every rule below names, in a comment, the C++
function it mirrors; the rules are written down in docs/allocator.md. Nothing here is
fitted to an observed result.

Modelled: request rounding, the small (<= 1 MiB) and large pools, segment sizes, best-fit search
with the oversize rules of ``max_split_size`` and ``max_non_split_rounding_size``, splitting
(the request takes the low part of a block), merging with free neighbours of the same segment
only, and the failure path. Not modelled: several streams or devices, events, CUDA graphs,
``expandable_segments``, ``roundup_power2_divisions``, ``garbage_collection_threshold`` (all off
by default and off in vLLM's sleep-mode pool).

Three pool behaviours (``pool=``):

- ``"default"``: requests go to the default pools and no ``use_mem_pool`` context is open, so
  after a failed raw allocation both release steps apply (``release_available_cached_blocks``
  when ``max_split_size`` is set, then ``release_cached_blocks``).
- ``"mempool"``: every request goes to one ``torch.cuda.MemPool`` under ``use_mem_pool`` (raw
  allocations by ``cudaMalloc``): ``release_available_cached_blocks`` still frees the pool's own
  oversize blocks, but while the context is open ``release_cached_blocks`` is skipped, so the
  next failure is the out-of-memory error (rule 9 of docs/allocator.md).
- ``"sleep"``: vLLM's sleep mode (``CuMemAllocator.use_memory_pool(tag="weights")``): every
  request goes to one private pool whose raw allocations go through vLLM's CuMem allocator. Its C
  code keeps a global error code that is not reset after a failure, so the first failed raw
  allocation is an out-of-memory error: no release step helps (rule 11 of docs/allocator.md).

Addresses are not modelled; where PyTorch breaks a size tie by address, this model uses the
segment's creation order, then the offset inside the segment.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal

from ..units import K_MIN_LARGE_ALLOC, MiB

__all__ = [
    "MiB",
    "K_MIN_BLOCK_SIZE",
    "K_SMALL_SIZE",
    "K_SMALL_BUFFER",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_LARGE_BUFFER",
    "MAX_NON_SPLIT_ROUNDING_SIZE",
    "MIN_MAX_SPLIT_SIZE",
    "POOLS",
    "Pool",
    "round_size",
    "get_allocation_size",
    "OutOfMemory",
    "SegmentState",
    "AllocatorStats",
    "Allocator",
]

# Constants of CUDACachingAllocator.cpp (and c10/core/AllocatorConfig for the last two).
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * MiB  # kSmallSize: largest "small" request
K_SMALL_BUFFER = 2 * MiB  # kSmallBuffer: the segment size of the small pool
# kMinLargeAlloc (K_MIN_LARGE_ALLOC, from here a request gets its own segment) and MiB: in
# moe_convert.units, which the formats' strategies share.
K_ROUND_LARGE = 2 * MiB  # kRoundLarge: large segments are multiples of this
K_LARGE_BUFFER = 20 * MiB  # kLargeBuffer: the segment of a 1-10 MiB request
# AllocatorConfig's default max_non_split_rounding_size (= kLargeBuffer): an oversize free block
# may serve a large request only when it is less than this much bigger.
MAX_NON_SPLIT_ROUNDING_SIZE = 20 * MiB
# parseMaxSplitSize: "max_split_size_mb too small, must be >= 20" (torch 2.13; older: > 20).
MIN_MAX_SPLIT_SIZE = 20 * MiB

Pool = Literal["default", "mempool", "sleep"]
POOLS: tuple[Pool, ...] = ("default", "mempool", "sleep")


def round_size(nbytes: int) -> int:
    """[round_size] Below 512 B a request becomes 512 B; otherwise a multiple of 512 B.

    Power-of-two rounding (``roundup_power2_divisions``) is off by default and not modelled.
    """
    if nbytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * -(-nbytes // K_MIN_BLOCK_SIZE)


def get_allocation_size(size: int) -> int:
    """[get_allocation_size] The segment made for a rounded request ``size`` that finds no block.

    <= 1 MiB: a 2 MiB segment (small pool); < 10 MiB: a 20 MiB segment; else rounded up to 2 MiB.
    """
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


class OutOfMemory(Exception):
    """A request the allocator could not serve: ``torch.OutOfMemoryError`` in PyTorch.

    ``alloc_bytes`` is what PyTorch's message reports ("Tried to allocate ..."): the size of the
    segment it tried to allocate, not the request.
    """

    def __init__(
        self, request_bytes: int, alloc_bytes: int, reserved_bytes: int, capacity_bytes: int
    ) -> None:
        self.request_bytes = request_bytes
        self.alloc_bytes = alloc_bytes
        self.reserved_bytes = reserved_bytes
        self.capacity_bytes = capacity_bytes
        super().__init__(
            f"Tried to allocate {alloc_bytes / MiB:.2f} MiB (a segment for a request of "
            f"{request_bytes} bytes) with {reserved_bytes / MiB:.2f} MiB reserved of "
            f"{capacity_bytes / MiB:.2f} MiB"
        )


@dataclass(frozen=True)
class SegmentState:
    """One segment (one raw allocation) at the time of a snapshot."""

    size: int
    small: bool  # a small-pool segment (2 MiB, requests <= 1 MiB)
    allocated_bytes: int  # bytes of its allocated blocks (block sizes, rounded)


@dataclass(frozen=True)
class AllocatorStats:
    """Counters and segments of an ``Allocator``; the names of ``torch.cuda.memory_stats()``."""

    max_split_size: int | None  # bytes; None = unlimited (PyTorch's default)
    reserved_bytes: int  # sum of segment sizes ("reserved_bytes.all.current")
    allocated_bytes: int  # sum of allocated block sizes ("allocated_bytes.all.current")
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    num_device_alloc: int  # raw allocations made (cudaMalloc calls that succeeded)
    num_device_free: int  # raw allocations given back (cudaFree calls)
    num_device_alloc_failed: int  # raw allocations refused by the device (not a torch counter)
    num_alloc_retries: int  # raw allocations retried after release_cached_blocks
    num_ooms: int
    segments: tuple[SegmentState, ...]  # in creation order

    @property
    def stranded_segments(self) -> int:
        """Free whole segments of ``size >= max_split_size``: oversize, they serve no smaller
        request (and only requests less than 20 MiB smaller than themselves)."""
        if self.max_split_size is None:
            return 0
        return sum(
            1 for s in self.segments if s.allocated_bytes == 0 and s.size >= self.max_split_size
        )


class _Segment:
    __slots__ = ("order", "size", "small", "allocated")

    def __init__(self, order: int, size: int, small: bool) -> None:
        self.order = order  # creation order: this model's stand-in for the address
        self.size = size
        self.small = small
        self.allocated = 0


class Block:
    """A block of a segment: what ``malloc`` returns and ``free`` takes back (read-only)."""

    __slots__ = ("size", "offset", "segment", "prev", "next", "allocated")

    def __init__(self, size: int, offset: int, segment: _Segment) -> None:
        self.size = size
        self.offset = offset
        self.segment = segment
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False

    def _key(self) -> tuple[int, int, int]:
        # BlockComparatorSize: size first, ties by address (here: segment order, offset).
        return (self.size, self.segment.order, self.offset)


class Allocator:
    """The caching allocator of one device and stream, with one pool behaviour.

    Parameters
    ----------
    capacity_bytes
        Memory the device can lend to this allocator: a raw allocation that would take reserved
        bytes above it fails (cudaMalloc's out-of-memory). ``None``: unbounded.
    max_split_size
        ``max_split_size_mb`` in bytes (>= 20 MiB, as PyTorch's parser requires), or ``None`` for
        PyTorch's default (unlimited).
    pool
        ``"default"`` or ``"sleep"`` (see the module docstring).
    """

    def __init__(
        self, *, capacity_bytes: int | None, max_split_size: int | None, pool: Pool
    ) -> None:
        if pool not in POOLS:
            raise ValueError(f"pool {pool!r} is not one of {', '.join(POOLS)}")
        if max_split_size is not None and max_split_size < MIN_MAX_SPLIT_SIZE:
            raise ValueError(
                f"max_split_size ({max_split_size} bytes) must be >= {MIN_MAX_SPLIT_SIZE} "
                "(20 MiB, PyTorch's parseMaxSplitSize), or None for unlimited"
            )
        if capacity_bytes is not None and capacity_bytes < 0:
            raise ValueError(f"capacity_bytes ({capacity_bytes}) must be >= 0 or None")
        self.capacity_bytes = capacity_bytes
        self.max_split_size = max_split_size
        self.pool = pool
        self.reserved_bytes = 0
        self.allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_device_alloc_failed = 0
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self._segments: dict[int, _Segment] = {}  # order -> segment, in creation order
        self._next_order = 0
        # BlockPool.blocks of the small (True) and large (False) pool: free blocks sorted by
        # (size, segment order, offset, block); the first three are unique, so blocks are never
        # compared.
        self._free: dict[bool, list[tuple[int, int, int, Block]]] = {True: [], False: []}

    # -- the public surface ---------------------------------------------------------------------

    def malloc(self, nbytes: int) -> Block:
        """[DeviceCachingAllocator::malloc] Serve a request of ``nbytes`` (> 0) or raise
        ``OutOfMemory`` (after counting it in ``num_ooms``)."""
        if nbytes <= 0:
            raise ValueError(f"nbytes ({nbytes}) must be > 0: PyTorch never mallocs 0 bytes")
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE  # [get_pool]
        alloc_size = get_allocation_size(size)
        block = self._get_free_block(size, small)
        if block is None:
            block = self._alloc_block(alloc_size, small)
        # [malloc] the failure path, in PyTorch's order. "sleep": the first failed raw allocation
        # is the OOM (vLLM's CuMem error code sticks), no release step helps.
        if block is None and self.pool != "sleep":
            if self._release_available_cached_blocks(size, small):
                block = self._alloc_block(alloc_size, small)
            if block is None and self.pool == "default":
                # No use_mem_pool context is open (captures_underway is empty), so
                # release_cached_blocks runs, and alloc_block(isRetry=true) counts the retry.
                self._release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(alloc_size, small)
        if block is None:
            assert self.capacity_bytes is not None  # an unbounded device never fails
            self.num_ooms += 1
            raise OutOfMemory(nbytes, alloc_size, self.reserved_bytes, self.capacity_bytes)
        return self._alloc_found_block(block, size, small)

    def free(self, block: Block) -> None:
        """[DeviceCachingAllocator::free -> free_block] Give ``block`` back to its pool, merged
        with its free neighbours of the same segment. The segment stays reserved."""
        if not block.allocated:
            raise ValueError("free of a block that is not allocated (double free?)")
        block.allocated = False
        self.allocated_bytes -= block.size
        block.segment.allocated -= block.size
        for candidate in (block.prev, block.next):  # [free_block]: prev first, then next
            self._try_merge(block, candidate)
        self._insert_free(block)

    def stats(self) -> AllocatorStats:
        """A frozen snapshot of the counters and segments."""
        return AllocatorStats(
            max_split_size=self.max_split_size,
            reserved_bytes=self.reserved_bytes,
            allocated_bytes=self.allocated_bytes,
            peak_reserved_bytes=self.peak_reserved_bytes,
            peak_allocated_bytes=self.peak_allocated_bytes,
            num_device_alloc=self.num_device_alloc,
            num_device_free=self.num_device_free,
            num_device_alloc_failed=self.num_device_alloc_failed,
            num_alloc_retries=self.num_alloc_retries,
            num_ooms=self.num_ooms,
            segments=tuple(
                SegmentState(s.size, s.small, s.allocated) for s in self._segments.values()
            ),
        )

    # -- the rules --------------------------------------------------------------------------------

    def _get_free_block(self, size: int, small: bool) -> Block | None:
        """[get_free_block] The smallest free block >= ``size``, unless an oversize rule refuses
        it (a larger block would be refused too, so the search stops there)."""
        free = self._free[small]
        i = bisect.bisect_left(free, (size,))
        if i == len(free):
            return None
        block = free[i][3]
        limit = self.max_split_size
        if limit is not None:
            # "Do not return an oversized block for a small request"
            if size < limit and block.size >= limit:
                return None
            # "Allow oversized block size to be rounded up but within a limit"
            if size >= limit and block.size >= size + MAX_NON_SPLIT_ROUNDING_SIZE:
                return None
        del free[i]
        return block

    def _should_split(self, block: Block, size: int, small: bool) -> bool:
        """[should_split] Small pool: a remainder of >= 512 B. Large pool: only a request below
        ``max_split_size``, and a remainder of more than 1 MiB."""
        remaining = block.size - size
        if small:
            return remaining >= K_MIN_BLOCK_SIZE
        below_limit = self.max_split_size is None or size < self.max_split_size
        return below_limit and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: Block, size: int, small: bool) -> Block:
        """[alloc_found_block] Split off the low ``size`` bytes when ``should_split`` says so;
        the remainder stays a free block of the same segment."""
        if self._should_split(block, size, small):
            low = Block(size, block.offset, block.segment)
            low.prev = block.prev
            if low.prev is not None:
                low.prev.next = low
            low.next = block
            block.prev = low
            block.offset += size
            block.size -= size
            self._insert_free(block)
            block = low
        block.allocated = True
        block.segment.allocated += block.size
        # allocated_bytes counts the block's size: an unsplit block counts whole.
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block

    def _alloc_block(self, alloc_size: int, small: bool) -> Block | None:
        """[alloc_block] A raw allocation of a new segment, or ``None`` when the device cannot
        lend ``alloc_size`` more bytes (cudaErrorMemoryAllocation)."""
        capacity = self.capacity_bytes
        if capacity is not None and self.reserved_bytes + alloc_size > capacity:
            self.num_device_alloc_failed += 1
            return None
        self.num_device_alloc += 1  # [alloc_block] stats.num_device_alloc++ after cudaMalloc
        segment = _Segment(self._next_order, alloc_size, small)
        self._next_order += 1
        self._segments[segment.order] = segment
        self.reserved_bytes += alloc_size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return Block(alloc_size, 0, segment)

    def _release_available_cached_blocks(self, size: int, small: bool) -> bool:
        """[release_available_cached_blocks] Only with ``max_split_size`` set, in the request's
        own pool: free the smallest free block >= max(size, max_split_size); if there is none,
        free oversize blocks from the largest down until that many bytes are freed."""
        limit = self.max_split_size
        if limit is None:
            return False
        free = self._free[small]
        key = max(size, limit)
        i = bisect.bisect_left(free, (key,))
        if i < len(free):
            self._release_block(free[i][3])
            return True
        released = 0
        while free and released < key and free[-1][0] >= limit:
            block = free[-1][3]
            released += block.size
            self._release_block(block)
        return released >= key

    def _release_cached_blocks(self) -> None:
        """[release_cached_blocks -> release_blocks] Free every free whole segment of both pools."""
        for small in (False, True):  # large_blocks first, then small_blocks
            for entry in [e for e in self._free[small] if e[3].prev is None and e[3].next is None]:
                self._release_block(entry[3])

    def _release_block(self, block: Block) -> None:
        """[release_block] Give a free whole segment back to the device."""
        # Oversize free blocks are always whole segments: a block >= max_split_size is never
        # split, and a split segment's free parts stay below it.
        assert block.prev is None and block.next is None and not block.allocated
        self.num_device_free += 1  # [release_block] stats.num_device_free++, then cudaFree
        self._remove_free(block)
        del self._segments[block.segment.order]
        self.reserved_bytes -= block.size

    def _try_merge(self, block: Block, candidate: Block | None) -> None:
        """[Block::try_merge] Absorb a free neighbour (same segment by construction)."""
        if candidate is None or candidate.allocated:
            return
        self._remove_free(candidate)
        if candidate is block.prev:  # [candidate block]
            block.offset = candidate.offset
            block.prev = candidate.prev
            if block.prev is not None:
                block.prev.next = block
        else:  # [block candidate]
            block.next = candidate.next
            if block.next is not None:
                block.next.prev = block
        block.size += candidate.size

    def _insert_free(self, block: Block) -> None:
        bisect.insort(self._free[block.segment.small], (*block._key(), block))

    def _remove_free(self, block: Block) -> None:
        free = self._free[block.segment.small]
        i = bisect.bisect_left(free, block._key())
        assert free[i][3] is block
        del free[i]
