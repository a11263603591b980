"""What ``scripts/gpu-check`` does: its shapes, strategies, steps and budgets, and the helpers
every step shares (``record``, ``shape``, ``cuda_device``).

The library is imported only inside the steps (each step runs in a process of its own, and the
orchestrator must start without torch), so facts of the library are literals here, checked
against it by ``tests/test_gpu_check.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Full-size shapes of steps 1, 2 and 6: the two per-rank layers of the GPU-check issue
#: (qwen3-235b-a22b/tp4 is vLLM #45589's).
CHECK_SHAPES = ("qwen3-235b-a22b/tp4", "deepseek-v3/tp8")
#: Step 3 and 4: layers of qwen3-235b-a22b/tp4 loaded (1.15 GiB each), vLLM #45589's rank
#: (``wholemodel.PR45589_SHAPE``: a literal, as the library is imported only inside the steps).
LOAD_SHAPE = "qwen3-235b-a22b/tp4"
ALLOCATOR_LAYERS = 24
#: vLLM's max_split_size_mb while loading (moe_convert.load.wholemodel.VLLM_LOAD_MAX_SPLIT_MB): a
#: literal: this module imports the library (and torch) only inside its steps.
MAX_SPLIT_MB = 20
#: Step 4: the whole rank's load of these strategies (vLLM's legacy, preallocated and in place,
#: and this library's out-of-place and in-place ones worth a whole rank, docs/gpu.md; issue 19's
#: ``cycle_inplace`` before the others of ours, so that a load step cut short by its budget has
#: it), in the default pool (vLLM without sleep mode) under vLLM's setting and PyTorch's
#: default, and in a MemPool under vLLM's setting (what sleep mode loads under). The fourth
#: configuration, a MemPool unlimited, is left out to make room in the step's budget for the
#: quantized loads below: no engine loads that way (sleep mode always sets 20), and its 6
#: loads of 110 GiB with their replays (about 1 s each on this project's CPU) cost about what
#: the two quantized loads do.
LOAD_STRATEGIES = ("legacy", "preallocated", "inplace", "cycle_inplace", "triton", "triton_inplace")
LOAD_CONFIGS = (
    (MAX_SPLIT_MB, "default"),
    (None, "default"),
    (MAX_SPLIT_MB, "mempool"),
)
#: Step 4's quantized loads (issue 18), before the BF16 ones: the catalog shape whose upstream
#: path the replay finds in trouble on an H200 under vLLM's setting (the default pool at
#: ``MAX_SPLIT_MB``: DeepSeek-R1 NVFP4 TP4's ``nvfp4-legacy`` fits 139.5 GiB only through 1,797
#: refused cudaMalloc calls, docs/formats.md), run on CUDA for the memory the device had free
#: and compared with the replay event by event, with ``-fast`` as the control. The legacy path
#: is the point (its driver-call storm is what the replay predicts), so fewer BF16
#: configurations run rather than dropping it. Sizing on an H200: legacy 58 layers x 1,588
#: launches at about 20 us each (the H200 run's host-bound ``inplace``: 512 launches in
#: 7.1 ms) is 1.8 s, plus 1,797 refused-and-released rounds at about 1.7 ms each
#: (docs/allocator.md's hypothesis) 3.1 s; ``-fast`` 58 layers of 3.2 GB moved, 0.05 s; the
#: two replays 4.1 s on this project's 2-core CPU; about 10 s with the weights' allocation.
QUANT_LOAD_SHAPE = "deepseek-r1-nvfp4/tp4"
QUANT_LOAD_STRATEGIES = ("nvfp4-legacy", "nvfp4-fast")
CPU_REFERENCE = "strided_copy"
#: Step 1's quantized part: FlashInfer's test_block_scale_interleave shapes, and one catalog
#: shape per format with a few experts (the CPU reference is the transcribed upstream path).
#: Steps 2 and 5 take every quantized strategy on the same shapes at full size (the budgets
#: below say what that costs).
SWIZZLE_CHECK_SHAPES = ((128, 64), (256, 128), (120, 64), (200, 256), (2048, 2048))
#: The quantized shapes are one per quantized format of the library's table
#: (``quant_check_shapes``): its first catalog shape, or the one named here (MXINT4's tp8, the
#: smaller of its two layers, chosen when the format arrived and sized below), so a new format
#: is checked with no edit here.
QUANT_CHECK_CHOICES = {"mxint4": "kimi-k2-thinking-mxint4/tp8"}
QUANT_CHECK_EXPERTS = 8
#: Step 5's experiments, to choose the Triton strategies' constants: (shape, strategy, settings
#: of ``moe_convert.formats.bf16.triton_strategy`` constants), each timed like a strategy, the
#: constants restored after.
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
#: Multiplies every time box (each step's and the wall budget) where set, e.g. to 4 for a dry run
#: on a loaded CPU: the budgets are the GPU box's, and a busy CPU can overrun them without a
#: fault (tests/test_gpu_check.py's end-to-end dry run sets it; the report says so). Unset: 1.
TIME_BOX_SCALE_ENV = "GPU_CHECK_TIME_BOX_SCALE"


def time_box_scale(environ=os.environ) -> float:
    """``TIME_BOX_SCALE_ENV``'s value (1.0 where unset); ``ValueError`` naming it unless > 0."""
    text = environ.get(TIME_BOX_SCALE_ENV, "") or "1"
    try:
        scale = float(text)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise ValueError(f"{TIME_BOX_SCALE_ENV}={text!r}: give a number above 0 (unset: 1)")
    return scale


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    title: str
    budget_s: int
    env: tuple[tuple[str, str], ...] = ()  # set before the step's process starts


#: Budgets: the H200 run of 2026-11-30 took 21, 11, 13, 19 and 83 s for exact, memory, allocator,
#: timing and asv; the whole-rank load (18 BF16 loads of 110 GiB and the 2 quantized ones, each
#: timed and replayed) gets the most, and the total stays within the wall budget. The quantized
#: formats' full-size part of steps 2 and 5 (every strategy on ``quant_check_shapes()``) is sized
#: from their records' launch and traffic formulas (tests/test_gpu_check.py holds these figures):
#: one round of the 24 strategies is 26,413 launches (kimi-k2-nvfp4/tp8 8,528,
#: gpt-oss-120b-mxfp4/tp1 3,611, llama-4-maverick-fp8/tp8 1,158, deepseek-r1-fp8block/tp8 2,064,
#: minimax-m3-mxfp8/tp4 2,062, kimi-k2-thinking-mxint4/tp8 8,990) and 263 GB moved (145 GB of it
#: MXINT4's, 136 GB mxint4-legacy's sign step and lists). FlashInfer's four helpers
#: (``<format>-flashinfer``, issue 29) make it 28 strategies, 32,804 launches and 488 GB (99 GB
#: mxint4-flashinfer's, 92 GB fp8-flashinfer's: quantizing from BF16 in float32), not yet run: 1.4 s
#: of launches and 1.3 s of bytes more per round set, within the margin below (the wall budget is
#: spent: no step grew). The six ``<format>-streaming`` strategies (issue 38) make it 34 strategies,
#: 42,788 launches and 532 GB: about 0.2 s of launches and 0.01 s of bytes more per round at the
#: rates below, not yet run on a GPU (none lent since); their strided placement (issue 38's refit
#: time) makes it 43,172 launches and 509 GB: 384 launches more (8 ms at 20 us), 23 GB less. Step 5
#: times 11 rounds (warm-up included) with their copies: 5.8 s of launches at about 20 us each and
#: 1.4 s of bytes at 4 TB/s, beside the 19 s it took and the BF16 strategies added since
#: (``cycle_inplace``, ``sglang``, ``trtllm``): 45 s. Step 2 converts once each (0.3 s of launches)
#: and replays each layer in the allocator model on the CPU (4.1 s on this project's 2-core CPU),
#: paid for by taking every dispatch-level peak from its record's formula instead of measuring it on
#: ``meta`` (the BF16 part: 18.0 s before, 12.2 s after, here); but its dry run here, imports
#: included, took 24.3 s of its 25, so it gets 10 s more, 5 from step 5 and 5 from step 3 (13 s on
#: the H200, 13.8 s in that dry run). The H200 run at 7f04b26 (262 s of the wall's 360): the
#: allocator step timed out at 25 s after 7 of its 12 strategies (the first 7 took 13 s at
#: 4071513), the load step took 56 s of its 115 (its 20 loads, the quantized rank's included,
#: and one layer timed per strategy): 25 s moved from load to allocator.
STEPS = (
    Step("exact", "byte-exactness on CUDA against the CPU result", 40),
    Step("memory", "CUDA memory against the dispatch-level formulas", 35),
    Step(
        "allocator",
        "allocator model against the caching allocator",
        50,
        (("PYTORCH_ALLOC_CONF", f"max_split_size_mb:{MAX_SPLIT_MB}"),),
    ),
    Step("load", "the whole rank's load run, replayed and predicted", 90),
    Step("timing", "timing with CUDA events against a device copy", 45),
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


def quant_check_shapes() -> tuple[str, ...]:
    """Steps 1, 2 and 5's quantized shapes, ``model/tpN``: per quantized format of
    ``moe_convert.FORMATS`` (its order), ``QUANT_CHECK_CHOICES``' or its first catalog shape.
    Imports the library: call it in a step."""
    from moe_convert import FORMATS
    from moe_convert.formats.catalog import catalog_shapes

    return tuple(
        QUANT_CHECK_CHOICES.get(name) or catalog_shapes(name)[0].label
        for name in FORMATS
        if name != "bf16"  # BF16's shapes are CHECK_SHAPES
    )


def shape(label: str):
    """The full-size per-rank shape of ``label`` (``model/tpN``) of any format's catalog."""
    from moe_convert.formats.catalog import shape_from_label

    return shape_from_label(label)


def strategies(shape) -> dict:
    """Name -> registry record of every strategy of ``shape``'s format a step runs (each record
    says ``inplace``, ``origin`` and the exact ``peak``)."""
    from moe_convert import strategies as registered

    return registered(shape.format)


def cuda_device():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: this part runs only on a GPU box")
    return torch.device("cuda", torch.cuda.current_device())


def dispatch_peak(shape, strategy: str) -> int:
    """The dispatch-level peak transient bytes of one conversion: the strategy record's exact
    formula (``peak``), which the CPU tests hold equal to the measurement on ``meta`` at full
    size (tests/test_memory.py, tests/test_quant_memory.py), without the measurement's cost
    (9.5 s for the 18 BF16 cells of ``CHECK_SHAPES`` on this project's 2-core CPU)."""
    return strategies(shape)[strategy].peak.evaluate(shape)
