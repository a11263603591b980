"""Strategy formulas as their docstrings state them, evaluated on a shape; full-size test shapes.

Legend: E experts; T13, T2 bytes of the whole w13, w2; S13, S2 bytes of one expert of each;
X13 = 8 M13, X2 = 8 H bytes of one int64 row index of w13, w2 (M13 = rows of one w13 expert).
A table maps a strategy name to its ``(gated, not gated)`` formula strings.
"""

from __future__ import annotations

from moe_convert import LayerShape, layer_shape

__all__ = ["FULL_SIZE", "evaluate"]

FULL_SIZE = [
    layer_shape("qwen3-235b-a22b", 4),
    layer_shape("deepseek-v3", 8),
    layer_shape("deepseek-v3", 1),  # T13 = 14 GiB: free on meta
    layer_shape("mixtral-8x7b", 2),
    LayerShape("relu2", 2, 64, 2048, 1024, 8, gated=False),
]


def _sizes(shape: LayerShape) -> dict[str, int]:
    return {"E": shape.experts, "T13": shape.w13_bytes, "T2": shape.w2_bytes,
            "S13": shape.w13_expert_bytes, "S2": shape.w2_expert_bytes,
            "X13": 8 * shape.w13_shape[1], "X2": 8 * shape.hidden, "MiB": 2**20}


def evaluate(table: dict[str, tuple[str, str]], name: str, shape: LayerShape,
             default: str = "0") -> int:
    """``table[name]``'s formula for ``shape`` (gated or not), ``default`` where it has none."""
    gated, not_gated = table.get(name, (default, default))
    return eval(gated if shape.gated else not_gated, {"max": max}, _sizes(shape))
