"""What ``scripts/gpu-check`` does: its shapes, strategies, steps and budgets, and the helpers
every step shares (``record``, ``shape``, ``cuda_device``).

The library is imported only inside the steps (each step runs in a process of its own, and the
orchestrator must start without torch), so facts of the library are literals here, checked
against it by ``tests/test_gpu_check.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Full-size shapes of steps 1, 2 and 6: the two per-rank layers of the GPU-check issue
#: (qwen3-235b-a22b/tp4 is vLLM #45589's).
CHECK_SHAPES = ("qwen3-235b-a22b/tp4", "deepseek-v3/tp8")
#: Step 3 and 4: layers of qwen3-235b-a22b/tp4 loaded (1.15 GiB each), vLLM #45589's rank
#: (``wholemodel.PR45589_SHAPE``: a literal, as the library is imported only inside the steps).
LOAD_SHAPE = "qwen3-235b-a22b/tp4"
ALLOCATOR_LAYERS = 24
#: vLLM's max_split_size_mb while loading (moe_convert.wholemodel.VLLM_LOAD_MAX_SPLIT_MB): a
#: literal: this module imports the library (and torch) only inside its steps.
MAX_SPLIT_MB = 20
#: Step 4: the whole rank's load of these strategies (vLLM's legacy, preallocated and in place,
#: and this library's out-of-place and in-place ones worth a whole rank, docs/gpu.md; issue 19's
#: ``cycle_inplace`` before the others of ours, so that a load step cut short by its budget has
#: it), each under vLLM's setting and PyTorch's default, in the default pool (vLLM without
#: sleep mode) and a MemPool.
LOAD_STRATEGIES = ("legacy", "preallocated", "inplace", "cycle_inplace", "triton", "triton_inplace")
LOAD_CONFIGS = (
    (MAX_SPLIT_MB, "default"),
    (None, "default"),
    (MAX_SPLIT_MB, "mempool"),
    (None, "mempool"),
)
CPU_REFERENCE = "strided_copy"
#: Step 1's quantized part: FlashInfer's test_block_scale_interleave shapes, and one catalog
#: shape per format with a few experts (the CPU reference is the transcribed upstream path).
SWIZZLE_CHECK_SHAPES = ((128, 64), (256, 128), (120, 64), (200, 256), (2048, 2048))
QUANT_CHECK_SHAPES = (
    "kimi-k2-nvfp4/tp8",
    "gpt-oss-120b-mxfp4/tp1",
    "llama-4-maverick-fp8/tp8",
    "deepseek-r1-fp8block/tp8",
)
QUANT_CHECK_EXPERTS = 8
#: Step 5's experiments, to choose the Triton strategies' constants: (shape, strategy, settings
#: of ``moe_convert.triton_strategy`` constants), each timed like a strategy, the constants
#: restored after.
TRITON_SWEEPS = [
    (LOAD_SHAPE, "triton_inplace", {"_SCRATCH_BYTES": mib * 2**20}) for mib in (16, 32, 64, 128)
] + [
    (label, "triton", {"_MAX_TILE_ROWS": rows, "_NUM_WARPS": warps})
    for label in (LOAD_SHAPE, "qwen3-30b-a3b/tp2")
    for rows in (64, 128, 256)
    for warps in (4, 8)
]
#: Step 5: timed calls per strategy (each paired with a timed copy), after one untimed round.
TIMING_REPEATS = 10
WALL_BUDGET_S = 360


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    title: str
    budget_s: int
    env: tuple[tuple[str, str], ...] = ()  # set before the step's process starts


#: Budgets: the H200 run of 2026-11-30 took 21, 11, 13, 19 and 83 s for exact, memory,
#: allocator, timing and asv; the whole-rank load (20 loads of 110 GiB, each timed and
#: replayed) gets the most, and the total stays within the wall budget.
STEPS = (
    Step("exact", "byte-exactness on CUDA against the CPU result", 40),
    Step("memory", "CUDA memory against the dispatch-level formulas", 25),
    Step(
        "allocator",
        "allocator model against the caching allocator",
        30,
        (("PYTORCH_ALLOC_CONF", f"max_split_size_mb:{MAX_SPLIT_MB}"),),
    ),
    Step("load", "the whole rank's load run, replayed and predicted", 115),
    Step("timing", "timing with CUDA events against a device copy", 50),
    Step("asv", "asv run --quick on the box's own python", 100),
)

#: Where this step's process writes its findings (``--result``); set by ``__main__``.
RESULT_FILE: Path | None = None


def record(rows: list[dict], row: dict) -> None:
    """Append ``row`` and save the rows so far: a step stopped by its time box still has them."""
    rows.append(row)
    if RESULT_FILE is not None:
        RESULT_FILE.write_text(
            json.dumps({"ok": False, "partial": True, "rows": rows}, default=str)
        )


def shape(label: str):
    from moe_convert.shapes import shape_from_label

    return shape_from_label(label)


def cuda_device():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: this part runs only on a GPU box")
    return torch.device("cuda", torch.cuda.current_device())
