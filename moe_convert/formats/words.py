"""Bytes moved as words: the widest dtype that a move's runs and offsets allow.

CUDA's element-wise and index kernels (``copy_``, ``index_select``, ``bitwise_xor``) move one
element per thread, so the same bytes viewed as wide words take a fraction of the elements: every
quantized ``-fast`` moved its bytes as uint8 at 574-677 GB/s on an H200 (5.95-6.91x a copy),
and as words at 1.08-1.43x a copy (docs/gpu.md, runs 3 to 5). Used by the weights' row moves of
ours (the scaled formats' gathers and passes, BF16's ``strided_copy``) and MXINT4's scale pass
(``as_words``), and by the strided copies' plans (``strided._widest``). ``-fast``'s scale
gather takes int32 words by an index of its own (``rows.scale_word_index``); the per-expert
scale gathers of ``-preallocated`` and ``-inplace``, launch-bound, stay in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["WIDEST_WORD_BYTES", "as_words", "widest"]

# torch has no 16-byte integer: complex128 is the 16-byte word. A move of one dtype (an
# index_select, a copy_ into the same dtype) loads and stores its elements as they are, NaN
# payloads included (no arithmetic), so its bytes are the input's; on an H200 16-byte words
# gathered rows at 1.12-1.25x a copy where int64 took 1.23-1.36x (docs/gpu.md). Bitwise ops
# need integer words (``integer=True``).
_WORDS = (torch.complex128, torch.int64, torch.int32, torch.int16)
#: The alignment a choice of word depends on: offsets matter only modulo it.
WIDEST_WORD_BYTES = _WORDS[0].itemsize


def widest(byte_counts: Iterable[int], *, integer: bool = False) -> torch.dtype:
    """The widest word (complex128's 16 bytes, then int64, int32, int16; only the integers
    where ``integer``) whose size divides every one of ``byte_counts`` (a view's contiguous
    run, its other strides and its offset, in bytes); uint8 if none."""
    counts = list(byte_counts)
    for word in _WORDS[1:] if integer else _WORDS:
        if all(count % word.itemsize == 0 for count in counts):
            return word
    return torch.uint8


def as_words(*tensors: torch.Tensor, integer: bool = False) -> tuple[torch.Tensor, ...]:
    """``tensors`` (one element size) viewed in the widest word all of them allow (``widest``):
    views of the same bytes, no copy; as they are where no word is wider than their element.

    Each needs its last dim contiguous; the word divides, in bytes, every tensor's last dim,
    other strides and storage offset (``Tensor.view(dtype)``'s rule). Moves between the views
    (``index_select`` along any dim but the last, ``copy_``; ``bitwise_xor`` with ``integer``)
    give the bytes of the same moves on the tensors' own dtype.
    """
    if not all(t.dim() > 0 and t.stride(-1) == 1 for t in tensors):
        return tensors
    word = widest(
        (
            count * t.element_size()
            for t in tensors
            for count in (t.shape[-1], t.storage_offset(), *t.stride()[:-1])
        ),
        integer=integer,
    )
    if word.itemsize <= min(t.element_size() for t in tensors):
        return tensors
    return tuple(t.view(word) for t in tensors)
