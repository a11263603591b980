"""The quantized catalog's figures per strategy, as docs/formats.md shows them.

``python -m moe_convert.cli.report`` (or ``... report peaks``) prints the peak table: per
catalog model and TP, the layer's bytes and each strategy's peak (``REGISTRY[name].peak``,
exact on ``meta``; tests/test_quant_memory.py), upstream first. Nothing is allocated. A table
name it does not know is a one-line usage error (exit 2).
``python -m moe_convert.cli.report strategies`` prints every record's formulas;
``python -m moe_convert.cli.report replay`` prints the sleep-mode load table
(``replay.replay_load``, vLLM's ``max_split_size_mb`` 20): the reserved peak and growth per
layer on an unbounded device, and the layer that runs out of memory on a GB200 and an H200 (about
two minutes on 2 CPU cores: the upstream paths' traces have thousands of events);
``python -m moe_convert.cli.report rankload`` the load without sleep mode
(``replay.rank_load``) on the same two devices: its driver calls and OOM layer.
"""

from __future__ import annotations

import sys

from ..formats.bf16.format import BF16
from ..formats.catalog import catalog_shapes
from ..formats.records import FORMATS
from ..formats.registry import REGISTRY
from ..load.replay import rank_load, replay_load
from ..load.wholemodel import LOAD_DEVICES, VLLM_LOAD_MAX_SPLIT_MB, RankLoad
from ..units import format_bytes
from .args import Parser

__all__ = ["peaks_markdown", "rank_load_markdown", "replay_markdown", "strategies_markdown"]

#: The column order: the upstream path, then this library's.
KINDS = ("legacy", "preallocated", "inplace", "fast")


def _quantized_shapes() -> list:
    """The catalog's shapes of every format but BF16, at their listed TPs."""
    return [shape for shape in catalog_shapes() if shape.format != BF16.name]


def peaks_markdown() -> str:
    """One row per quantized catalog shape: its layer bytes and every kind's peak (MiB)."""
    lines = [
        "| model / TP | format | layer (weights + scales + biases) | "
        + " | ".join(f"`-{kind}` peak" for kind in KINDS)
        + " |",
        "|---|---|---|" + "---|" * len(KINDS),
    ]
    for shape in _quantized_shapes():
        peaks = [REGISTRY[f"{shape.format}-{kind}"].peak.evaluate(shape) for kind in KINDS]
        cells = [format_bytes(n, unit="MiB", digits=1) for n in (shape.layer_bytes, *peaks)]
        lines.append(f"| {shape.label} | {shape.format} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def strategies_markdown() -> str:
    """Every quantized strategy's record: where it comes from, its result and its formulas."""
    lines = [
        "| strategy | from | result | peak transient | traffic | launches |",
        "|---|---|---|---|---|---|",
    ]
    records = sorted((r for r in REGISTRY.values() if r.format != BF16.name), key=lambda r: r.name)
    for record in records:
        name = record.name
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
    for shape in _quantized_shapes():
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
    for shape in _quantized_shapes():
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


#: The tables by name, the first the default.
TABLES = {
    "peaks": peaks_markdown,
    "replay": replay_markdown,
    "rankload": rank_load_markdown,
    "strategies": strategies_markdown,
}


def main(argv: list[str] | None = None) -> int:
    """``python -m moe_convert.cli.report [TABLE]``: one table of ``TABLES`` on stdout; a name
    not among them is a one-line usage error (exit 2)."""
    parser = Parser(prog="python -m moe_convert.cli.report", description=__doc__.split("\n")[0])
    parser.add_argument("table", nargs="?", choices=list(TABLES), default="peaks")
    print(TABLES[parser.parse_args(argv).table](), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
