"""Step 5, ``timing``: every strategy and a same-size device copy with CUDA events, per shape of
the asv suite, and every quantized strategy on ``plan.quant_check_shapes()``; then
``plan.TRITON_SWEEPS``.
"""

from __future__ import annotations

from moe_suite.shapes import SHAPES

from . import plan


def time_strategy(shape, name: str, device) -> dict:
    """One timing row: ``timing.time_layer`` (CUDA events, paired with a device copy of every
    tensor of the layer), the asv suite's measurement; every time figure derives from it.
    ``shape`` of any format (``format``: ``bf16`` or a quantized one; ``origin``: the strategy
    record's, which says whether it is upstream's)."""
    from moe_convert.measuring.timing import time_layer

    record = plan.strategies(shape)[name]
    timed = time_layer(shape, name, device=device, repeats=plan.TIMING_REPEATS, warmup=1)
    return {
        "shape": shape.label,
        "strategy": name,
        "format": shape.format,
        "origin": record.origin,
        "inplace": record.inplace,
        "peak_bytes": plan.dispatch_peak(shape, name),
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


def _cells() -> list[tuple[str, str]]:
    """(shape label, strategy) of every timed cell: the asv suite's shapes x every strategy,
    then ``plan.quant_check_shapes()`` x their format's strategies."""
    labels = (*SHAPES, *plan.quant_check_shapes())
    return [(label, name) for label in labels for name in plan.strategies(plan.shape(label))]


def _plan_line(label: str, name: str) -> str:
    """What the dry run says of a cell; one of ``plan.quant_check_shapes()`` with its record's
    bytes moved and launches per call, the figures its share of the step's budget is sized
    from."""
    if label not in plan.quant_check_shapes():
        return f"{label} x {name}"
    shape = plan.shape(label)
    record = plan.strategies(shape)[name]
    return (
        f"{label} x {name} ({record.traffic.evaluate(shape) / 1e9:.2f} GB moved, "
        f"{record.launches.evaluate(shape):,} launches)"
    )


def step_timing(dry_run: bool) -> dict:
    if dry_run:
        return {"ok": True, "rows": [], "plan": [_plan_line(*cell) for cell in _cells()]}
    import torch

    from moe_convert import REGISTRY

    device = plan.cuda_device()
    rows, sweep = [], []
    for label, name in _cells():
        try:
            row = time_strategy(plan.shape(label), name, device)
        except Exception as error:
            row = {
                "shape": label,
                "strategy": name,
                "error": f"{type(error).__name__}: {error}",
            }
        torch.cuda.empty_cache()
        plan.record(rows, row)
        print(
            f"[timing] {label} {name}: "
            + (
                row.get("error")
                or f"{row['seconds'] * 1e3:.3f} ms, "
                f"x{row['copy_ratio']:.2f} copy, {row['gbps']:.0f} GB/s"
            ),
            flush=True,
        )
    for label, name, settings in plan.TRITON_SWEEPS if "triton" in REGISTRY else ():
        from moe_convert.formats.bf16 import triton_strategy

        chosen = {key: getattr(triton_strategy, key) for key in settings}
        try:  # an experiment: module constants set for a moment
            for key, value in settings.items():
                setattr(triton_strategy, key, value)
            row = time_strategy(plan.shape(label), name, device)
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
