"""Input checks shared by every format: all run before any byte is written. Each format's own
check is on its record (``Format.check``: BF16's in ``formats/bf16/format.py``, the scaled
formats' ``formats/layer.check_layer``)."""

from __future__ import annotations

import torch

__all__ = ["check_disjoint", "fail"]


def fail(kind: type[Exception], name: str, tensor: torch.Tensor, rule: str, fix: str) -> None:
    raise kind(
        f"{name} (shape {tuple(tensor.shape)}, dtype {tensor.dtype}, device {tensor.device}): "
        f"{rule}. Fix: {fix}."
    )


def check_disjoint(w13: torch.Tensor, w2: torch.Tensor) -> None:
    """Raise ``ValueError`` if the bytes of ``w13`` and ``w2`` overlap (the same tensor, or views
    of one storage that share bytes); an in-place strategy would overwrite one with the other.

    For tensors that passed their format's check (contiguous: each spans one byte range). Views of
    one buffer that do not share bytes pass. Nothing is read or written besides metadata.
    """
    start13, start2 = w13.data_ptr(), w2.data_ptr()
    overlap = max(start13, start2) < min(start13 + w13.nbytes, start2 + w2.nbytes)
    if w13.device.type == "meta":  # every meta storage starts at address 0: compare storages too
        overlap = overlap and w13.untyped_storage()._cdata == w2.untyped_storage()._cdata
    if overlap:
        raise ValueError(
            f"w13 (shape {tuple(w13.shape)}, bytes {start13:#x}..{start13 + w13.nbytes:#x}) and "
            f"w2 (shape {tuple(w2.shape)}, bytes {start2:#x}..{start2 + w2.nbytes:#x}) share "
            "memory: an in-place conversion would overwrite one with the other. Fix: pass "
            "tensors with their own storage (e.g. w2.clone()), or use an out-of-place strategy."
        )
