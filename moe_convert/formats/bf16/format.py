"""BF16's record (``formats.format.Format``): bf16 weights ``w13 [E, M13, H]`` and
``w2 [E, H, I]``, no scales, no biases; the catalog's shapes unpadded, checked against the
kernel's alignment; and its input checks (``check_weights``), which run before any byte is
written."""

from __future__ import annotations

import torch

from ...checks import fail
from ..format import Format
from ..layer import Layer
from ..layout import BLOCK_K, SHUFFLE_BLOCK
from ..shape import LayerShape
from .inputs import layer_weights

__all__ = ["BF16", "KERNEL_INTERMEDIATE_ALIGN", "check_bf16_layer", "check_weights"]

# FlashInfer Bf16MoeLauncher::check_moe: intermediate_size % 128 == 0 per rank.
KERNEL_INTERMEDIATE_ALIGN = 128


def check_weights(w13: torch.Tensor, w2: torch.Tensor, *, gated: bool) -> None:
    """Raise ``TypeError``/``ValueError`` where ``w13 [E, 2I, H]``, ``w2 [E, H, I]`` cannot convert.

    Not gated, w13 is ``[E, I, H]``. Each message names the tensor, its shape and dtype, the rule
    broken and the fix. Nothing is read or written besides metadata.
    """
    check_bf16_layer(w13, w2, gated=gated)
    _check_block_layout(w13, w2)


def check_bf16_layer(w13: torch.Tensor, w2: torch.Tensor, *, gated: bool) -> None:
    """``check_weights`` less the BF16 block layout's row and width rules: a BF16 layer that a
    helper quantizing it itself takes (``formats.flashinfer``; the helper checks its own
    alignment). bf16, 3-D, non-empty, contiguous, one device, matching shapes."""
    for name, tensor in (("w13", w13), ("w2", w2)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != torch.bfloat16:
            fail(
                TypeError,
                name,
                tensor,
                "the BF16 TRTLLM MoE layout needs bfloat16 weights",
                "pass the unquantized bf16 expert weights (e.g. tensor.to(torch.bfloat16))",
            )
        if tensor.dim() != 3:
            fail(
                ValueError,
                name,
                tensor,
                f"expected a 3-D [experts, rows, cols] tensor, got {tensor.dim()}-D",
                "pass all experts of one layer stacked along dim 0",
            )
        if 0 in tensor.shape:  # strategies disagree on empty input (some raise, some return empty)
            fail(
                ValueError,
                name,
                tensor,
                "every dimension must be non-zero: there is nothing to convert",
                "pass at least one expert with all its rows and cols",
            )
        if not tensor.is_contiguous():
            fail(
                ValueError,
                name,
                tensor,
                f"tensor is not contiguous (strides {tensor.stride()})",
                "call .contiguous() first (conversion views each expert's bytes in place)",
            )
    if gated and w13.shape[1] % 2:
        fail(
            ValueError,
            "w13",
            w13,
            f"a gated w13 needs an even number of rows ([w1; w3]), got {w13.shape[1]}",
            "pass w13 with both halves, or gated=False for a non-gated activation",
        )
    if w13.device != w2.device:
        raise ValueError(
            f"w13 is on {w13.device} and w2 on {w2.device}: both must be on one device. "
            f"Fix: move both with .to(device) before converting."
        )
    e13, m13, h13 = w13.shape
    e2, h2, i2 = w2.shape
    if e13 != e2:
        raise ValueError(
            f"expert counts differ: w13 {tuple(w13.shape)} has {e13}, "
            f"w2 {tuple(w2.shape)} has {e2}. "
            f"Fix: pass the w13 and w2 of the same layer and rank."
        )
    if h13 != h2:
        raise ValueError(
            f"hidden sizes differ: w13 {tuple(w13.shape)} has H = {h13} (dim 2), "
            f"w2 {tuple(w2.shape)} has H = {h2} (dim 1). Fix: w13 is [E, 2I, H], w2 is [E, H, I]."
        )
    expected_rows = 2 * i2 if gated else i2
    if m13 != expected_rows:
        raise ValueError(
            f"intermediate sizes differ: w2 {tuple(w2.shape)} has I = {i2}, so w13 needs "
            f"{expected_rows} rows ({'2I, gated' if gated else 'I, not gated'}), "
            f"but w13 {tuple(w13.shape)} has {m13}. "
            f"Fix: pass matching tensors, or gated={not gated} if the activation is "
            f"{'not ' if gated else ''}gated."
        )


def _check_block_layout(w13: torch.Tensor, w2: torch.Tensor) -> None:
    for name, tensor in (("w13", w13), ("w2", w2)):
        rows, cols = tensor.shape[1], tensor.shape[2]
        if rows % SHUFFLE_BLOCK:
            fail(
                ValueError,
                name,
                tensor,
                f"rows per expert ({rows}) must be a multiple of {SHUFFLE_BLOCK} "
                "for the epilogue_tile_m=128 row shuffle",
                "pad the rows (vLLM pads the intermediate size to 128)",
            )
        if (2 * cols) % BLOCK_K:
            fail(
                ValueError,
                name,
                tensor,
                f"bytes per row ({2 * cols}) must be a multiple of {BLOCK_K} "
                f"(block_k), i.e. cols a multiple of {BLOCK_K // 2}",
                "pad the hidden / intermediate size to a multiple of 64 elements",
            )


def _check(layer: Layer, fmt: Format, gated: bool) -> None:
    check_weights(layer.w13, layer.w2, gated=gated)


def _quantized_by_check(layer: Layer, fmt: Format, gated: bool) -> None:
    check_bf16_layer(layer.w13, layer.w2, gated=gated)


def _inputs(shape: LayerShape, device: torch.device | str, seed: int) -> Layer:
    return Layer(*layer_weights(shape, device, seed=seed))


BF16 = Format(
    name="bf16",
    title="BF16",
    check=_check,
    upstream="legacy",
    inputs=_inputs,
    quantized_by_check=_quantized_by_check,
    weight_dtype=torch.bfloat16,
    block_major_k=True,
    kernel_align=KERNEL_INTERMEDIATE_ALIGN,
    kernel_rule="Bf16MoeLauncher::check_moe; vLLM pads it up",
)
