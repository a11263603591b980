"""Step 4, ``load``: vLLM #45589's whole rank run on CUDA for each of ``plan.LOAD_STRATEGIES`` x
``plan.LOAD_CONFIGS``, against the same load replayed; the allocator events' costs measured and
each load predicted from them.
"""

from __future__ import annotations

import dataclasses

from . import plan
from .timing import time_strategy


def step_load(dry_run: bool) -> dict:
    """vLLM #45589's whole rank run (``run_load``) and replayed for the device it found
    (``pr45589_replay``), every configuration of ``plan.LOAD_CONFIGS``; the event costs measured and
    each load predicted from them (``moe_convert.loadtime``)."""
    from moe_convert import STRATEGIES
    from moe_convert.loadtime import measure_event_costs, predict_replayed
    from moe_convert.replay import pr45589_replay
    from moe_convert.wholemodel import DEVICE_141GB_BYTES, PR45589_BALLAST_BYTES, run_load

    shape = plan.shape(plan.LOAD_SHAPE)
    names = [name for name in plan.LOAD_STRATEGIES if name in STRATEGIES]
    events, layer_seconds = None, {}
    if not dry_run:
        import torch

        device = plan.cuda_device()
        events = measure_event_costs()
        print(f"[load] event costs: {events}", flush=True)
        for name in names:  # one layer's steady-state conversion, for the prediction
            layer_seconds[name] = time_strategy(shape, name, device)["seconds"]
            torch.cuda.empty_cache()
    rows = []
    for max_split, pool in plan.LOAD_CONFIGS:
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
            plan.record(rows, row)
            print(f"[load] {_load_line(row)}", flush=True)
    # The OOM message's wording differs between the allocator and its model: not a finding.
    ok = all(
        "error" not in row and set(row.get("differences", ())) <= {"oom_message"} for row in rows
    )
    return {
        "ok": ok,
        "shape": plan.LOAD_SHAPE,
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
