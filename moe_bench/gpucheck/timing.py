"""Step 5, ``timing``: every strategy and a same-size device copy with CUDA events, per shape of
the asv suite; then ``plan.TRITON_SWEEPS``.
"""

from __future__ import annotations

from . import plan


def time_strategy(shape, name: str, device) -> dict:
    """One timing row: ``timing.time_layer`` (CUDA events, paired with a device copy), the
    asv suite's measurement; every time figure derives from it."""
    from moe_convert import STRATEGIES
    from moe_convert.memory import strategy_memory
    from moe_convert.timing import time_layer

    timed = time_layer(shape, name, device=device, repeats=plan.TIMING_REPEATS, warmup=1)
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

    device = plan.cuda_device()
    rows, sweep = [], []
    for label in SHAPES:
        shape = plan.shape(label)
        for name in STRATEGIES:
            try:
                row = time_strategy(shape, name, device)
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
    for label, name, settings in plan.TRITON_SWEEPS if "triton" in STRATEGIES else ():
        from moe_convert import triton_strategy

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
