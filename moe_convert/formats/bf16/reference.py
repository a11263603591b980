"""The oracle: FlashInfer's own layout helpers, called the way vLLM's legacy pipeline called them.

Every strategy must give exactly these bytes. Needs ``flashinfer-python`` (its helpers are pure
torch and import on a CPU-only machine); ``AVAILABLE`` says whether it is installed.
"""

from __future__ import annotations

import importlib.util

import torch

from ..layout import swap_w13_to_w31

__all__ = ["AVAILABLE", "flashinfer_reference"]

#: Whether ``flashinfer-python`` is installed (and so the ``flashinfer`` strategy registered).
AVAILABLE = importlib.util.find_spec("flashinfer") is not None

_EPILOGUE_TILE_M = 128
_BLOCK_K = 128


def flashinfer_reference(
    w13: torch.Tensor, w2: torch.Tensor, *, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-layout bf16 ``(w13_out, w2_out)`` from FlashInfer's helpers, per expert, stacked.

    ``flashinfer.fused_moe.core._maybe_get_cached_w3_w1_permute_indices`` (gated interleave +
    shuffle, on the swapped ``[w3; w1]`` rows), ``get_w2_permute_indices_with_cache`` and
    ``convert_to_block_layout``. New tensors; the inputs are unchanged.
    """
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        convert_to_block_layout,
        get_w2_permute_indices_with_cache,
    )

    cache: dict = {}
    gemm1 = swap_w13_to_w31(w13) if gated else w13
    out13, out2 = [], []
    for e in range(w13.shape[0]):
        rows = gemm1[e].view(torch.uint8)
        index = _maybe_get_cached_w3_w1_permute_indices(
            cache, rows, _EPILOGUE_TILE_M, is_gated_act_gemm=gated
        )
        out13.append(convert_to_block_layout(rows[index].contiguous(), _BLOCK_K))
        rows = w2[e].view(torch.uint8)
        index = get_w2_permute_indices_with_cache(cache, rows, _EPILOGUE_TILE_M)
        out2.append(convert_to_block_layout(rows[index].contiguous(), _BLOCK_K))
    return torch.stack(out13).view(torch.bfloat16), torch.stack(out2).view(torch.bfloat16)
