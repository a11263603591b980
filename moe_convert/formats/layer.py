"""One MoE layer of any format: ``Layer``, the one type every strategy takes and returns, and the
scaled formats' input check.

Legend as in ``formats.format``: E experts, H hidden, I intermediate per rank, M13 rows of w13,
V elements per scale factor; epb elements per stored byte (``H/epb`` packed bytes per w13 row).

``check_layer`` (the check of every format but BF16, whose ``bf16.format.check_weights`` has its own
words) runs before any byte is written: each failure is one line naming the tensor, its shape
and dtype, what was expected and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields

import torch

from ..checks import fail
from .format import Format
from .layout import SHUFFLE_BLOCK
from .swizzle import COLS_PER_TILE, ROWS_PER_TILE

__all__ = ["TENSOR_NAMES", "Layer", "check_layer"]


@dataclass(frozen=True, eq=False)
class Layer(Mapping[str, torch.Tensor]):
    """One layer's tensors as a conversion takes and returns them, in checkpoint row order: the
    one layer type of every format, read by attribute (``layer.w13``) or as a mapping of the
    tensors it holds (``layer["w13"]``, ``dict(layer)``; ``None`` fields left out, in the order
    a checkpoint loader allocates them). ``Layer(**tensors)`` makes one from named tensors.

    BF16: ``w13`` bf16 ``[E, M13, H]`` and ``w2`` bf16 ``[E, H, I]`` in; out (every strategy)
    ``[E, 2H/128, M13, 64]`` and ``[E, M13/128, H, 64]``, the TRTLLM block layout. The others
    in: ``w13 [E, M13, H/epb]``, ``w2 [E, H, I/epb]`` (the format's ``weight_dtype``); block
    scales ``[E, M13/R, H/V]``, ``[E, H/R, I/V]`` (``scale_dtype``) or ``None`` (FP8 per-tensor);
    biases bf16 ``[E, M13]``, ``[E, H]`` or ``None`` (all but MXFP4). Out (every strategy): the
    same shapes; weights as uint8 (FP4) or float8_e4m3fn (FP8), scales in the swizzled layout
    as float8_e4m3fn (MXFP8's as uint8, as vLLM returns them), biases float32. Block-FP8
    instead: weights float8_e4m3fn in BlockMajorK, ``[E, H/128, M13, 128]`` and
    ``[E, I/128, H, 128]``; scales float32 in the input's shapes, rows reordered as the
    weights' halves, clamped to at least 1e-10. MXINT4 (``formats.mxint4``): int32 weights in,
    uint8 BlockMajorK out, bf16 scales swizzled and flat per expert ``[E, M13 H/32]``. Gated,
    w13's halves are ``[w1; w3]`` (NVFP4, FP8s, MXFP8, MXINT4) or its rows interleaved
    ``[w1_0, w3_0, w1_1, ...]`` (gpt-oss's MXFP4 checkpoint).
    """

    w13: torch.Tensor
    w2: torch.Tensor
    w13_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None
    w13_bias: torch.Tensor | None = None
    w2_bias: torch.Tensor | None = None

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = getattr(self, name) if name in TENSOR_NAMES else None
        if tensor is None:
            raise KeyError(name)
        return tensor

    def __iter__(self) -> Iterator[str]:
        return (name for name in TENSOR_NAMES if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def expected_shapes(self, fmt: Format, gated: bool) -> dict[str, tuple[int, ...] | None]:
        """The shape each field must have, from the weights' shapes (``None``: must be absent)."""
        experts, rows13, packed13 = self.w13.shape
        hidden = packed13 * fmt.elements_per_item
        inter = rows13 // 2 if gated else rows13
        return {
            "w2": (experts, hidden, inter // fmt.elements_per_item),
            "w13_scale": fmt.scale_shape(experts, rows13, hidden),
            "w2_scale": fmt.scale_shape(experts, hidden, inter),
            "w13_bias": (experts, rows13) if fmt.has_bias else None,
            "w2_bias": (experts, hidden) if fmt.has_bias else None,
        }


#: Every tensor a layer of some format holds, in the order a checkpoint loader allocates them.
TENSOR_NAMES = tuple(f.name for f in fields(Layer))


def _dtype_of(fmt: Format, name: str) -> torch.dtype | None:
    if name in ("w13", "w2"):
        return fmt.weight_dtype
    return fmt.scale_dtype if name.endswith("scale") else torch.bfloat16


def check_layer(layer: Layer, fmt: Format, gated: bool) -> None:
    """``TypeError``/``ValueError`` where ``layer`` cannot be converted as ``fmt``; reads no byte.

    Checked: every tensor present or absent as the format says, its dtype, 3-D (biases 2-D),
    non-empty, contiguous, on one device; w13's rows even when gated; the packed widths hold
    whole scale blocks; rows a multiple of 32 (the row shuffle) and of 128 where there are
    scales (their row shuffle, or whole 128x128 blocks); every shape matching the weights';
    swizzled scale columns a multiple of 4.
    """
    if not isinstance(layer, Layer):
        raise TypeError(f"layer must be a Layer, got {type(layer).__name__}")
    if fmt.gated_only and not gated:
        raise ValueError(
            f"{fmt.name}: the TRTLLM-gen path exists only for a gated (SwiGLU) layer; "
            "pass gated=True"
        )
    for name in ("w13", "w2", "w13_scale", "w2_scale", "w13_bias", "w2_bias"):
        tensor = getattr(layer, name)
        dtype = _dtype_of(fmt, name)
        wanted = dtype is not None and (fmt.has_bias or not name.endswith("bias"))
        if tensor is None:
            if wanted:
                raise ValueError(f"{name} is missing: {fmt.name} needs it ({dtype})")
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if not wanted:
            fail(ValueError, name, tensor, f"{fmt.name} has no {name}", "pass None")
        if tensor.dtype != dtype:
            fail(
                TypeError,
                name,
                tensor,
                f"{fmt.name} needs {dtype}",
                f"pass the {fmt.name} checkpoint's {name} as stored (not dequantized)",
            )
        dims = 2 if name.endswith("bias") else 3
        if tensor.dim() != dims:
            fail(ValueError, name, tensor, f"expected {dims}-D", "stack every expert along dim 0")
        if 0 in tensor.shape:
            fail(ValueError, name, tensor, "a dimension is 0", "pass at least one expert and row")
        if not tensor.is_contiguous():
            fail(ValueError, name, tensor, "not contiguous", "call .contiguous() first")
        if tensor.device != layer.w13.device:
            fail(
                ValueError, name, tensor, f"w13 is on {layer.w13.device}", "move all to one device"
            )
    rows13 = layer.w13.shape[1]
    if gated and rows13 % 2:
        fail(
            ValueError, "w13", layer.w13, "a gated w13 needs an even row count", "pass gated=False"
        )
    if fmt.scale_block:
        for name in ("w13", "w2"):
            tensor = getattr(layer, name)
            elements = tensor.shape[2] * fmt.elements_per_item
            if elements % fmt.scale_block:
                fail(
                    ValueError,
                    name,
                    tensor,
                    f"{tensor.shape[2]} packed bytes per row hold {elements} elements, not a "
                    f"multiple of {fmt.scale_block} (one scale each)",
                    "pad the row to whole scale blocks",
                )
    if fmt.weight_row_align > 1:
        for name in ("w13", "w2"):
            tensor = getattr(layer, name)
            row_bytes = tensor.shape[2] * tensor.element_size()
            if row_bytes % fmt.weight_row_align:
                elements = tensor.shape[2] * fmt.elements_per_item
                size = "H" if name == "w13" else "I per rank"
                multiple = fmt.weight_row_align * fmt.elements_per_item // tensor.element_size()
                fail(
                    ValueError,
                    name,
                    tensor,
                    f"{size} = {elements} is {row_bytes} bytes per row, not whole "
                    f"{fmt.weight_row_align}-byte blocks (BlockMajorK)"
                    + (f": {fmt.weight_row_rule}" if fmt.weight_row_rule else ""),
                    f"H and I per rank must be multiples of {multiple}"
                    + ("" if fmt.weight_row_rule else ": pad them"),
                )
    for name in ("w13", "w2"):
        rows = getattr(layer, name).shape[1]
        # Before the shapes: a row count off the 128-row blocks would otherwise read as a scale
        # tensor of another layer.
        if fmt.scale_block_rows > 1:
            need, why = fmt.scale_block_rows, f"whole {fmt.scale_block_rows}-row scale blocks"
        elif fmt.scale_block:
            need, why = ROWS_PER_TILE, "the row shuffle of the scales"
        else:
            need, why = SHUFFLE_BLOCK, "the row shuffle"
        if rows % need:
            fail(
                ValueError,
                name,
                getattr(layer, name),
                f"rows per expert ({rows}) must be a multiple of {need} ({why})",
                f"pad as vLLM does: hidden to a multiple of {fmt.hidden_align}, intermediate "
                f"to one of {fmt.intermediate_alignment(gated)}",
            )
    for name, shape in layer.expected_shapes(fmt, gated).items():
        tensor = getattr(layer, name)
        if shape is not None and tuple(tensor.shape) != shape:
            fail(
                ValueError,
                name,
                tensor,
                f"expected shape {shape} to match w13 {tuple(layer.w13.shape)} as {fmt.name}",
                "pass the tensors of one layer (w13 [E, M13, H/epb], w2 [E, H, I/epb])",
            )
    for name in ("w13_scale", "w2_scale"):
        scale = getattr(layer, name)
        # Only 1-D block scales are swizzled; block-FP8's are reordered by whole rows.
        if scale is not None and fmt.scale_block_rows == 1 and scale.shape[2] % COLS_PER_TILE:
            fail(
                ValueError,
                name,
                scale,
                f"scale columns ({scale.shape[2]}) must be a multiple of {COLS_PER_TILE}: the "
                "128x4 swizzle would pad them, and the result keeps the unpadded shape",
                "pad the hidden / intermediate size to a multiple of 4 scale blocks",
            )
