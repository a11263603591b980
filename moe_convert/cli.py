"""``python -m moe_convert``: the catalog, verification against FlashInfer, measurement, replay."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from . import reference
from .shapes import CATALOG, LayerShape, catalog_shapes, layer_shape, shape_from_hf_config
from .checks import check_weights
from .strategies import INPLACE, STRATEGIES, convert
from .memory import strategy_allocator_memory, strategy_cuda_memory, strategy_memory
from .timing import measure_roofline
from .traffic import strategy_traffic
from .wholemodel import WholeModelTime
from .allocator import POOLS, MiB
from .replay import ReplayResult, simulate
from .engines import ENGINES, check_engine

__all__ = ["main", "resolve_shape"]


def resolve_shape(args: argparse.Namespace) -> LayerShape:
    """The layer shape named by ``--model``/``--tp`` (catalog name or config.json path) or by
    explicit ``--experts --hidden --intermediate``, with ``--experts`` limiting a model's experts."""
    if args.model is None:
        if None in (args.experts, args.hidden, args.intermediate):
            raise SystemExit("give --model NAME [--tp N], or all of --experts, --hidden, --intermediate")
        return LayerShape("explicit", 1, args.experts, args.hidden, args.intermediate, 1, args.gated)
    if args.model in CATALOG:
        shape = layer_shape(args.model, args.tp)
    else:
        shape = shape_from_hf_config(args.model, args.tp)
    return shape.with_experts(args.experts) if args.experts else shape


def _add_shape_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help=f"catalog name ({', '.join(CATALOG)}) or a config.json path")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--experts", type=int, help="number of experts (limits a catalog model's)")
    parser.add_argument("--hidden", type=int, help="hidden size H (explicit shape)")
    parser.add_argument("--intermediate", type=int, help="intermediate size I per rank (explicit shape)")
    parser.add_argument("--no-gated", dest="gated", action="store_false",
                        help="non-gated activation (ReLU2): w13 is [E, I, H]")


def _strategies(names: str) -> list[str]:
    if names == "all":
        return sorted(STRATEGIES)
    chosen = names.split(",")
    unknown = [n for n in chosen if n not in STRATEGIES]
    if unknown:
        raise SystemExit(f"unknown strategy {', '.join(unknown)}; valid: all, {', '.join(sorted(STRATEGIES))}")
    return chosen


def cmd_shapes(args: argparse.Namespace) -> int:
    print(f"{'model':<18} {'tp':>2}  {'w13 per rank':<20} {'w2 per rank':<20} {'MiB/layer':>9} "
          f"{'layers':>6} {'GiB/rank':>8}  valid")
    for shape in catalog_shapes():
        status = "yes" if shape.valid else f"no: {shape.invalid_reason}"
        print(f"{shape.model:<18} {shape.tp:>2}  {str(list(shape.w13_shape)):<20} "
              f"{str(list(shape.w2_shape)):<20} {shape.layer_bytes / MiB:>9.1f} "
              f"{shape.moe_layers:>6} {shape.model_bytes / 2**30:>8.2f}  {status}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    if reference.AVAILABLE:
        oracle_name = "FlashInfer's helpers"
        oracle = lambda w13, w2: reference.flashinfer_reference(w13, w2, gated=shape.gated)  # noqa: E731
    else:
        oracle_name = "legacy (flashinfer-python is not installed)"
        oracle = lambda w13, w2: convert(w13.clone(), w2.clone(), strategy="legacy", gated=shape.gated)  # noqa: E731
    print(f"verify {shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)}, "
          f"gated={shape.gated}, device {args.device}; against {oracle_name}")
    if not shape.valid:
        print(f"  note: the kernel cannot take this shape: {shape.invalid_reason}")
    meta13, meta2 = (torch.empty(s, dtype=torch.bfloat16, device="meta") for s in (shape.w13_shape, shape.w2_shape))
    try:  # a shape that cannot be converted gets the check's message, not a traceback from the oracle
        check_weights(meta13, meta2, gated=shape.gated)
    except ValueError as err:
        raise SystemExit(f"verify {shape.label}: cannot convert this shape: {err}") from None
    w13, w2 = reference.random_weights(shape.w13_shape, shape.w2_shape, seed=args.seed, device=args.device)
    want13, want2 = oracle(w13, w2)
    failed = 0
    for name in _strategies(args.strategy):
        in13, in2 = w13.clone(), w2.clone()
        got13, got2 = convert(in13, in2, strategy=name, gated=shape.gated)
        same = [torch.equal(got.view(torch.uint8), want.view(torch.uint8))
                for got, want in ((got13, want13), (got2, want2))]
        aliased = got13.data_ptr() == in13.data_ptr() and got2.data_ptr() == in2.data_ptr()
        alias_ok = aliased == (name in INPLACE)
        ok = all(same) and alias_ok
        failed += not ok
        print(f"  {name:<16} w13 {'ok' if same[0] else 'MISMATCH'}  w2 {'ok' if same[1] else 'MISMATCH'}"
              f"  {'in place' if aliased else 'new tensors'}{'' if alias_ok else ' (WRONG: contract says otherwise)'}")
    print("all byte-identical" if not failed else f"{failed} strategies FAILED")
    return 1 if failed else 0


def _measure_record(shape: LayerShape, name: str, device: str, repeats: int,
                    threads: int | None) -> dict:
    """Every figure of one strategy on ``shape``: dispatch-level memory everywhere; on cpu/cuda the
    roofline and whole-model time; on cpu the allocator-level peak; on cuda the caching allocator's."""
    memory = strategy_memory(shape, name, device=device)
    work = strategy_traffic(shape, name)  # on meta: exact and free on any device
    record = {"strategy": name, "model": shape.model, "tp": shape.tp, "device": device,
              "experts": shape.experts, "layer_bytes": shape.layer_bytes,
              "peak_transient_bytes": memory.peak_bytes, "allocations": memory.allocations,
              "traffic_bytes": work.traffic_bytes, "launches": work.launches,
              "traffic_ratio": work.traffic_bytes / (2 * shape.layer_bytes)}
    if torch.device(device).type == "meta":
        return record
    roofline = measure_roofline(shape, name, device=device, repeats=repeats, threads=threads)
    whole = WholeModelTime(shape, roofline)
    record.update(seconds_median=roofline.strategy_time.median, seconds_iqr=roofline.strategy_time.iqr,
                  copy_seconds_median=roofline.copy_time.median, copy_ratio=roofline.copy_ratio,
                  gbps=roofline.gbps, copy_gbps=roofline.copy_gbps, repeats=repeats,
                  moe_layers=shape.moe_layers, whole_model_seconds=whole.seconds,
                  whole_model_copy_seconds=whole.copy_seconds)
    if roofline.threads is not None:
        allocator = strategy_allocator_memory(shape, name)
        record.update(threads=roofline.threads, minor_faults=roofline.minor_faults,
                      allocator_peak_bytes=allocator.peak_bytes,
                      allocator_allocations=allocator.allocations)
    elif torch.device(device).type == "cuda":
        cuda = strategy_cuda_memory(shape, name)
        record.update(cuda_peak_allocated_bytes=cuda.peak_allocated_bytes,
                      cuda_peak_reserved_bytes=cuda.peak_reserved_bytes,
                      cuda_requested_peak_bytes=cuda.requested_peak_bytes,
                      cuda_num_alloc_retries=cuda.num_alloc_retries, cuda_num_ooms=cuda.num_ooms)
    return record


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", MiB), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _seconds(s: float) -> str:
    # 4 significant digits: 3 would print 999.6 ms as "1e+03 ms"
    for unit, size in (("s", 1.0), ("ms", 1e-3)):
        if s >= size:
            return f"{s / size:.4g} {unit}"
    return f"{s / 1e-6:.4g} us"


# (record key, column header, formatter); a column shows when the records have the key.
_MEASURE_COLUMNS = (
    ("strategy", "strategy", str),
    ("peak_transient_bytes", "peak", _bytes),
    ("allocations", "allocs", str),
    ("traffic_ratio", "traffic", "{:.3f}".format),
    ("launches", "launches", str),
    ("allocator_peak_bytes", "alloc. peak", _bytes),
    ("cuda_peak_reserved_bytes", "reserved", _bytes),
    ("cuda_num_alloc_retries", "retries", str),
    ("seconds_median", "median", _seconds),
    ("seconds_iqr", "iqr", _seconds),
    ("copy_seconds_median", "copy", _seconds),
    ("copy_ratio", "x copy", "{:.2f}".format),
    ("gbps", "GB/s", "{:.2f}".format),
    ("minor_faults", "faults", str),
    ("whole_model_seconds", "model", _seconds),
)


def _print_measure_table(records: list[dict]) -> None:
    columns = [c for c in _MEASURE_COLUMNS if c[0] in records[0]]
    rows = [[header for _, header, _ in columns]]
    rows += [[fmt(record[key]) for key, _, fmt in columns] for record in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))))


def cmd_measure(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    kind = torch.device(args.device).type
    if kind not in ("meta", "cpu", "cuda"):
        raise SystemExit(f"--device {args.device!r}: measure runs on meta, cpu or cuda")
    names = _strategies(args.strategy)
    if not args.json:
        print(f"measure {shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)} "
              f"({_bytes(shape.layer_bytes)} per layer, {shape.moe_layers} MoE layers), "
              f"device {args.device}")
        print("peak: dispatch-level peak transient bytes (exact), allocs: new storages; "
              "traffic: bytes read + written / (2 x layer bytes), launches: data-moving ops")
        if kind == "cpu":
            print("alloc. peak: the CPU allocator's peak, kernel temporaries included; "
                  "faults: minor page faults per call")
        if kind != "meta":
            print("x copy: median time / same-size copy_ timed interleaved; GB/s: 2 x layer bytes / "
                  "median; model: median x MoE layers"
                  + (f" (of {shape.experts}-expert layers)" if args.experts else ""))
    records = []
    for i, name in enumerate(names, 1):
        if kind != "meta":
            print(f"[measure] {name} ({i}/{len(names)}) on {args.device} ...", file=sys.stderr, flush=True)
        record = _measure_record(shape, name, args.device, args.repeats, args.threads)
        records.append(record)
        if args.json:
            print(json.dumps(record), flush=True)
    if not args.json:
        _print_measure_table(records)
    return 0


def _max_splits(text: str) -> list[int | None]:
    """``20,25,none`` -> ``[20, 25, None]`` (None: unlimited, PyTorch's default)."""
    values: list[int | None] = []
    for item in text.split(","):
        if item.strip().lower() == "none":
            values.append(None)
        elif item.strip().isdigit() and int(item) >= 20:
            values.append(int(item))
        else:
            raise SystemExit(f"--max-split-mb: {item!r} is neither an integer >= 20 (PyTorch's "
                             "smallest max_split_size_mb) nor 'none'; e.g. 20,25,32,64,128,none")
    return values


def _simulate_record(result: ReplayResult) -> dict:
    return {"strategy": result.strategy, "shape": result.label, "max_split_mb": result.max_split_mb,
            "pool": result.pool, "device_bytes": result.device_bytes,
            "other_weights_bytes": result.other_weights_bytes, "layers": result.layers,
            "oom": result.oom, "oom_layer": result.oom_layer, "oom_message": result.oom_message,
            "loaded_reserved_bytes": result.loaded_reserved_bytes,
            "peak_reserved_bytes": result.peak_reserved_bytes,
            "peak_allocated_bytes": result.peak_allocated_bytes,
            "reserved_growth_per_layer_bytes": result.reserved_growth_per_layer_bytes,
            "final_reserved_bytes": result.final_reserved_bytes,
            "stranded_segments": result.stranded_segments,
            "num_alloc_retries": result.num_alloc_retries, "num_ooms": result.num_ooms}


def _print_simulate_tables(results: list[ReplayResult], max_splits: list[int | None]) -> None:
    columns = ["none" if m is None else str(m) for m in max_splits]
    by_key = {(r.strategy, r.max_split_mb): r for r in results}
    strategies = list(dict.fromkeys(r.strategy for r in results))
    tables = (
        ("peak reserved, or the layer whose conversion ran out of memory",
         lambda r: f"OOM layer {r.oom_layer}" if r.oom else _bytes(r.peak_reserved_bytes)),
        ("reserved growth per layer (steady state, median)",
         lambda r: "-" if r.reserved_growth_per_layer_bytes is None
         else _bytes(r.reserved_growth_per_layer_bytes)),
    )
    for title, cell in tables:
        rows = [["max_split_size_mb"] + columns]
        rows += [[name] + [cell(by_key[name, m]) for m in max_splits] for name in strategies]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        print(f"\n{title}")
        for row in rows:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                            for i, (c, w) in enumerate(zip(row, widths))))


def cmd_simulate(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    max_splits = _max_splits(args.max_split_mb)
    if args.device_gib <= 0 or args.other_weights_gib < 0:
        raise SystemExit(f"--device-gib ({args.device_gib}) must be > 0 and --other-weights-gib "
                         f"({args.other_weights_gib}) >= 0")
    device_bytes, other_bytes = int(args.device_gib * 2**30), int(args.other_weights_gib * 2**30)
    try:
        results = simulate(shape, _strategies(args.strategy), max_splits, pool=args.pool,
                           device_bytes=device_bytes, other_weights_bytes=other_bytes)
    except ValueError as error:  # the weights alone do not fit
        raise SystemExit(str(error)) from None
    if args.json:
        for result in results:
            print(json.dumps(_simulate_record(result)))
        return 0
    print(f"simulate {shape.label}: {shape.moe_layers} MoE layers x {_bytes(shape.layer_bytes)} "
          f"+ {_bytes(other_bytes)} other weights = {_bytes(results[0].loaded_reserved_bytes)} "
          f"reserved once loaded; device {_bytes(device_bytes)}; pool {args.pool}")
    _print_simulate_tables(results, max_splits)
    return 0


def cmd_engines(args: argparse.Namespace) -> int:
    failed = 0
    for check in (check_engine(engine, device=args.device) for engine in ENGINES):
        engine = check.engine
        print(f"{engine.strategy:<17} {engine.distribution} {check.version}\n"
              f"  calls {engine.module}.{engine.function} (transcribed as {engine.transcription!r})")
        if check.identical is not None:
            print(f"  {'byte-identical' if check.identical else 'DIFFERS or FAILED'}: {check.detail}")
        failed += check.identical is False
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moe_convert", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("shapes", help="print the model-shape catalog")
    p.set_defaults(func=cmd_shapes)

    p = sub.add_parser("verify", help="check every strategy byte for byte against FlashInfer's helpers")
    _add_shape_args(p)
    p.add_argument("--strategy", default="all", help="NAME[,NAME...] or all (default)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("measure", help="peak transient memory, time against a same-size copy_, whole-model time")
    _add_shape_args(p)
    p.add_argument("--strategy", default="all", help="NAME[,NAME...] or all (default)")
    p.add_argument("--device", default="meta", help="meta (memory only, full size for free), cpu or cuda")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per strategy (default 5)")
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores; 1 is steadier on a "
                   "shared machine, where a descheduled OpenMP thread stalls the others)")
    p.add_argument("--json", action="store_true", help="one JSON object per strategy per line")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser(
        "simulate",
        help="replay a whole model's load and conversion through a model of the CUDA caching "
             "allocator: OOM layer, peak reserved, reserved growth per layer",
    )
    _add_shape_args(p)
    p.add_argument("--strategy", default="all", help="NAME[,NAME...] or all (default)")
    p.add_argument("--max-split-mb", default="20",
                   help="max_split_size_mb values, comma-separated, 'none' = unlimited "
                        "(default 20: what vLLM sets while loading)")
    p.add_argument("--device-gib", type=float, required=True,
                   help="GiB the device lends to PyTorch during the load (seed 000: 139.5)")
    p.add_argument("--other-weights-gib", type=float, default=0.0,
                   help="the model's non-MoE weights per rank, GiB (default 0; Qwen3-235B TP4: 3.86)")
    p.add_argument("--pool", choices=POOLS, default="sleep",
                   help="sleep: vLLM's sleep-mode pool, the first failed raw allocation is an OOM "
                        "(default); default: PyTorch's default pools, cached segments released on failure")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per strategy x max-split value per line")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("engines", help="the installed engines' converters: versions, the function each "
                       "adapter calls, byte-identical to FlashInfer's helpers or not (exit 1 if not)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.set_defaults(func=cmd_engines)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
