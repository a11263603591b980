"""The quantized catalog's figures per strategy, as docs/formats.md shows them.

``python -m moe_convert.cli.quant_report`` prints the peak table: per catalog model and TP, the
layer's bytes and each strategy's peak (``QUANT_STRATEGIES[name].peak``, exact on ``meta``;
tests/test_quant_memory.py), upstream first. Nothing is allocated.
``python -m moe_convert.cli.quant_report strategies`` prints every record's formulas;
``python -m moe_convert.cli.quant_report replay`` prints the sleep-mode load table
(``replay.replay_load``, vLLM's ``max_split_size_mb`` 20): the reserved peak and growth per
layer on an unbounded device, and the layer that runs out of memory on a GB200 and an H200 (about
two minutes on 2 CPU cores: the upstream paths' traces have thousands of events);
``python -m moe_convert.cli.quant_report rankload`` the load without sleep mode
(``replay.rank_load``) on the same two devices: its driver calls and OOM layer.
"""

from __future__ import annotations

import sys

from ..formats.quant.catalog import quant_catalog_shapes
from ..formats.quant.registry import QUANT_STRATEGIES
from ..formats.records import FORMATS
from ..load.replay import rank_load, replay_load
from ..load.wholemodel import LOAD_DEVICES, VLLM_LOAD_MAX_SPLIT_MB, RankLoad
from ..units import format_bytes

__all__ = ["peaks_markdown", "rank_load_markdown", "replay_markdown", "strategies_markdown"]

#: The column order: the upstream path, then this library's.
KINDS = ("legacy", "preallocated", "inplace", "fast")


def peaks_markdown() -> str:
    """One row per quantized catalog shape: its layer bytes and every kind's peak (MiB)."""
    lines = [
        "| model / TP | format | layer (weights + scales + biases) | "
        + " | ".join(f"`-{kind}` peak" for kind in KINDS)
        + " |",
        "|---|---|---|" + "---|" * len(KINDS),
    ]
    for shape in quant_catalog_shapes():
        peaks = [QUANT_STRATEGIES[f"{shape.format}-{kind}"].peak.evaluate(shape) for kind in KINDS]
        cells = [format_bytes(n, unit="MiB", digits=1) for n in (shape.layer_bytes, *peaks)]
        lines.append(f"| {shape.label} | {shape.format} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def strategies_markdown() -> str:
    """Every quantized strategy's record: where it comes from, its result and its formulas."""
    lines = [
        "| strategy | from | result | peak transient | traffic | launches |",
        "|---|---|---|---|---|---|",
    ]
    for name, record in sorted(QUANT_STRATEGIES.items()):
        result = "new tensors"
        if record.inplace:
            result = "in place (biases new)" if FORMATS[record.format].has_bias else "in place"
        figures = " | ".join(
            "not stated" if f is None else f.describe("`")
            for f in (record.peak, record.traffic, record.launches)
        )
        lines.append(f"| `{name}` | {record.origin} | {result} | {figures} |")
    return "\n".join(lines) + "\n"


def replay_markdown() -> str:
    """One row per quantized catalog shape and strategy: the replayed sleep-mode load of the
    model's MoE layers (other weights left out) at ``max_split_size_mb`` 20."""
    lines = [
        "| model / TP | strategy | peak reserved | growth per layer | "
        + " | ".join(f"{device} ({format_bytes(n)})" for device, n in LOAD_DEVICES.items())
        + " |",
        "|---|---|---|---|" + "---|" * len(LOAD_DEVICES),
    ]
    for shape in quant_catalog_shapes():
        for kind in KINDS:
            name = f"{shape.format}-{kind}"
            loads = [
                replay_load(
                    shape,
                    name,
                    max_split_size_mb=VLLM_LOAD_MAX_SPLIT_MB,
                    pool="sleep",
                    device_bytes=device_bytes,
                )
                for device_bytes in (None, *LOAD_DEVICES.values())
            ]
            fits = [_fits(load) for load in loads[1:]]
            lines.append(
                f"| {shape.label} | `{name}` | {format_bytes(loads[0].peak_reserved_bytes)} | "
                f"{format_bytes(loads[0].reserved_growth_per_layer_bytes)} | "
                + " | ".join(fits)
                + " |"
            )
    return "\n".join(lines) + "\n"


def _fits(load: RankLoad) -> str:
    return "fits" if load.oom_layer is None else f"OOM at layer {load.oom_layer}"


def rank_load_markdown() -> str:
    """One row per quantized catalog shape and strategy: the load without sleep mode
    (``replay.rank_load``) on each of ``LOAD_DEVICES``: whether it fits (else the layer that runs
    out of memory) and its driver calls: ``cudaMalloc`` / ``cudaFree`` / refused ``cudaMalloc`` /
    full cache releases (retries), the figures of each format's ``RankLoadGB200`` and
    ``RankLoadH200`` (``benchmarks/formats.py``)."""
    lines = [
        "| model / TP | strategy | "
        + " | ".join(
            f"{device} ({format_bytes(n)}) | malloc / free / refused / retries"
            for device, n in LOAD_DEVICES.items()
        )
        + " |",
        "|---|---|" + "---|---|" * len(LOAD_DEVICES),
    ]
    for shape in quant_catalog_shapes():
        for kind in KINDS:
            name = f"{shape.format}-{kind}"
            cells = []
            for device_bytes in LOAD_DEVICES.values():
                load = rank_load(shape, name, device_bytes)
                calls = (
                    load.num_device_alloc,
                    load.num_device_free,
                    load.num_device_alloc_failed,
                    load.num_alloc_retries,
                )
                cells += [_fits(load), " / ".join(f"{n:,}" for n in calls)]
            lines.append(f"| {shape.label} | `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    tables = {
        "replay": replay_markdown,
        "rankload": rank_load_markdown,
        "strategies": strategies_markdown,
    }
    print(tables.get(" ".join(sys.argv[1:]), peaks_markdown)(), end="")
