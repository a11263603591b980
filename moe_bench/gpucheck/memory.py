"""Steps 2 and 3, ``memory`` and ``allocator``: CUDA memory of every strategy against the
dispatch-level formulas and the allocator model, and one recorded load replayed in the model and
in PyTorch's caching allocator, reserved bytes compared after every step.
"""

from __future__ import annotations

import dataclasses
import os

from . import plan


def _model_transient_reserved(shape, strategy: str, max_split_size_mb: int | None) -> int | None:
    """Peak reserved above the loaded layer for one conversion, per the allocator model: a
    one-layer load replayed (``replay_load``, any format's); ``None`` for a strategy that
    cannot run on meta, where the replay records its trace (FlashInfer's helpers)."""
    from moe_convert.load.replay import replay_load

    if plan.strategies(shape)[strategy].not_on_meta:
        return None

    return replay_load(
        dataclasses.replace(shape, moe_layers=1),
        strategy,
        max_split_size_mb=max_split_size_mb,
        pool="default",
        device_bytes=None,
    ).transient_reserved_bytes


def _conversion(shape, strategy: str, device):
    """One conversion of a fresh ``shape`` layer (any format's) on ``device``, caches warmed."""
    from moe_convert.formats.table import layer_call

    return layer_call(shape, strategy, device)


def step_memory(dry_run: bool) -> dict:
    """Every strategy on ``plan.CHECK_SHAPES`` and every quantized strategy on
    ``plan.quant_check_shapes()``, full size: the CUDA caching allocator's figures of one
    conversion (``cuda_memory``) against the dispatch-level peak and the allocator model's
    peak reserved; the dry run computes the latter two."""
    from moe_convert.measuring.memory import cuda_memory

    rows = []
    for label in (*plan.CHECK_SHAPES, *plan.quant_check_shapes()):
        shape = plan.shape(label)
        for name in plan.strategies(shape):
            row = {
                "shape": label,
                "strategy": name,
                "dispatch_peak_bytes": plan.dispatch_peak(shape, name),
                "model_reserved_bytes": _model_transient_reserved(shape, name, None),
            }
            if not dry_run:
                try:
                    cuda = cuda_memory(_conversion(shape, name, plan.cuda_device()))
                    row.update(dataclasses.asdict(cuda))
                    row["requested_minus_dispatch"] = (
                        cuda.requested_peak_bytes - row["dispatch_peak_bytes"]
                    )
                    if row["model_reserved_bytes"] is not None:
                        row["reserved_minus_model"] = (
                            cuda.peak_reserved_bytes - row["model_reserved_bytes"]
                        )
                except Exception as error:
                    row["error"] = f"{type(error).__name__}: {error}"
            plan.record(rows, row)
            print(f"[memory] {label} {name}: {row}", flush=True)
    ok = all("error" not in row and row.get("requested_minus_dispatch", 0) == 0 for row in rows)
    return {"ok": ok, "rows": rows}


def step_allocator(dry_run: bool) -> dict:
    from moe_convert.load.allocator import Allocator, MiB
    from moe_convert.load.replay import load_steps

    shape = dataclasses.replace(plan.shape(plan.LOAD_SHAPE), moe_layers=plan.ALLOCATOR_LAYERS)
    if not dry_run:
        import torch

        device = plan.cuda_device()
        setting = (
            torch._C._accelerator_getAllocatorSettings()
            if hasattr(torch._C, "_accelerator_getAllocatorSettings")
            else os.environ.get("PYTORCH_ALLOC_CONF")
        )
        print(f"[allocator] allocator settings: {setting}", flush=True)
    rows = []
    for name in plan.strategies(shape):
        steps = load_steps(shape, name)
        model = Allocator(
            capacity_bytes=None, max_split_size=plan.MAX_SPLIT_MB * MiB, pool="default"
        )
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
            "layers": plan.ALLOCATOR_LAYERS,
            "steps": len(steps),
            "model_reserved_after_layer": model_after_layer,
            "real_reserved_after_layer": None if dry_run else real_after_layer,
            "match": None if dry_run else first_difference is None,
            "first_difference": first_difference,
        }
        plan.record(rows, row)
        print(
            f"[allocator] {name}: {len(steps)} steps, match {row['match']}, "
            f"model after last layer {model_after_layer[-1] / 2**30:.3f} GiB, "
            f"first difference {first_difference}",
            flush=True,
        )
    ok = all(row["match"] in (True, None) for row in rows)
    return {"ok": ok, "shape": plan.LOAD_SHAPE, "max_split_mb": plan.MAX_SPLIT_MB, "rows": rows}
