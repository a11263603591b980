"""The suite's BF16 shapes: the ``shape`` axis of ``bench_convert`` and ``bench_allocator``
(``benchmarks.common``), which ``moe_bench.gpucheck`` times as well.

Labels, ``model/tpN`` (``moe_convert.formats.catalog.CATALOG``'s models); asv records each
figure under them, so a label once measured keeps its spelling.
"""

from __future__ import annotations

__all__ = ["SHAPES"]

SHAPES = (
    "qwen3-235b-a22b/tp4",
    "qwen3-30b-a3b/tp1",
    "qwen3-30b-a3b/tp2",
    "deepseek-v3/tp4",
    "deepseek-v3/tp8",
    "deepseek-v2-lite/tp1",
)
