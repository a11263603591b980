"""Step 4, ``load``: a quantized rank's load (``plan.QUANT_LOAD_SHAPE``) for each of
``plan.QUANT_LOAD_STRATEGIES`` under vLLM's setting, then vLLM #45589's whole rank for each of
``plan.LOAD_STRATEGIES`` x ``plan.LOAD_CONFIGS``, each run on CUDA against the same load
replayed; the allocator events' costs measured and each load predicted from them.
"""

from __future__ import annotations

import dataclasses

from . import plan
from .timing import time_strategy


def _loads(names: list[str]) -> list[tuple[object, str, int | None, str, int]]:
    """(shape, strategy, max_split_size_mb, pool, ballast bytes) of every load, in the order they
    run: the quantized rank's (vLLM's setting, the default pool, its MoE weights alone), then
    vLLM #45589's BF16 rank's ``names`` per configuration of ``plan.LOAD_CONFIGS``, after the
    ballast that brings that rank to its 109.61 GiB (``PR45589_BALLAST_BYTES``)."""
    from moe_convert.load.wholemodel import PR45589_BALLAST_BYTES

    quantized = plan.shape(plan.QUANT_LOAD_SHAPE)
    bf16 = plan.shape(plan.LOAD_SHAPE)
    return [
        (quantized, name, plan.MAX_SPLIT_MB, "default", 0) for name in plan.QUANT_LOAD_STRATEGIES
    ] + [
        (bf16, name, max_split, pool, PR45589_BALLAST_BYTES)
        for max_split, pool in plan.LOAD_CONFIGS
        for name in names
    ]


def step_load(dry_run: bool) -> dict:
    """Every load of ``_loads`` run (``run_load``) and replayed for the device it found
    (``replay_load``; the dry run replays for ``DEVICE_141GB_BYTES``); the event costs measured
    and each load predicted from them (``moe_convert.load.loadtime``)."""
    from moe_convert import REGISTRY
    from moe_convert.load.loadtime import measure_event_costs, predict_replayed
    from moe_convert.load.replay import replay_load
    from moe_convert.load.wholemodel import DEVICE_141GB_BYTES, PR45589_BALLAST_BYTES, run_load

    loads = _loads([name for name in plan.LOAD_STRATEGIES if name in REGISTRY])
    events, layer_seconds = None, {}
    if not dry_run:
        device = plan.cuda_device()
        events = measure_event_costs()
        print(f"[load] event costs: {events}", flush=True)
        # one layer's steady-state conversion of each, to predict from: its index caches are
        # warmed in a pool of their own (table.warm_layer_strategy), so nothing of it serves a
        # load (the H200 run at 7f04b26, where they were warmed in the default pool: 94 of a
        # load's cudaMalloc calls), and run_load empties the allocator's cache first
        for shape, name, *_ in loads:
            seconds = layer_seconds.setdefault(shape.label, {})
            if name not in seconds:
                seconds[name] = time_strategy(shape, name, device)["seconds"]
    rows = []
    for shape, name, max_split, pool, ballast in loads:
        row = {"shape": shape.label, "strategy": name, "max_split_mb": max_split, "pool": pool}
        try:
            ran = (
                None
                if dry_run
                else run_load(
                    shape,
                    name,
                    max_split_size_mb=max_split,
                    pool=pool,
                    other_weights_bytes=ballast,
                )
            )
            if ran is not None:
                row["run"] = dataclasses.asdict(ran)
            # the load replayed for the device the run found (the dry run: a 141 GB device)
            replayed = replay_load(
                shape,
                name,
                max_split_size_mb=max_split,
                pool=pool,
                device_bytes=DEVICE_141GB_BYTES if ran is None else ran.device_bytes,
                other_weights_bytes=ballast,
            )
            row["replayed"] = dataclasses.asdict(replayed)
            if ran is not None:  # every field both sides know: {field: [replayed, run]}
                row["differences"] = {
                    field: list(pair) for field, pair in replayed.differences(ran).items()
                }
            if events is not None:
                row["predicted_seconds"] = predict_replayed(
                    replayed, layer_seconds[shape.label][name], events
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
    head = f"{row['shape']} {row['strategy']} max_split {row['max_split_mb']} {row['pool']}: "
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
