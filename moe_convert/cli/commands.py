"""``python -m moe_convert``: the catalog, verification against FlashInfer, measurement, replay,
a rank's refit.

``replay`` replays the rank load (every layer loaded, then each converted) through the allocator
model (``replay.replay_load``); its old name ``simulate`` still works.

Every argument is checked before any work starts. A user error ends as one line on stderr,
``python -m moe_convert CMD: error: ...`` (what was wrong, the value, what is accepted), with
exit status 2: argparse's own errors, the argument types (``ArgumentTypeError``) and
``UsageError`` for rules that involve several arguments (both in ``moe_convert.cli.args``),
which ``main`` hands to the subcommand's ``parser.error``. Anything else is a bug and shows
its traceback.

To add a subcommand: a ``cmd_NAME(args) -> int`` handler and ``add_command(...)`` in
``build_parser``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from ..formats.bf16.engines import ENGINES
from ..formats.catalog import catalog_shapes
from ..formats.engines import check_engine, registered_form
from ..formats.preparations import PREPARATIONS
from ..formats.records import FORMATS
from ..formats.registry import (
    result_in_input,
    strategies,
    strategies_markdown,
    update_markdown,
)
from ..formats.shape import LayerShape
from ..formats.table import (
    convert,
    layer_tensors,
    reference_conversion,
    strategy_input,
    strategy_record,
)
from ..load.allocator import POOLS, MiB
from ..load.refit import (
    REFITS,
    documented_reload_safety,
    documented_reversibility,
    refit_call,
    reload_safety,
    reversibility,
)
from ..load.refit_replay import RefitReplay, replay_refits
from ..load.replay import WeightsDoNotFit
from ..load.wholemodel import DEVICE_EVENTS, VLLM_LOAD_MAX_SPLIT_MB, RankLoad
from ..measuring.memory import (
    measure_memory,
    strategy_allocator_memory,
    strategy_cuda_memory,
    strategy_memory,
)
from ..measuring.timing import time_layer
from ..measuring.traffic import measure_traffic, strategy_traffic
from ..units import format_bytes as _bytes
from ..units import format_seconds as _seconds
from .args import (
    Parser,
    UsageError,
    add_command,
    add_work_args,
    bounded_int,
    check_fits,
    device_choice,
    gib_amount,
    max_split_list,
    resolve_shape,
    resolve_shapes,
    resolve_strategies,
)

__all__ = ["build_parser", "main"]


def _progress(steps: int, args: argparse.Namespace, desc: str) -> tqdm:
    """A progress bar of ``steps`` on stderr (``bar.set_postfix_str(step)``, ``bar.update()``);
    off with --quiet, and by tqdm itself when stderr is not a terminal."""
    return tqdm(total=steps, desc=desc, disable=True if args.quiet else None, leave=False)


def _kernel_note(shape: LayerShape) -> str:
    return f"  note: the SM100 kernel cannot take this shape: {shape.invalid_reason}"


def cmd_shapes(args: argparse.Namespace) -> int:
    print(
        f"{'model':<21} {'tp':>2}  {'format':<8} {'w13 per rank':<20} {'w2 per rank':<20} "
        f"{'MiB/layer':>9} {'layers':>6} {'GiB/rank':>8}  valid"
    )
    for shape in catalog_shapes():
        status = "yes" if shape.valid else f"no: {shape.invalid_reason}"
        print(
            f"{shape.model:<21} {shape.tp:>2}  {shape.format:<8} "
            f"{str(list(shape.w13_shape)):<20} {str(list(shape.w2_shape)):<20} "
            f"{shape.layer_bytes / MiB:>9.1f} {shape.moe_layers:>6} "
            f"{shape.model_bytes / 2**30:>8.2f}  {status}"
        )
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    if args.update:
        path = Path(args.update)
        try:
            text = path.read_text()
            updated = update_markdown(text, documented_reload_safety, documented_reversibility)
        except (OSError, ValueError) as error:
            raise UsageError(f"argument --update: {path}: {error}") from None
        if updated != text:
            path.write_text(updated)
        print(f"{path}: strategies table {'updated' if updated != text else 'already up to date'}")
    elif args.markdown:
        print(strategies_markdown(documented_reload_safety, documented_reversibility), end="")
    else:
        for fmt in FORMATS.values():
            here = strategies(fmt.name)
            records = [*here.values(), *strategies(fmt.name, available=False).values()]
            for record in sorted(records, key=lambda r: r.name):
                needs = "" if record.name in here else f"  (not here: needs {record.needs})"
                result = "views of the input" if record.inplace else "new tensors"
                print(f"{record.name:<22} {fmt.name:<8} {result:<19} {record.origin}{needs}")
                print(f"    {'reload':<15} {reload_safety(record.name)}")
                print(f"    {'inverse':<15} {reversibility(record.name)}")
                for label, formula in (
                    ("peak transient", record.peak),
                    ("traffic", record.traffic),
                    ("launches", record.launches),
                ):
                    print(f"    {label:<15} {formula if formula is not None else 'not stated'}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    names = resolve_strategies(shape, args.strategy)
    check_fits(shape, args.device, 3)  # the input, the expected output, a clone converted
    oracle_name, oracle = reference_conversion(shape)
    print(
        f"verify {shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)}, "
        f"gated={shape.gated}, device {args.device}; against {oracle_name}",
        flush=True,
    )
    if not shape.valid:
        print(_kernel_note(shape), flush=True)
    failed, width = 0, max(16, *map(len, names))
    with _progress(len(names) + 1, args, "verify") as bar:
        bar.set_postfix_str("reference")
        layer = layer_tensors(shape, args.device, seed=args.seed)
        want = oracle(layer)
        bar.update()
        for name in names:
            bar.set_postfix_str(name)
            taken, expected = layer, want
            if strategy_record(shape, name).takes != shape.format:  # a BF16 layer in
                taken = strategy_input(shape, name, args.device, seed=args.seed)
                expected = reference_conversion(shape, name)[1](taken)
            given = {key: t.clone() for key, t in taken.items()}
            got = convert(given, strategy=name, gated=shape.gated)
            same = {
                key: torch.equal(got[key].view(torch.uint8), expected[key].view(torch.uint8))
                for key in expected
            }
            # in place: the weights come back in the input's storage (a quantized layer's
            # biases come back float32, in new tensors)
            aliased = result_in_input(given, got)
            alias_ok = aliased == strategy_record(shape, name).inplace
            ok = all(same.values()) and alias_ok
            failed += not ok
            bar.write(
                f"  {name:<{width}} "
                + "  ".join(f"{key} {'ok' if good else 'MISMATCH'}" for key, good in same.items())
                + f"  {'in place' if aliased else 'new tensors'}"
                + f"{'' if alias_ok else ' (WRONG: contract says otherwise)'}",
                file=sys.stdout,
            )
            bar.update()
    print("all byte-identical" if not failed else f"{failed} strategies FAILED")
    return 1 if failed else 0


def _measure_record(
    shape: LayerShape, name: str, device: str, repeats: int, threads: int | None
) -> dict:
    """Every figure of one strategy on ``shape``: dispatch-level memory everywhere; on cpu/cuda the
    layer's timing against a copy and the whole-model time derived from it (``time_layer``); on cpu
    the allocator-level peak; on cuda the caching allocator's."""
    memory = strategy_memory(shape, name, device=device)
    # on meta: exact and free on any device; where the strategy cannot run there (FlashInfer's
    # helpers), on the device itself
    on_meta = not strategy_record(shape, name).not_on_meta
    work = strategy_traffic(shape, name, device="meta" if on_meta else device)
    record = {
        "strategy": name,
        "model": shape.model,
        "tp": shape.tp,
        "ep": shape.ep,
        "format": shape.format,
        "device": device,
        "experts": shape.experts,
        "layer_bytes": shape.layer_bytes,
        "peak_transient_bytes": memory.peak_bytes,
        "allocations": memory.allocations,
        "traffic_bytes": work.traffic_bytes,
        "launches": work.launches,
        "traffic_ratio": work.traffic_bytes / (2 * shape.layer_bytes),
    }
    if torch.device(device).type == "meta":
        return record
    timed = time_layer(shape, name, device=device, repeats=repeats, threads=threads)
    record.update(
        seconds_median=timed.seconds,
        seconds_iqr=timed.strategy_time.iqr,
        copy_seconds_median=timed.copy_time.median,
        copy_ratio=timed.copy_ratio,
        gbps=timed.gbps,
        copy_gbps=timed.copy_gbps,
        repeats=repeats,
        moe_layers=shape.moe_layers,
        whole_model_seconds=timed.whole_model_seconds,
        whole_model_copy_seconds=timed.whole_model_copy_seconds,
    )
    if timed.threads is not None:
        allocator = strategy_allocator_memory(shape, name)
        record.update(
            threads=timed.threads,
            minor_faults=timed.minor_faults,
            allocator_peak_bytes=allocator.peak_bytes,
            allocator_allocations=allocator.allocations,
        )
    elif torch.device(device).type == "cuda":
        cuda = strategy_cuda_memory(shape, name)
        record.update(
            cuda_peak_allocated_bytes=cuda.peak_allocated_bytes,
            cuda_peak_reserved_bytes=cuda.peak_reserved_bytes,
            cuda_requested_peak_bytes=cuda.requested_peak_bytes,
            cuda_num_alloc_retries=cuda.num_alloc_retries,
            cuda_num_ooms=cuda.num_ooms,
        )
    return record


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
    _print_rows(rows)


def _print_rows(rows: list[list[str]]) -> None:
    """Print ``rows`` (the first is the header) as columns: the first left-aligned, the others
    right-aligned, each as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def cmd_measure(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    names = resolve_strategies(shape, args.strategy)
    kind = torch.device(args.device).type
    if args.threads is not None and kind != "cpu":
        raise UsageError(
            f"argument --threads: {args.threads} threads apply to --device cpu only, "
            f"not {args.device}"
        )
    if kind == "meta":
        names = _on_meta(shape, names, "measure it on --device cpu or cuda")
    # the layer, the copy_ destination, and the pristine copy that restores an in-place input
    inplace = any(strategy_record(shape, name).inplace for name in names)
    check_fits(shape, args.device, 3 if inplace else 2)
    if not args.json:
        print(
            f"measure {shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)} "
            f"({_bytes(shape.layer_bytes)} per layer, {shape.moe_layers} MoE layers), "
            f"format {shape.format}, device {args.device}"
        )
        print(
            "peak: dispatch-level peak transient bytes (exact), allocs: new storages; "
            "traffic: bytes read + written / (2 x layer bytes), launches: data-moving ops"
        )
        if kind == "cpu":
            print(
                "alloc. peak: the CPU allocator's peak, kernel temporaries included; "
                "faults: minor page faults per call"
            )
        if kind != "meta":
            print(
                "x copy: median time / same-size copy_ timed interleaved; GB/s: 2 x layer bytes / "
                "median; model: median x MoE layers"
                + (f" (of {shape.experts}-expert layers)" if args.experts else "")
            )
    if not shape.valid:  # stdout stays JSON lines with --json
        print(_kernel_note(shape), file=sys.stderr if args.json else sys.stdout, flush=True)
    records = []
    with _progress(len(names), args, f"measure on {args.device}") as bar:
        for name in names:
            bar.set_postfix_str(name)
            record = _measure_record(shape, name, args.device, args.repeats, args.threads)
            records.append(record)
            if args.json:
                bar.write(json.dumps(record), file=sys.stdout)
                sys.stdout.flush()
            bar.update()
    if not args.json:
        _print_measure_table(records)
    return 0


def _replay_record(result: RankLoad) -> dict:
    """One JSON line; its keys (``max_split_mb`` for ``max_split_size_mb``) are kept for users.
    The allocator events carry ``torch.cuda.memory_stats()``'s names (``DEVICE_EVENTS``)."""
    return {
        "strategy": result.strategy,
        "shape": result.shape,
        "max_split_mb": result.max_split_size_mb,
        "pool": result.pool,
        "device_bytes": result.device_bytes,
        "other_weights_bytes": result.other_weights_bytes,
        "layers": result.layers,
        "oom": result.oom,
        "oom_layer": result.oom_layer,
        "oom_message": result.oom_message,
        "loaded_reserved_bytes": result.loaded_reserved_bytes,
        "peak_reserved_bytes": result.peak_reserved_bytes,
        "peak_allocated_bytes": result.peak_allocated_bytes,
        "reserved_growth_per_layer_bytes": result.reserved_growth_per_layer_bytes,
        "final_reserved_bytes": result.final_reserved_bytes,
        "stranded_segments": result.stranded_segments,
        **{event: getattr(result, event) for event in DEVICE_EVENTS},
        "num_device_alloc_failed": result.num_device_alloc_failed,
        "num_ooms": result.num_ooms,
    }


def _print_replay_tables(results: list[RankLoad], max_splits: list[int | None]) -> None:
    columns = ["none" if m is None else str(m) for m in max_splits]
    by_key = {(r.strategy, r.max_split_size_mb): r for r in results}
    strategies = list(dict.fromkeys(r.strategy for r in results))
    tables = (
        (
            "peak reserved, or the layer whose conversion ran out of memory",
            lambda r: f"OOM layer {r.oom_layer}" if r.oom else _bytes(r.peak_reserved_bytes),
        ),
        (
            "reserved growth per layer (steady state, median)",
            lambda r: (
                "-"
                if r.reserved_growth_per_layer_bytes is None
                else _bytes(r.reserved_growth_per_layer_bytes)
            ),
        ),
        (
            "allocator events: segments allocated / freed (cudaMalloc / cudaFree), retries",
            lambda r: f"{r.num_device_alloc} / {r.num_device_free}, {r.num_alloc_retries}",
        ),
    )
    for title, cell in tables:
        rows = [["max_split_size_mb"] + columns]
        rows += [[name] + [cell(by_key[name, m]) for m in max_splits] for name in strategies]
        print(f"\n{title}")
        _print_rows(rows)


def _on_meta(shape: LayerShape, names: list[str], instead: str) -> list[str]:
    """``names`` less those that cannot run on meta (FlashInfer's helpers: ``not_on_meta``),
    each said on stderr; ``UsageError`` (saying ``instead``) when none is left."""
    off = {name: strategy_record(shape, name).not_on_meta for name in names}
    skipped = [f"{name} cannot run on meta ({why})" for name, why in off.items() if why]
    kept = [name for name in names if not off[name]]
    if skipped and not kept:
        raise UsageError(
            f"{skipped[0]}: {instead}, or read its formulas (python -m moe_convert strategies)"
        )
    for line in skipped:
        print(f"{line}: left out; its formulas: python -m moe_convert strategies", file=sys.stderr)
    return kept


def cmd_replay(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    # the replay records each conversion on meta
    names = _on_meta(shape, resolve_strategies(shape, args.strategy), "it has no replay")
    max_splits = args.max_split_mb
    device_bytes, other_bytes = int(args.device_gib * 2**30), int(args.other_weights_gib * 2**30)
    refitted = []
    with _progress(len(names) * len(max_splits), args, "replay") as bar:
        for name in names:
            for max_split in max_splits:
                bar.set_postfix_str(f"{name}, max_split_size_mb {max_split}")
                try:
                    refitted.append(
                        replay_refits(
                            shape,
                            name,
                            args.refits,
                            way=args.refit_way,
                            max_split_size_mb=max_split,
                            pool=args.pool,
                            device_bytes=device_bytes,
                            other_weights_bytes=other_bytes,
                        )
                    )
                except WeightsDoNotFit as error:  # at the load, before any conversion is replayed
                    raise UsageError(f"argument --device-gib: {error}") from None
                except ValueError as error:  # a refit that cannot run (refit.refit_call)
                    raise UsageError(f"argument --refit-way: {name}: {error}") from None
                bar.update()
    results = [replay.load for replay in refitted]
    if args.json:
        for replay in refitted:
            record = _replay_record(replay.load)
            if args.refits:
                record.update(_refits_record(replay))
            print(json.dumps(record))
        return 0
    print(
        f"replay {shape.label}: {shape.moe_layers} MoE layers x {_bytes(shape.layer_bytes)} "
        f"+ {_bytes(other_bytes)} other weights = {_bytes(results[0].loaded_reserved_bytes)} "
        f"reserved once loaded; device {_bytes(device_bytes)}; pool {args.pool}"
    )
    _print_replay_tables(results, max_splits)
    if args.refits:
        _print_refit_table(refitted, max_splits)
    return 0


def _refits_record(replay: RefitReplay) -> dict:
    """The refits' keys of a replay's JSON line: each refit's driver calls and bytes."""
    return {
        "refit_way": replay.way,
        "refits": replay.refits,
        "oom_refit": replay.oom_refit,
        "margin_bytes": replay.margin_bytes,
        "refit_rounds": [dataclasses.asdict(r) for r in replay.rounds],
    }


def _print_refit_table(refitted: list[RefitReplay], max_splits: list[int | None]) -> None:
    """Per strategy and max_split_size_mb: the refit that ran out of memory (0: the load), else
    the last refit's cudaMalloc calls and growth, and the margin left."""

    def cell(replay: RefitReplay) -> str:
        if replay.oom_refit is not None:
            return f"OOM at refit {replay.oom_refit}"
        last = replay.rounds[-1]
        return (
            f"{last.num_device_alloc} cudaMalloc, +{_bytes(last.reserved_growth_bytes)}; "
            f"margin {_bytes(replay.margin_bytes)}"
        )

    way = refitted[0].way
    print(f"\n{refitted[0].refits} refits ({way}): the last refit, or the refit that ran out")
    by_key = {(r.load.strategy, r.load.max_split_size_mb): r for r in refitted}
    rows = [["max_split_size_mb"] + ["none" if m is None else str(m) for m in max_splits]]
    for name in dict.fromkeys(r.load.strategy for r in refitted):
        rows.append([name] + [cell(by_key[name, m]) for m in max_splits])
    _print_rows(rows)


def _rank_refit(shape: LayerShape, strategy: str, way: str) -> list[str] | str:
    """The cells of a whole rank's refit, every MoE layer in turn, exact on meta: one layer's
    peak transient bytes (the layers refit one after another) and the rank's traffic and
    launches (one layer's x ``moe_layers``), from one ``refit_call``; or why the way is refused."""
    try:
        call = refit_call(shape, strategy, way)
    except ValueError as error:
        return str(error)
    work = measure_traffic(call)
    return [
        _bytes(measure_memory(call).peak_bytes),
        _bytes(work.traffic_bytes * shape.moe_layers),
        str(work.launches * shape.moe_layers),
    ]


def cmd_refit(args: argparse.Namespace) -> int:
    shapes = resolve_shapes(args)
    names = _on_meta(shapes[0], resolve_strategies(shapes[0], args.strategy), "it has no refit")
    cells = {}
    with _progress(len(shapes) * len(names), args, "refit") as bar:
        for name in names:  # a strategy's rows together, by EP
            for shape in shapes:
                bar.set_postfix_str(f"{shape.label}, {name}")
                for way in REFITS:
                    cells[shape, name, way] = _rank_refit(shape, name, way)
                bar.update()
    print(
        f"refit {shapes[0].model} ({shapes[0].format}, {shapes[0].moe_layers} MoE layers): a "
        "whole rank's refit, every MoE layer in turn, exact on meta; peak: one layer's transient "
        "bytes, traffic and launches: the rank's. Ways: docs/library.md (refit)"
    )
    refused = {}
    for way in REFITS:
        rows = [["shape", "experts", "MoE weights", "strategy", "peak", "traffic", "launches"]]
        for (shape, name, in_way), cell in cells.items():
            if in_way == way:
                if isinstance(cell, str):
                    refused.setdefault((name, way), cell)
                    cell = ["refused"] * 3
                rows.append(
                    [shape.label, str(shape.experts), _bytes(shape.model_bytes), name, *cell]
                )
        print(f"\n{way}")
        _print_rows(rows)
    for (name, way), why in refused.items():
        print(f"{name} {way}: refused: {why}")
    return 0


def cmd_engines(args: argparse.Namespace) -> int:
    failed = 0
    for check in (check_engine(e, device=args.device) for e in (*ENGINES, *PREPARATIONS)):
        engine = check.engine
        form = registered_form(engine)
        print(
            f"{engine.strategy:<17} {engine.distribution} {check.version}\n"
            f"  calls {engine.module}.{engine.function} "
            + (
                f"(its {form.name} form, {form.releases}; transcribed as {form.transcription!r})"
                if form
                else f"(transcribed as {engine.transcription!r})"
            )
        )
        if check.identical is not None:
            print(
                f"  {'byte-identical' if check.identical else 'DIFFERS or FAILED'}: {check.detail}"
            )
        elif engine.installed:  # its function cannot run here: why
            print(f"  {check.detail}")
        failed += check.identical is False
    return 1 if failed else 0


def build_parser() -> Parser:
    """The ``python -m moe_convert`` parser: one subparser per subcommand, each with its
    ``func``."""
    parser = Parser(prog="python -m moe_convert", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    add_command(sub, "shapes", cmd_shapes, "print the model-shape catalog")

    p = add_command(
        sub,
        "strategies",
        cmd_strategies,
        "every strategy: in place or not, origin, reload safety, reversible in place, "
        "peak/traffic/launch formulas",
    )
    p.add_argument(
        "--markdown", action="store_true", help="print the legend and table of docs/library.md"
    )
    p.add_argument(
        "--update",
        metavar="FILE",
        help="rewrite the table between the markers of FILE (docs/library.md)",
    )

    p = add_command(
        sub, "verify", cmd_verify, "check every strategy byte for byte against FlashInfer's helpers"
    )
    add_work_args(p)
    p.add_argument(
        "--device", type=device_choice("cpu", "cuda"), default="cpu", help="cpu (default) or cuda"
    )
    p.add_argument("--seed", type=bounded_int(0, 2**63 - 1), default=0)

    p = add_command(
        sub,
        "measure",
        cmd_measure,
        "peak transient memory, time against a same-size copy_, whole-model time",
    )
    add_work_args(p)
    p.add_argument(
        "--device",
        type=device_choice("meta", "cpu", "cuda"),
        default="meta",
        help="meta (memory only, full size for free), cpu or cuda",
    )
    p.add_argument(
        "--repeats", type=bounded_int(1), default=5, help="timed calls per strategy (default 5)"
    )
    p.add_argument(
        "--threads",
        type=bounded_int(1),
        help="CPU threads (default: all cores; 1 is "
        "steadier on a shared machine, where a descheduled OpenMP thread stalls the others)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per strategy per line")

    p = add_command(
        sub,
        "replay",
        cmd_replay,
        "replay the rank load (every layer loaded, then each converted) through a "
        "model of the CUDA caching allocator: OOM layer, peak reserved, reserved growth "
        "per layer, cudaMalloc/cudaFree calls and retries",
        aliases=("simulate",),
    )
    add_work_args(p)
    p.add_argument(
        "--max-split-mb",
        type=max_split_list,
        default=str(VLLM_LOAD_MAX_SPLIT_MB),
        help="max_split_size_mb values, comma-separated, 'none' = unlimited "
        f"(default {VLLM_LOAD_MAX_SPLIT_MB}: what vLLM sets while loading)",
    )
    p.add_argument(
        "--device-gib",
        type=gib_amount(zero_ok=False),
        required=True,
        help="GiB the device lends to PyTorch during the load "
        "(vLLM PR #45589's reproduction on a 141 GB GPU: 139.5)",
    )
    p.add_argument(
        "--other-weights-gib",
        type=gib_amount(zero_ok=True),
        default=0.0,
        help="the model's non-MoE weights per rank, GiB (default 0; Qwen3-235B TP4: 3.86)",
    )
    p.add_argument(
        "--pool",
        choices=POOLS,
        default="sleep",
        help="sleep: vLLM's sleep-mode pool, the first failed raw allocation is an OOM "
        "(default); default: PyTorch's default pools (vLLM's load without sleep mode), cached "
        "segments released on failure; mempool: a torch.cuda.MemPool, only its own oversize "
        "segments released",
    )
    p.add_argument(
        "--refits",
        type=bounded_int(0),
        default=0,
        help="refits of every layer replayed in a row after the load, under the same settings "
        "(default 0: the load only); their driver calls, growth and the refit that runs out of "
        "memory",
    )
    p.add_argument(
        "--refit-way",
        choices=tuple(REFITS),
        default="direct",
        help="how each refit runs: direct or layerwise (vLLM 0.34's), streamed (ours: each "
        "expert placed into the held layer); default direct",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per strategy x max-split value per line",
    )

    p = add_command(
        sub,
        "refit",
        cmd_refit,
        "a whole rank's refit in each way (vLLM's direct and layerwise, our streamed), exact on "
        "meta: one layer's peak transient bytes, the rank's traffic and launches; --ep all: by EP",
    )
    add_work_args(p, ep_all=True)

    p = add_command(
        sub,
        "engines",
        cmd_engines,
        "the installed engines' converters: versions, the function each adapter calls, "
        "byte-identical to FlashInfer's helpers or not (exit 1 if not)",
    )
    p.add_argument(
        "--device", type=device_choice("cpu", "cuda"), default="cpu", help="cpu (default) or cuda"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, not the top one's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.func(args)
    except UsageError as error:
        args.parser.error(str(error))
    except (ImportError, NotImplementedError) as error:  # an installed engine that cannot run
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as the Python docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
