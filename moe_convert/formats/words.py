"""Bytes moved as words: the widest integer dtype that a move's runs and offsets allow.

CUDA's element-wise and index kernels (``copy_``, ``index_select``, ``bitwise_xor``) move one
element per thread, so the same bytes viewed as int64 take an eighth of the elements: every
quantized ``-fast`` moved its bytes as uint8 at 574-677 GB/s on an H200 (5.95-6.91x a copy),
and as words at 1.16-1.78x a copy (docs/gpu.md). Used by every row move of ours: the gathers
and passes of the scaled formats, BF16's ``strided_copy`` (``as_words``), and the strided
copies' plans (``strided._widest``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["as_words", "widest"]

_WORDS = (torch.int64, torch.int32, torch.int16)


def widest(byte_counts: Iterable[int]) -> torch.dtype:
    """The widest of int64, int32 and int16 whose size divides every one of ``byte_counts``
    (a view's contiguous run, its other strides and its offset, in bytes); uint8 if none."""
    counts = list(byte_counts)
    for word in _WORDS:
        if all(count % word.itemsize == 0 for count in counts):
            return word
    return torch.uint8


def as_words(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` (one element size) viewed in the widest integer word all of them allow:
    views of the same bytes, no copy; as they are where no word is wider than their element.

    Each needs its last dim contiguous; the word divides, in bytes, every tensor's last dim,
    other strides and storage offset (``Tensor.view(dtype)``'s rule). Moves between the views
    (``index_select`` along any dim but the last, ``copy_``, ``bitwise_xor``) give the bytes of
    the same moves on the tensors' own dtype.
    """
    if not all(t.dim() > 0 and t.stride(-1) == 1 for t in tensors):
        return tensors
    word = widest(
        count * t.element_size()
        for t in tensors
        for count in (t.shape[-1], t.storage_offset(), *t.stride()[:-1])
    )
    if word.itemsize <= min(t.element_size() for t in tensors):
        return tensors
    return tuple(t.view(word) for t in tensors)
