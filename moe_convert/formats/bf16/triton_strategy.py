"""One Triton kernel per weight: the row permutation and the block layout in its index math.

Registers ``triton`` (out of place) and ``triton_inplace`` where Triton is installed and can
run: on a CUDA GPU, or anywhere under Triton's interpreter (``TRITON_INTERPRET=1``, CPU tensors,
used by the tests). Elsewhere ``UNAVAILABLE_REASON`` says why they are missing. The word size,
the launch helper and ``AVAILABLE`` serve ``cycle_strategy``'s kernel too.

The kernel is wrapped in a custom op, ``torch.ops.moe_convert.triton_block_layout(src,
interleave, out=dst)``, with a fake implementation, so the dispatch-level counters (``memory``,
``traffic``) see it as one launch that reads ``src`` and only writes ``out`` (keyword-only, as an
``out=`` argument), on ``meta`` at full size too.

Each program moves one tile of ``ROWS`` output rows x one 128-byte K block as 32 int32 words per
row (contiguous on both sides, 16-byte aligned: Triton emits 16-byte vector loads and stores).
Output row ``n`` of an expert takes checkpoint row ``P(n)``, computed, not looked up:

- shuffle only (w2, a non-gated w13): ``P(n) = 32 (n // 32) + 4 (n % 8) + (n % 32) // 8``;
- gated w13 (interleave, shuffle and the w3/w1 swap): with ``q = (n % 32) // 8``,
  ``P(n) = (1 - q % 2) M/2 + 16 (n // 32) + 2 (n % 8) + q // 2`` (``layout.block_layout_copies``).
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import operator
import os
from collections.abc import Callable

import torch

from ...formulas import Formula
from ...units import K_MIN_LARGE_ALLOC
from ..layout import BLOCK_K, block_layout_shape, block_layout_view
from ..registry import register

__all__ = ["AVAILABLE", "UNAVAILABLE_REASON"]


def _unavailable_reason() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    if not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"):
        return "no CUDA device, and Triton's interpreter is off (set TRITON_INTERPRET=1)"
    return None


#: why the Triton strategies (``triton``, ``triton_inplace``, ``cycle_inplace``) are not
#: registered here, or ``None`` when they are.
UNAVAILABLE_REASON = _unavailable_reason()
AVAILABLE = UNAVAILABLE_REASON is None

# The kernels move words of the widest of these that all their tensors' addresses are aligned
# to: int32 normally (a 128-byte K block is 32 of them), narrower for a weight that starts off a
# 4-byte boundary (a view into a larger buffer).
_WORD_DTYPES = (torch.int32, torch.int16, torch.uint8)


def word_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The widest of int32, int16, uint8 that every tensor's address is a multiple of."""
    address = functools.reduce(operator.or_, (tensor.data_ptr() for tensor in tensors))
    return next(dtype for dtype in _WORD_DTYPES if address % dtype.itemsize == 0)


@functools.cache
def _kernel():
    """The Triton kernel, compiled on first use (importing Triton costs about a second)."""
    import triton
    import triton.language as tl

    @triton.jit
    def block_layout_kernel(
        src,
        dst,
        rows,
        row_words,
        nblocks,
        INTERLEAVE: tl.constexpr,
        ROWS: tl.constexpr,
        WORDS: tl.constexpr,
    ):
        # src words [E, rows, row_words]; dst words [E, nblocks, rows, WORDS]
        pid = tl.program_id(0).to(tl.int64)
        row_tiles = rows // ROWS
        expert_block = pid // row_tiles  # expert * nblocks + k block
        kblock = expert_block % nblocks
        expert = expert_block // nblocks
        n = (pid % row_tiles) * ROWS + tl.arange(0, ROWS)
        if INTERLEAVE:
            q = (n % 32) // 8
            source = (1 - q % 2) * (rows // 2) + 16 * (n // 32) + 2 * (n % 8) + q // 2
        else:
            source = 32 * (n // 32) + 4 * (n % 8) + (n % 32) // 8
        word = tl.arange(0, WORDS)
        src_offsets = (expert * rows + source)[:, None] * row_words + kblock * WORDS + word[None, :]
        dst_offsets = (expert_block * rows + n)[:, None] * WORDS + word[None, :]
        tl.store(dst + dst_offsets, tl.load(src + src_offsets))

    return block_layout_kernel


#: Triton's interpreter runs the kernels (``TRITON_INTERPRET=1``): on CPU tensors, one program
#: after another.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: Most rows per program: 128 rows x 128 bytes = 16 KiB per program on a GPU; the interpreter
#: runs programs one after another, each as NumPy array operations, so there fewer, larger tiles
#: are much faster (same kernel, same index math).
_MAX_TILE_ROWS = 1024 if INTERPRETED else 128
_NUM_WARPS = 4


def run_launch(launch: Callable[[], object]) -> None:
    """Call ``launch`` (a Triton kernel bound to its grid and arguments); under the interpreter,
    free what it leaves in reference cycles right away."""
    if not INTERPRETED:
        launch()
        return
    # Triton 3.9's interpreter keeps its argument tensors in self-referencing closures
    # (GridExecutor._init_args_hst): a reference cycle that would keep a released output alive
    # until some later garbage collection, and memory counters would miss its free. With
    # automatic collection off during the launch the cycle is still in generation 0 afterwards,
    # and collecting that generation alone frees it (cheap, unlike a full collection).
    gc.disable()
    try:
        launch()
    finally:
        gc.enable()
        gc.collect(0)


def _tile_rows(rows: int) -> int:
    """Rows per program: the largest power of two up to ``_MAX_TILE_ROWS`` dividing ``rows``
    (``rows`` is a multiple of 32)."""
    tile = _MAX_TILE_ROWS
    while rows % tile:
        tile //= 2
    return tile


# Declared with a schema, not ``custom_op``: ``out`` is keyword-only, like an ``out=`` argument,
# which tells the traffic counter that the op only writes it (custom_op refuses such arguments).
# The namespace is the package's own name, so that two copies of the library loaded side by side
# (``benchmarks/paired.py``: ``moe_convert_base``, ``moe_convert_head``) each define their op.
_OP = f"{__name__.partition('.')[0]}::triton_block_layout"
torch.library.define(_OP, "(Tensor src, bool interleave, *, Tensor(a!) out) -> ()")


@torch.library.impl(_OP, ("cpu", "cuda"))
def _triton_block_layout(src: torch.Tensor, interleave: bool, *, out: torch.Tensor) -> None:
    """Write ``src`` bf16 ``[E, M, cols]`` into ``out`` uint8 ``[E, 2 cols/128, M, 128]``.

    One kernel launch; rows permuted by ``P`` (module docstring), every byte read once and
    written once. ``src`` and ``out`` must not overlap. Contiguous tensors on one device.
    """
    experts, rows, cols = src.shape
    row_bytes = cols * src.element_size()
    nblocks = row_bytes // BLOCK_K
    word = word_dtype(src, out)
    grid = (experts * nblocks * (rows // _tile_rows(rows)),)
    launch = functools.partial(
        _kernel()[grid],
        src.view(word),
        out.view(word),
        rows,
        row_bytes // word.itemsize,
        nblocks,
        INTERLEAVE=interleave,
        ROWS=_tile_rows(rows),
        WORDS=BLOCK_K // word.itemsize,
        num_warps=_NUM_WARPS,
    )
    run_launch(launch)


@torch.library.register_fake(_OP)
def _triton_block_layout_fake(src: torch.Tensor, interleave: bool, *, out: torch.Tensor) -> None:
    return None


triton_block_layout = getattr(torch.ops, _OP.partition("::")[0]).triton_block_layout


#: What the Triton strategies need (their records' ``needs``).
NEEDS = "Triton, on a CUDA GPU (or `TRITON_INTERPRET=1`)"


@register(
    "triton",
    format="bf16",
    inplace=False,
    origin="ours",
    needs=NEEDS,
    available=AVAILABLE,
    peak=Formula("T13 + T2"),
    traffic=Formula("2 (T13 + T2)"),
    launches=Formula("2"),
)
def triton_copy(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours, out of place: one Triton launch per weight from the checkpoint bytes into new outputs.

    The shuffle, the gated interleave and the w3/w1 swap are the kernel's index arithmetic (no
    index tensor); 16-byte vector loads and stores; every byte read once and written once.

    Out of place: new outputs; the input is unchanged. Peak transient: the outputs, nothing
    else. Traffic: the out-of-place floor, in one launch per weight.
    """
    out13 = torch.empty(block_layout_shape(w13), dtype=torch.uint8, device=w13.device)
    out2 = torch.empty(block_layout_shape(w2), dtype=torch.uint8, device=w2.device)
    triton_block_layout(w13, gated, out=out13)
    triton_block_layout(w2, False, out=out2)
    return out13.view(torch.bfloat16), out2.view(torch.bfloat16)


#: In-place scratch: a few experts at once, small enough to stay in a GPU's L2 cache (50 MiB on
#: H100/H200, 126 MiB on B200) between the copy into it and the kernel reading it back, and at
#: least 10 MiB so that the caching allocator gives it a segment of its own (see strategies).
_SCRATCH_BYTES = max(16 * 2**20, K_MIN_LARGE_ALLOC)


@register(
    "triton_inplace",
    format="bf16",
    inplace=True,
    origin="ours",
    needs=NEEDS,
    available=AVAILABLE,
    peak=Formula("max(S13, S2, 16 MiB)"),
    traffic=Formula("4 (T13 + T2)"),
    # a copy and a kernel per group of max(1, 16 MiB // S) experts, per weight
    launches=Formula("2 (cdiv(E, max(1, 16 MiB // S13)) + cdiv(E, max(1, 16 MiB // S2)))"),
)
def triton_inplace(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours, in place: groups of experts copied into one scratch, then relaid back by Triton.

    Per group of ``g = max(1, 16 MiB // S)`` experts of a weight (S one expert's bytes): one
    ``copy_`` of the group into the scratch, then one kernel launch from the scratch into the
    group's own storage (the scratch is still in L2 on a GPU). ``2 ceil(E / g)`` launches per
    weight, e.g. 2 x 64 + 2 x 26 = 180 for qwen3-235b-a22b/tp4 (w13 6 MiB, w2 3 MiB per expert).

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: the scratch, no index tensors. Traffic: every byte copied into the scratch, then
    read back and written.
    """
    scratch = torch.empty(
        max(w13[0].nbytes, w2[0].nbytes, _SCRATCH_BYTES), dtype=torch.uint8, device=w13.device
    )
    for weight, interleave in ((w13, gated), (w2, False)):
        group = max(1, _SCRATCH_BYTES // weight[0].nbytes)
        # every view made up front: on a GPU the loop is bound by the host's time per launch
        staged = (
            scratch[: group * weight[0].nbytes].view(weight.dtype).view(group, *weight.shape[1:])
        )
        blocks = weight.view(torch.uint8).view(block_layout_shape(weight))
        for experts, out in zip(weight.split(group), blocks.split(group), strict=True):
            stage = staged[: len(experts)]
            stage.copy_(experts)
            triton_block_layout(stage, interleave, out=out)
    return block_layout_view(w13), block_layout_view(w2)
