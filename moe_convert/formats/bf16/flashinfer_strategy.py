"""FlashInfer's own preparation helper, registered as the ``flashinfer`` strategy where installed.

Registered when ``flashinfer`` can be found; imported on first call, so that importing
``moe_convert`` (once per asv benchmark process) does not pay FlashInfer's import time.
"""

from __future__ import annotations

import torch

from ...formulas import Formula
from ..layout import swap_w13_to_w31
from ..registry import register
from .reference import AVAILABLE

# FlashInfer keys its permute-index cache by shape but not device: one cache per device, kept
# apart from its module-level one, so that meta indices never reach a CPU or CUDA call.
_PERMUTE_CACHES: dict[torch.device, dict] = {}


@register(
    "flashinfer",
    format="bf16",
    inplace=False,
    origin="FlashInfer's `prepare_trtllm_bf16_weights`",
    needs="flashinfer-python",
    available=AVAILABLE,
    peak=Formula("3 T13 + 2 T2", "2 T13 + 2 T2"),
    traffic=Formula("8 T13 + 6 T2 + E (X13 + X2)", "6 T13 + 6 T2 + E (X13 + X2)"),
    launches=Formula("4 E + 3", "4 E + 2"),
)
def flashinfer_prepare(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``flashinfer.fused_moe.prepare.prepare_trtllm_bf16_weights``, upstream's own helper.

    It takes gemm1 in ``[up, gate]`` = ``[w3; w1]`` order, so a gated w13 is swapped first (a
    full copy, as vLLM's legacy path did). Per expert it indexes rows, makes the block layout
    contiguous and appends to a list, then stacks.

    Out of place: new outputs; the input is unchanged. Peak transient: the swap copy (gated
    only), both lists and both stacked outputs, as ``legacy``. Traffic and launches: the swap
    (gated), per expert a gather and a block-layout copy per weight, two stacks.
    """
    from flashinfer.fused_moe.api import ReLU2, SwiGLU
    from flashinfer.fused_moe.prepare import prepare_trtllm_bf16_weights

    experts, _, hidden = w13.shape
    gemm1 = swap_w13_to_w31(w13) if gated else w13
    prepared = prepare_trtllm_bf16_weights(
        gemm1,
        w2,
        num_local_experts=experts,
        hidden_size=hidden,
        intermediate_size=w2.shape[2],
        activation=SwiGLU() if gated else ReLU2(),
        permute_cache=_PERMUTE_CACHES.setdefault(w13.device, {}),
    )
    return prepared["gemm1_weights"], prepared["gemm2_weights"]
