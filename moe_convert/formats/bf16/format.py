"""BF16's record (``formats.format.Format``): bf16 weights ``w13 [E, M13, H]`` and
``w2 [E, H, I]``, no scales, no biases; the catalog's shapes unpadded, checked against the
kernel's alignment."""

from __future__ import annotations

import torch

from ...checks import check_weights
from ..format import Format

__all__ = ["BF16", "KERNEL_INTERMEDIATE_ALIGN"]

# FlashInfer Bf16MoeLauncher::check_moe: intermediate_size % 128 == 0 per rank.
KERNEL_INTERMEDIATE_ALIGN = 128


def _check(layer: dict[str, torch.Tensor], fmt: Format, gated: bool) -> None:
    check_weights(layer["w13"], layer["w2"], gated=gated)


BF16 = Format(
    name="bf16",
    title="BF16",
    check=_check,
    weight_dtype=torch.bfloat16,
    kernel_align=KERNEL_INTERMEDIATE_ALIGN,
    kernel_rule="Bf16MoeLauncher::check_moe; vLLM pads it up",
)
