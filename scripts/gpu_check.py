"""The whole CUDA-side check of moe-convert-bench, in one command with a time budget.

Run by ``scripts/gpu-check OUT [--dry-run]`` from the repository root. Each step runs in its own
Python process (so an allocator setting, a CUDA error or a hang stays inside it), under its own
time box, and writes its findings; a failed or timed-out step is reported and the next one runs.
On CUDA each step but asv is the NVTX range ``gpu_check/<step>``, and every conversion in it
``moe_convert/<strategy>/<shape>`` (``moe_convert.nvtx``): run under ``nsys profile`` to read
the trace beside an engine's.
At the end ``OUT/gpu-check.md`` (the report) and ``OUT/gpu-check.json`` (every figure) are
written, with ``OUT/asv.zip`` (results and the published dashboard) when step 6 ran.

Steps (budgets in ``STEPS``):

1. ``exact``: every strategy on CUDA against the CPU result for the full-size
   ``CHECK_SHAPES``, byte for byte. The CPU result is ``strided_copy``'s on the box's CPU
   (``CPU_REFERENCE``: byte-identical to FlashInfer's helpers and ``legacy`` by the CPU tests,
   and seconds where ``legacy`` takes tens of seconds per layer on CPU). Then the quantized
   formats: the torch 128x4 swizzle against FlashInfer's CUDA ``block_scale_interleave`` (or a
   row saying FlashInfer is absent), and every quantized strategy on CUDA against its format's
   ``-legacy`` on CPU.
2. ``memory``: CUDA memory of every strategy (peak requested/allocated/reserved, retries)
   against the dispatch-level peak (``strategy_memory`` on ``meta``) and the allocator model's
   peak reserved for the same call.
3. ``allocator``: one recorded load (``replay.load_steps``) replayed in ``moe_convert.allocator``
   and in PyTorch's caching allocator under ``max_split_size_mb:20``, reserved bytes compared
   after every allocation and free; the first step that differs is named.
4. ``load``: vLLM #45589's whole rank (``LOAD_SHAPE``, every layer, a ballast to its 109.61 GiB)
   run on CUDA (``wholemodel.run_load``) for each of ``LOAD_STRATEGIES`` x ``LOAD_CONFIGS``, timed
   layer by layer, against the same load replayed for the memory the device had free
   (``replay.pr45589_replay``), field by field and driver call by driver call; the allocator
   events' costs measured (``loadtime.measure_event_costs``) and each load predicted from them.
   The costs and the per-layer seconds of step 5 become ``OUT/device-costs.json``: the committed
   ``docs/gpu-results/device-costs.json`` with this run's record added (copy it over that file).
5. ``timing``: every strategy and a same-size device copy with CUDA events, per shape of the asv
   suite: copy ratio, GB/s, per-layer and whole-model seconds; then ``TRITON_SWEEPS``.
6. ``asv``: ``asv run -E existing:python3 --quick`` of ``LayerTime.track_layer_seconds`` on
   ``CHECK_SHAPES``, published, zipped.

The report ends with issue 11's targets, judged on step 5's figures (``target_lines``).
``docs/gpu.md`` has the recipe and the figures of the H200 run.

``--dry-run`` prints the plan and runs the parts that need no CUDA (the CPU references, the
dispatch-level formulas, the allocator-model predictions, asv's presence); the CUDA parts are
reported as not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # moe_convert and benchmarks from this checkout, installed or not

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
#: and this library's best out-of-place and in-place ones, docs/gpu.md), each under vLLM's
#: setting and PyTorch's default, in the default pool (vLLM without sleep mode) and a MemPool.
LOAD_STRATEGIES = ("legacy", "preallocated", "inplace", "triton", "triton_inplace")
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
QUANT_CHECK_SHAPES = ("kimi-k2-nvfp4/tp8", "gpt-oss-120b-mxfp4/tp1", "llama-4-maverick-fp8/tp8")
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


#: Where this step's process writes its findings (``--result``); set in ``main``.
_RESULT_FILE: Path | None = None


def _record(rows: list[dict], row: dict) -> None:
    """Append ``row`` and save the rows so far: a step stopped by its time box still has them."""
    rows.append(row)
    if _RESULT_FILE is not None:
        _RESULT_FILE.write_text(
            json.dumps({"ok": False, "partial": True, "rows": rows}, default=str)
        )


def _shape(label: str):
    from moe_convert.shapes import shape_from_label

    return shape_from_label(label)


def _cuda_device():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: this part runs only on a GPU box")
    return torch.device("cuda", torch.cuda.current_device())


# -- step 1 ------------------------------------------------------------------------------------


def step_exact(dry_run: bool) -> dict:
    import torch

    from moe_convert import STRATEGIES, convert
    from moe_convert.inputs import random_weights

    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for label in CHECK_SHAPES:
        shape = _shape(label)
        w13, w2 = random_weights(shape.w13_shape, shape.w2_shape, seed=1)
        start = time.perf_counter()
        ref13, ref2 = convert(w13, w2, strategy=CPU_REFERENCE, gated=shape.gated)
        cpu_s = time.perf_counter() - start
        print(f"[exact] {label}: CPU reference ({CPU_REFERENCE}) in {cpu_s:.1f} s", flush=True)
        if dry_run:
            _record(
                rows,
                {
                    "shape": label,
                    "strategy": f"{CPU_REFERENCE} (cpu)",
                    "cpu_reference_s": cpu_s,
                    "exact": None,
                },
            )
            continue
        device = _cuda_device()
        ref13, ref2 = ref13.to(device), ref2.to(device)
        pristine13, pristine2 = w13.to(device), w2.to(device)
        del w13, w2
        for name in STRATEGIES:
            try:
                in13, in2 = (
                    (pristine13.clone(), pristine2.clone())
                    if STRATEGIES[name].inplace
                    else (pristine13, pristine2)
                )
                out13, out2 = convert(in13, in2, strategy=name, gated=shape.gated)
                torch.cuda.synchronize(device)
                bad = int(
                    (out13.view(torch.uint8) != ref13.view(torch.uint8)).sum()
                    + (out2.view(torch.uint8) != ref2.view(torch.uint8)).sum()
                )
                _record(
                    rows,
                    {
                        "shape": label,
                        "strategy": name,
                        "exact": bad == 0,
                        "bytes_differing": bad,
                        "cpu_reference_s": cpu_s,
                    },
                )
                del in13, in2, out13, out2
            except Exception as error:  # one strategy's failure must not hide the others'
                _record(
                    rows,
                    {
                        "shape": label,
                        "strategy": name,
                        "exact": False,
                        "error": f"{type(error).__name__}: {error}",
                    },
                )
            print(f"[exact] {label} {name}: {rows[-1].get('exact')}", flush=True)
        del ref13, ref2, pristine13, pristine2
        torch.cuda.empty_cache()
    rows += _quantized_exact(dry_run)
    ok = all(row["exact"] in (True, None) for row in rows)
    return {"ok": ok, "rows": rows}


def _layer_to(layer, device):
    """A copy of the ``QuantLayer`` on ``device`` (strategies may write their input)."""
    from moe_convert import QuantLayer

    return QuantLayer(
        *(None if t is None else t.to(device, copy=True) for t in vars(layer).values())
    )


def _quantized_exact(dry_run: bool) -> list[dict]:
    """The quantized formats' part of step 1 (issue 18): ``swizzle.block_scale_interleave``
    against FlashInfer's CUDA ``block_scale_interleave`` on FlashInfer's own test shapes, then
    every quantized strategy on CUDA against its format's ``-legacy`` on CPU, for
    ``QUANT_CHECK_EXPERTS`` experts of each ``QUANT_CHECK_SHAPES``. A row says where FlashInfer
    is absent; the dry run computes nothing (the CPU tests check the same on CPU)."""
    import torch

    from moe_convert import QUANT_STRATEGIES, convert_quant, quant_layer_shape
    from moe_convert.quant_layer import quant_layer_tensors
    from moe_convert.swizzle import block_scale_interleave

    if dry_run:
        return []
    rows: list[dict] = []
    device = _cuda_device()
    try:
        from flashinfer import block_scale_interleave as flashinfer_interleave
    except ImportError as error:
        rows.append(
            {
                "shape": "128x4 swizzle",
                "strategy": "FlashInfer block_scale_interleave",
                "exact": None,
                "error": f"FlashInfer absent, not compared ({error})",
            }
        )
        flashinfer_interleave = None
    for dims in SWIZZLE_CHECK_SHAPES if flashinfer_interleave else ():
        sf = torch.randint(0, 256, dims, dtype=torch.uint8, device=device)
        try:
            bad = int((block_scale_interleave(sf) != flashinfer_interleave(sf)).sum())
            row = {"exact": bad == 0, "bytes_differing": bad}
        except Exception as error:  # a wrong output size, an unsupported GPU
            row = {"exact": False, "error": f"{type(error).__name__}: {error}"}
        rows.append({"shape": f"scales {dims}", "strategy": "block_scale_interleave", **row})
    for label in QUANT_CHECK_SHAPES:
        model, _, tp = label.rpartition("/tp")
        shape = quant_layer_shape(model, int(tp)).with_experts(QUANT_CHECK_EXPERTS)
        layer = quant_layer_tensors(shape, "cpu")

        want = convert_quant(_layer_to(layer, "cpu"), strategy=f"{shape.format}-legacy")
        for name in (n for n, r in QUANT_STRATEGIES.items() if r.format == shape.format):
            try:
                got = convert_quant(_layer_to(layer, device), strategy=name)
                bad = sum(
                    int((getattr(got, f).cpu().view(torch.uint8) != t.view(torch.uint8)).sum())
                    for f, t in want.tensors().items()
                )
                row = {"exact": bad == 0, "bytes_differing": bad}
            except Exception as error:  # one strategy's failure must not hide the others'
                row = {"exact": False, "error": f"{type(error).__name__}: {error}"}
            rows.append({"shape": f"{label} (E {shape.experts})", "strategy": name, **row})
            print(f"[exact] {label} {name}: {rows[-1]['exact']}", flush=True)
    return rows


# -- step 2 ------------------------------------------------------------------------------------


def _model_transient_reserved(shape, strategy: str, max_split_size_mb: int | None) -> int:
    """Peak reserved above the loaded weights for one conversion, per the allocator model."""
    from moe_convert.replay import replay_load

    one = dataclasses.replace(shape, moe_layers=1)
    return replay_load(
        one, strategy, max_split_size_mb=max_split_size_mb, pool="default", device_bytes=None
    ).transient_reserved_bytes


def step_memory(dry_run: bool) -> dict:
    from moe_convert import STRATEGIES
    from moe_convert.memory import strategy_cuda_memory, strategy_memory

    rows = []
    for label in CHECK_SHAPES:
        shape = _shape(label)
        for name in STRATEGIES:
            row = {
                "shape": label,
                "strategy": name,
                "dispatch_peak_bytes": strategy_memory(shape, name, device="meta").peak_bytes,
                "model_reserved_bytes": _model_transient_reserved(shape, name, None),
            }
            if not dry_run:
                try:
                    cuda = strategy_cuda_memory(shape, name)
                    row.update(dataclasses.asdict(cuda))
                    row["requested_minus_dispatch"] = (
                        cuda.requested_peak_bytes - row["dispatch_peak_bytes"]
                    )
                    row["reserved_minus_model"] = (
                        cuda.peak_reserved_bytes - row["model_reserved_bytes"]
                    )
                except Exception as error:
                    row["error"] = f"{type(error).__name__}: {error}"
            _record(rows, row)
            print(f"[memory] {label} {name}: {row}", flush=True)
    ok = all("error" not in row and row.get("requested_minus_dispatch", 0) == 0 for row in rows)
    return {"ok": ok, "rows": rows}


# -- step 3 ------------------------------------------------------------------------------------


def step_allocator(dry_run: bool) -> dict:
    from moe_convert import STRATEGIES
    from moe_convert.allocator import Allocator, MiB
    from moe_convert.replay import load_steps

    shape = dataclasses.replace(_shape(LOAD_SHAPE), moe_layers=ALLOCATOR_LAYERS)
    if not dry_run:
        import torch

        device = _cuda_device()
        setting = (
            torch._C._accelerator_getAllocatorSettings()
            if hasattr(torch._C, "_accelerator_getAllocatorSettings")
            else os.environ.get("PYTORCH_ALLOC_CONF")
        )
        print(f"[allocator] allocator settings: {setting}", flush=True)
    rows = []
    for name in STRATEGIES:
        steps = load_steps(shape, name)
        model = Allocator(capacity_bytes=None, max_split_size=MAX_SPLIT_MB * MiB, pool="default")
        blocks, tensors, requested = {}, {}, {}
        model_after_layer, real_after_layer, first_difference = [], [], None
        for index, (kind, key, nbytes, layer_done) in enumerate(steps):
            if kind == "alloc" and nbytes:
                # a second alloc of a live block is a resize through out=: a new buffer of the
                # whole size, then the old one freed (as replay._replay_trace does)
                requested[key] = requested.get(key, 0) + nbytes
                old = blocks.get(key), tensors.get(key)
                blocks[key] = model.malloc(requested[key])
                if not dry_run:
                    tensors[key] = torch.empty(requested[key], dtype=torch.uint8, device=device)
                if old[0] is not None:
                    model.free(old[0])
                del old
            elif kind == "free" and key in blocks:
                requested.pop(key)
                model.free(blocks.pop(key))
                tensors.pop(key, None)
            real = None if dry_run else torch.cuda.memory_reserved(device)
            if real is not None and first_difference is None and real != model.reserved_bytes:
                first_difference = {
                    "step": index,
                    "kind": kind,
                    "key": str(key),
                    "nbytes": nbytes,
                    "model_reserved": model.reserved_bytes,
                    "real_reserved": real,
                }
            if layer_done:
                model_after_layer.append(model.reserved_bytes)
                real_after_layer.append(real)
        tensors.clear()
        if not dry_run:
            torch.cuda.empty_cache()
        row = {
            "strategy": name,
            "layers": ALLOCATOR_LAYERS,
            "steps": len(steps),
            "model_reserved_after_layer": model_after_layer,
            "real_reserved_after_layer": None if dry_run else real_after_layer,
            "match": None if dry_run else first_difference is None,
            "first_difference": first_difference,
        }
        _record(rows, row)
        print(
            f"[allocator] {name}: {len(steps)} steps, match {row['match']}, "
            f"model after last layer {model_after_layer[-1] / 2**30:.3f} GiB, "
            f"first difference {first_difference}",
            flush=True,
        )
    ok = all(row["match"] in (True, None) for row in rows)
    return {"ok": ok, "shape": LOAD_SHAPE, "max_split_mb": MAX_SPLIT_MB, "rows": rows}


# -- step 4 ------------------------------------------------------------------------------------


def step_load(dry_run: bool) -> dict:
    """vLLM #45589's whole rank run (``run_load``) and replayed for the device it found
    (``pr45589_replay``), every configuration of ``LOAD_CONFIGS``; the event costs measured and
    each load predicted from them (``moe_convert.loadtime``)."""
    from moe_convert import STRATEGIES
    from moe_convert.loadtime import measure_event_costs, predict_replayed
    from moe_convert.replay import pr45589_replay
    from moe_convert.wholemodel import DEVICE_141GB_BYTES, PR45589_BALLAST_BYTES, run_load

    shape = _shape(LOAD_SHAPE)
    names = [name for name in LOAD_STRATEGIES if name in STRATEGIES]
    events, layer_seconds = None, {}
    if not dry_run:
        import torch

        device = _cuda_device()
        events = measure_event_costs()
        print(f"[load] event costs: {events}", flush=True)
        for name in names:  # one layer's steady-state conversion, for the prediction
            layer_seconds[name] = _time_strategy(shape, name, device)["seconds"]
            torch.cuda.empty_cache()
    rows = []
    for max_split, pool in LOAD_CONFIGS:
        for name in names:
            row = {"strategy": name, "max_split_mb": max_split, "pool": pool}
            try:
                ran = None
                if not dry_run:
                    ran = run_load(
                        shape,
                        name,
                        max_split_size_mb=max_split,
                        pool=pool,
                        other_weights_bytes=PR45589_BALLAST_BYTES,
                    )
                    row["run"] = dataclasses.asdict(ran)
                replayed = pr45589_replay(
                    name,
                    max_split_size_mb=max_split,
                    pool=pool,
                    device_bytes=DEVICE_141GB_BYTES if ran is None else ran.device_bytes,
                )
                row["replayed"] = dataclasses.asdict(replayed)
                if ran is not None:  # every field both sides know: {field: [replayed, run]}
                    row["differences"] = {
                        field: list(pair) for field, pair in replayed.differences(ran).items()
                    }
                if events is not None:
                    row["predicted_seconds"] = predict_replayed(
                        replayed, layer_seconds[name], events
                    )
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
            _record(rows, row)
            print(f"[load] {_load_line(row)}", flush=True)
    # The OOM message's wording differs between the allocator and its model: not a finding.
    ok = all(
        "error" not in row and set(row.get("differences", ())) <= {"oom_message"} for row in rows
    )
    return {
        "ok": ok,
        "shape": LOAD_SHAPE,
        "ballast_bytes": PR45589_BALLAST_BYTES,
        "events": None if events is None else dataclasses.asdict(events),
        "layer_seconds": layer_seconds,
        "rows": rows,
    }


def _load_line(row: dict) -> str:
    """One printed line of a step-4 row."""
    head = f"{row['strategy']} max_split {row['max_split_mb']} {row['pool']}: "
    if "error" in row:
        return head + row["error"]
    replayed, ran = row["replayed"], row.get("run")
    counts = "/".join(str(replayed[e]) for e in ("num_device_alloc", "num_device_free"))
    if ran is None:
        return head + f"replayed cudaMalloc/cudaFree {counts}, OOM layer {replayed['oom_layer']}"
    return head + (
        f"{ran['seconds']:.3f} s (predicted {row.get('predicted_seconds', float('nan')):.3f}), "
        f"cudaMalloc/cudaFree {ran['num_device_alloc']}/{ran['num_device_free']} "
        f"(replayed {counts}), OOM layer {ran['oom_layer']}, "
        f"differences {sorted(row['differences'])}"
    )


# -- step 5 ------------------------------------------------------------------------------------


def _time_strategy(shape, name: str, device) -> dict:
    """One timing row: ``timing.time_layer`` (CUDA events, paired with a device copy), the
    asv suite's measurement; every time figure derives from it."""
    from moe_convert import STRATEGIES
    from moe_convert.memory import strategy_memory
    from moe_convert.timing import time_layer

    timed = time_layer(shape, name, device=device, repeats=TIMING_REPEATS, warmup=1)
    return {
        "shape": shape.label,
        "strategy": name,
        "inplace": STRATEGIES[name].inplace,
        "peak_bytes": strategy_memory(shape, name, device="meta").peak_bytes,
        "seconds": timed.seconds,
        "copy_seconds": timed.copy_time.median,
        "copy_ratio": timed.copy_ratio,
        "gbps": timed.gbps,
        "copy_gbps": timed.copy_gbps,
        "whole_model_seconds": timed.whole_model_seconds,
        "moe_layers": shape.moe_layers,
        "samples": timed.strategy_time.samples,
        "copy_samples": timed.copy_time.samples,
    }


def step_timing(dry_run: bool) -> dict:
    from benchmarks.common import SHAPES
    from moe_convert import STRATEGIES

    if dry_run:
        return {
            "ok": True,
            "rows": [],
            "plan": [f"{label} x {name}" for label in SHAPES for name in STRATEGIES],
        }
    import torch

    device = _cuda_device()
    rows, sweep = [], []
    for label in SHAPES:
        shape = _shape(label)
        for name in STRATEGIES:
            try:
                row = _time_strategy(shape, name, device)
            except Exception as error:
                row = {
                    "shape": label,
                    "strategy": name,
                    "error": f"{type(error).__name__}: {error}",
                }
            torch.cuda.empty_cache()
            _record(rows, row)
            print(
                f"[timing] {label} {name}: "
                + (
                    row.get("error")
                    or f"{row['seconds'] * 1e3:.3f} ms, "
                    f"x{row['copy_ratio']:.2f} copy, {row['gbps']:.0f} GB/s"
                ),
                flush=True,
            )
    for label, name, settings in TRITON_SWEEPS if "triton" in STRATEGIES else ():
        from moe_convert import triton_strategy

        chosen = {key: getattr(triton_strategy, key) for key in settings}
        try:  # an experiment: module constants set for a moment
            for key, value in settings.items():
                setattr(triton_strategy, key, value)
            row = _time_strategy(_shape(label), name, device)
        except Exception as error:
            row = {"shape": label, "strategy": name, "error": f"{type(error).__name__}: {error}"}
        finally:
            for key, value in chosen.items():
                setattr(triton_strategy, key, value)
        sweep.append({"settings": settings, **row})
        print(
            f"[timing] sweep {label} {name} {settings}: "
            + (row.get("error") or f"x{row['copy_ratio']:.3f} copy"),
            flush=True,
        )
    return {"ok": all("error" not in row for row in rows), "rows": rows, "sweep": sweep}


# -- step 6 ------------------------------------------------------------------------------------


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("[asv] $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, text=True, **kwargs)


#: Step 6's benchmark: the time of one layer (memory is exact and checked by steps 1-2, the copy
#: ratio by step 5), on CHECK_SHAPES only (asv matches ``name(param, ...)`` with the parameters'
#: reprs). Each runs in a fresh interpreter (``spawn``: a forked child cannot use CUDA once its
#: parent has touched it, and importing the suite asks torch whether CUDA is there), a few
#: seconds each; ``LayerTime.setup_cache`` times the whole grid once first (step 5's work).
ASV_BENCHMARKS = (
    r"LayerTime\.track_layer_seconds\('("
    + "|".join(label.replace(".", r"\.") for label in CHECK_SHAPES)
    + ")'"
)


def step_asv(dry_run: bool, out: Path) -> dict:
    try:
        import asv  # noqa: F401
    except ImportError as error:
        return {
            "ok": False,
            "error": f"asv is not importable ({error}): run scripts/gpu-wheels "
            "here and carry .whl/",
        }
    if dry_run:
        return {"ok": True, "asv": "importable", "benchmarks": ASV_BENCHMARKS}
    commit = (
        shutil.which("git")
        and _run(["git", "rev-parse", "HEAD"], capture_output=True).stdout.strip()
    )
    if not commit:
        return {"ok": False, "error": "not a git checkout: asv needs the commit (clone the tree)"}
    if _run(["git", "rev-parse", "--verify", "-q", "main"], capture_output=True).returncode:
        return {
            "ok": False,
            "error": "no branch main here: asv.conf.json's branches need it (in a "
            "scratch clone: git branch main HEAD)",
        }
    machine = (
        _run(
            [sys.executable, "-m", "moe_bench", "machine", "--profile", "full"], capture_output=True
        ).stdout.strip()
        or "gpu-check"
    )
    # asv drops PYTHONPATH from the benchmarks' environment unless given as ASV_PYTHONPATH
    env = dict(os.environ, ASV_PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    bench = [
        sys.executable,
        "-m",
        "asv",
        "run",
        "-E",
        f"existing:{sys.executable}",
        "--quick",
        "--launch-method",
        "spawn",
        "--show-stderr",
        "--machine",
        machine,
        "--set-commit-hash",
        commit,
        "-b",
        ASV_BENCHMARKS,
    ]
    # leave time to publish and zip inside the step's box
    budget = next(step.budget_s for step in STEPS if step.name == "asv") - 20
    try:
        returncode = _run(bench, env=env, timeout=budget).returncode
    except subprocess.TimeoutExpired:
        returncode = f"timed out after {budget} s"
    _run([sys.executable, "-m", "asv", "publish"], env=env)
    _run([sys.executable, "-m", "moe_bench", "dashboard", "offline", "html"], env=env)
    archive = out / "asv.zip"
    files = 0
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for folder in (ROOT / "results" / machine, ROOT / "html"):
            for path in folder.rglob("*") if folder.exists() else ():
                if path.is_file():
                    zipped.write(path, path.relative_to(ROOT))
                    files += 1
    return {
        "ok": returncode == 0,
        "returncode": returncode,
        "machine": machine,
        "commit": commit,
        "archive": archive.name,
        "archived_files": files,
    }


STEP_FUNCTIONS = {
    "exact": step_exact,
    "memory": step_memory,
    "allocator": step_allocator,
    "load": step_load,
    "timing": step_timing,
}


# -- the orchestrator --------------------------------------------------------------------------


def plan_lines(dry_run: bool) -> list[str]:
    lines = [
        f"gpu-check plan ({'dry run: CUDA parts skipped' if dry_run else 'full'}), "
        f"wall budget {WALL_BUDGET_S} s:"
    ]
    for number, step in enumerate(STEPS, 1):
        env = " ".join(f"{k}={v}" for k, v in step.env)
        lines.append(
            f"  {number}. {step.name:<9} {step.budget_s:>4} s  {step.title}"
            + (f"  [{env}]" if env else "")
        )
    lines.append(f"  total      {sum(step.budget_s for step in STEPS):>4} s")
    return lines


def run_step(step: Step, out: Path, scratch: Path, dry_run: bool, timeout_s: float) -> dict:
    """Run one step in a fresh interpreter under ``timeout_s``; its findings, or why none."""
    result_file = scratch / f"{step.name}.json"
    env = dict(os.environ, **dict(step.env), PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--step",
        step.name,
        "--result",
        str(result_file),
        str(out),
    ] + (["--dry-run"] if dry_run else [])
    start = time.perf_counter()
    try:
        process = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout_s)
        status = "passed" if process.returncode == 0 else f"crashed (exit {process.returncode})"
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout_s:.0f} s"
    seconds = time.perf_counter() - start
    findings = json.loads(result_file.read_text()) if result_file.exists() else {}
    if status == "passed" and not findings.get("ok", False):
        status = "failed"
    return {
        "step": step.name,
        "title": step.title,
        "status": status,
        "seconds": seconds,
        "budget_s": step.budget_s,
        **findings,
    }


def _gib(nbytes) -> str:
    from moe_convert.units import format_bytes

    return format_bytes(nbytes, unit="GiB", digits=3)


def _mib(nbytes) -> str:
    from moe_convert.units import format_bytes

    return format_bytes(nbytes, unit="MiB")


def _seconds(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds:.3f} s"


#: Issue 11's targets: out-of-place and in-place time over a same-size device copy, and the
#: whole qwen3-235b-a22b/tp4 rank.
TARGET_OUT_OF_PLACE_RATIO = 1.25
TARGET_INPLACE_RATIO = 1.6
TARGET_WHOLE_MODEL_S = 0.060
#: Issue 17's: vLLM #45589's 4.5x (legacy / preallocated load), within 25 %.
TARGET_LOAD_RATIO = 3.4


def target_lines(rows: list[dict]) -> list[str]:
    """Per shape: the best out-of-place and in-place strategies against the targets."""
    lines = []
    timed = [row for row in rows if "error" not in row]
    for label in dict.fromkeys(row["shape"] for row in timed):
        for inplace, target in ((False, TARGET_OUT_OF_PLACE_RATIO), (True, TARGET_INPLACE_RATIO)):
            group = [r for r in timed if r["shape"] == label and r["inplace"] == inplace]
            if not group:
                continue
            best = min(group, key=lambda r: r["copy_ratio"])
            verdict = "met" if best["copy_ratio"] <= target else "NOT met"
            lines.append(
                f"- {label}, best {'in place' if inplace else 'out of place'}: "
                f"`{best['strategy']}` x{best['copy_ratio']:.3f} copy (target <= {target}: "
                f"{verdict}), {best['seconds'] * 1e3:.3f} ms/layer, peak "
                f"{_mib(best['peak_bytes'])}, "
                f"whole model {best['whole_model_seconds'] * 1e3:.1f} ms"
            )
    qwen = [r for r in timed if r["shape"] == LOAD_SHAPE]
    if qwen:
        best = min(qwen, key=lambda r: r["whole_model_seconds"])
        verdict = "met" if best["whole_model_seconds"] <= TARGET_WHOLE_MODEL_S else "NOT met"
        lines.append(
            f"- whole {LOAD_SHAPE} rank ({best['moe_layers']} layers): `{best['strategy']}` "
            f"{best['whole_model_seconds'] * 1e3:.1f} ms (target <= "
            f"{TARGET_WHOLE_MODEL_S * 1e3:.0f} ms: {verdict})"
        )
    return lines


def _table(header: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(cell) for cell in row) + " |" for row in rows
    ]


def load_lines(step: dict) -> list[str]:
    """Step 4's section: each load's seconds measured and predicted, its driver calls run and
    replayed, and vLLM #45589's ratio against the target of issue 17."""
    lines = [
        "",
        f"## 4. Whole-rank load ({LOAD_SHAPE}, all layers, ballast to 109.61 GiB)",
        "",
        f"Event costs: {step.get('events') or 'not measured'}.",
        "",
    ]
    rows = [r for r in step["rows"] if "error" not in r]
    lines += _table(
        [
            "strategy",
            "max_split_mb",
            "pool",
            "seconds",
            "predicted",
            "cudaMalloc run/replay",
            "cudaFree run/replay",
            "retries run/replay",
            "OOM layer",
            "fields differing",
        ],
        [
            [
                r["strategy"],
                r["max_split_mb"],
                r["pool"],
                _seconds(r.get("run", {}).get("seconds")),
                _seconds(r.get("predicted_seconds")),
                *(
                    f"{r.get('run', {}).get(event, 'n/a')}/{r['replayed'][event]}"
                    for event in ("num_device_alloc", "num_device_free", "num_alloc_retries")
                ),
                r["replayed"]["oom_layer"],
                ", ".join(r["differences"]) if "differences" in r else "n/a",
            ]
            for r in rows
        ],
    )
    lines += [
        f"- {r['strategy']} {r['max_split_mb']} {r['pool']}: {r['error']}"
        for r in step["rows"]
        if "error" in r
    ]
    seconds = {
        (r["strategy"], r["max_split_mb"], r["pool"]): r["run"]["seconds"]
        for r in rows
        if "run" in r and r["run"]["oom_layer"] is None
    }
    for max_split in (MAX_SPLIT_MB, None):
        legacy = seconds.get(("legacy", max_split, "default"))
        preallocated = seconds.get(("preallocated", max_split, "default"))
        if legacy and preallocated:
            lines.append(
                f"- legacy / preallocated, default pool, max_split_size_mb {max_split}: "
                f"{legacy / preallocated:.2f}x (vLLM #45589: 4.5x at 20; target at 20: "
                f">= {TARGET_LOAD_RATIO}x)"
            )
    return lines


def report_markdown(summary: dict) -> str:
    lines = [
        f"# gpu-check {summary['started']}",
        "",
        f"{summary['device']}; torch {summary['torch']}, triton {summary['triton']}, "
        f"commit {summary['commit']}; {'dry run' if summary['dry_run'] else 'full run'}; "
        f"{summary['seconds']:.0f} s wall.",
        "",
    ]
    lines += _table(
        ["step", "status", "seconds (budget)"],
        [
            [f"{s['step']}: {s['title']}", s["status"], f"{s['seconds']:.0f} ({s['budget_s']})"]
            for s in summary["steps"]
        ],
    )
    steps = {step["step"]: step for step in summary["steps"]}

    def rows_of(name: str) -> list[dict]:
        return steps.get(name, {}).get("rows") or []

    if rows_of("exact"):
        lines += ["", f"## 1. Byte-exactness (CUDA vs CPU {CPU_REFERENCE})", ""]
        lines += _table(
            ["shape", "strategy", "exact", "bytes differing"],
            [
                [
                    r["shape"],
                    r["strategy"],
                    r.get("exact"),
                    r.get("bytes_differing", r.get("error", "")),
                ]
                for r in rows_of("exact")
            ],
        )
    if rows_of("memory"):
        lines += [
            "",
            "## 2. CUDA memory vs dispatch-level peak",
            "",
            "requested = unrounded caching-allocator requests (should equal the dispatch "
            "peak); allocated rounds each block up to 512 B; reserved counts whole segments "
            "(2 MiB small-pool, 20 MiB for 1-10 MiB requests, 2 MiB rounding above), "
            "compared with the allocator model replaying the same call.",
            "",
        ]
        lines += _table(
            [
                "shape",
                "strategy",
                "dispatch",
                "requested",
                "allocated",
                "reserved",
                "model reserved",
                "retries",
            ],
            [
                [
                    r["shape"],
                    r["strategy"],
                    _mib(r["dispatch_peak_bytes"]),
                    _mib(r.get("requested_peak_bytes")),
                    _mib(r.get("peak_allocated_bytes")),
                    _mib(r.get("peak_reserved_bytes")),
                    _mib(r["model_reserved_bytes"]),
                    r.get("num_alloc_retries", r.get("error", "n/a")),
                ]
                for r in rows_of("memory")
            ],
        )
    if rows_of("allocator"):
        lines += [
            "",
            f"## 3. Allocator model vs caching allocator ({LOAD_SHAPE}, "
            f"{ALLOCATOR_LAYERS} layers, max_split_size_mb:{MAX_SPLIT_MB})",
            "",
        ]
        lines += _table(
            [
                "strategy",
                "steps",
                "match",
                "model reserved after last layer",
                "real",
                "first difference",
            ],
            [
                [
                    r["strategy"],
                    r["steps"],
                    r["match"],
                    _gib(r["model_reserved_after_layer"][-1]),
                    _gib((r.get("real_reserved_after_layer") or [None])[-1]),
                    r["first_difference"] or "",
                ]
                for r in rows_of("allocator")
            ],
        )
    if rows_of("load"):
        lines += load_lines(steps["load"])
    if rows_of("timing"):
        lines += [
            "",
            f"## 5. Timing (CUDA events, {TIMING_REPEATS} calls each paired with a "
            "same-size device copy; x copy: median of the paired ratios)",
            "",
        ]
        lines += _table(
            ["shape", "strategy", "ms / layer", "x copy", "GB/s", "copy GB/s", "whole model (s)"],
            [
                [r["shape"], r["strategy"], r["error"], "", "", "", ""]
                if "error" in r
                else [
                    r["shape"],
                    r["strategy"],
                    f"{r['seconds'] * 1e3:.3f}",
                    f"{r['copy_ratio']:.2f}",
                    f"{r['gbps']:.0f}",
                    f"{r['copy_gbps']:.0f}",
                    f"{r['whole_model_seconds']:.4f}",
                ]
                for r in rows_of("timing")
            ],
        )
        sweep = steps["timing"].get("sweep") or []
        if sweep:
            lines += ["", "Triton constants tried (the chosen ones are in the table above):", ""]
            lines += _table(
                ["shape", "strategy", "settings", "ms / layer", "x copy"],
                [
                    [
                        r["shape"],
                        r["strategy"],
                        r["settings"],
                        r.get("error", "") or f"{r['seconds'] * 1e3:.3f}",
                        "" if "error" in r else f"{r['copy_ratio']:.3f}",
                    ]
                    for r in sweep
                ],
            )
        lines += ["", "## Targets (issue 11)", ""] + target_lines(rows_of("timing"))
    if "asv" in steps:
        lines += ["", "## 6. asv", "", str({k: v for k, v in steps["asv"].items() if k != "title"})]
    return "\n".join(lines) + "\n"


def costs_record(summary: dict):
    """This run's ``loadtime.DeviceCosts``: step 4's event costs, with one layer's seconds of
    every shape and strategy step 5 timed (and step 4's for its strategies); None without
    step 4's costs (a dry run, or a step that failed before measuring them)."""
    from moe_convert.loadtime import DeviceCosts, EventCosts

    steps = {step["step"]: step for step in summary["steps"]}
    load = steps.get("load", {})
    if not load.get("events"):
        return None
    layer_seconds: dict[str, dict[str, float]] = {}
    for row in steps.get("timing", {}).get("rows") or []:
        if "error" not in row:
            layer_seconds.setdefault(row["shape"], {})[row["strategy"]] = row["seconds"]
    layer_seconds.setdefault(LOAD_SHAPE, {}).update(load.get("layer_seconds") or {})
    return DeviceCosts(
        device=summary["device"],
        torch=summary["torch"],
        commit=summary["commit"],
        date=summary["started"],
        events=EventCosts(**load["events"]),
        layer_seconds=layer_seconds,
    )


def _environment() -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"no CUDA device ({platform.processor() or platform.machine()})"
    )
    commit = os.environ.get("GPU_CHECK_COMMIT", "unknown")
    if shutil.which("git"):
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True, capture_output=True
            ).stdout.strip()
            or commit
        )
    return {
        "device": device,
        "torch": torch.__version__,
        "triton": triton_version,
        "commit": commit,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", type=Path, help="folder for gpu-check.md, gpu-check.json, asv.zip")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan, run only what needs no CUDA"
    )
    parser.add_argument("--step", choices=[step.name for step in STEPS], help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step:  # inside one step's own process
        global _RESULT_FILE
        _RESULT_FILE = args.result
        if args.step == "asv":  # asv's own processes do the work: no range, no torch here
            findings = step_asv(args.dry_run, args.out)
        else:
            import torch

            from moe_convert.nvtx import nvtx_range

            # the step as one NVTX range in an nsys trace of the run (nothing without CUDA)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            with nvtx_range(f"gpu_check/{args.step}", device):
                findings = STEP_FUNCTIONS[args.step](args.dry_run)
        args.result.write_text(json.dumps(findings, default=str))
        return 0
    print("\n".join(plan_lines(args.dry_run)), flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        for step in STEPS:
            left = WALL_BUDGET_S - (time.perf_counter() - start)
            if left < 5:
                results.append(
                    {
                        "step": step.name,
                        "title": step.title,
                        "seconds": 0.0,
                        "budget_s": step.budget_s,
                        "status": "not run: out of time",
                    }
                )
                continue
            print(f"== step {step.name} (budget {step.budget_s} s, {left:.0f} s left)", flush=True)
            results.append(
                run_step(step, args.out, Path(scratch), args.dry_run, min(step.budget_s, left))
            )
            print(
                f"== step {step.name}: {results[-1]['status']} in {results[-1]['seconds']:.1f} s",
                flush=True,
            )
    summary = {
        "started": started,
        "dry_run": args.dry_run,
        "seconds": time.perf_counter() - start,
        **_environment(),
        "steps": results,
    }
    (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1, default=str))
    record = costs_record(summary)
    if record is not None:
        from moe_convert.loadtime import COSTS_FILE, append_costs

        if COSTS_FILE.exists():
            shutil.copyfile(COSTS_FILE, args.out / COSTS_FILE.name)
        append_costs(record, args.out / COSTS_FILE.name)
    (args.out / "gpu-check.md").write_text(report_markdown(summary))
    print(report_markdown(summary), flush=True)
    return 0 if all(r["status"] == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
