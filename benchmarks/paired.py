"""Paired A/B timing of two commits' conversions in one process: the PR gate's time verdict.

``asv continuous`` measures all of base, then all of head: a change in the machine's load
between the two reads as a regression (on the shared 2-core machine unchanged code was called
105x slower that way). Here both commits' ``moe_convert`` are loaded side by side in this
process (each commit's tree exported with ``git archive`` into its own folder and imported under
its own module name), and for each cell that ``LayerTime`` times (``benchmarks.formats``' grid
of every format, keyed by shape and strategy) their calls alternate on the same inputs, in a
seeded random order within each pair, so a load that comes and goes moves both alike; two
identical input buffers are dealt to the two sides at random for every pair, so where a buffer
lies in memory favours neither.

The verdict of a cell is read from the per-pair ratios ``head_i / base_i``: the estimate is their
median, with a bootstrap confidence interval (``CONFIDENCE``) of that median. A regression is
declared only when the whole interval lies above ``THRESHOLD``; an improvement only when it lies
below ``1 / THRESHOLD``. Pairs are added in batches until the interval is decisive or the cell's
budget is spent, so quiet cells finish fast and noisy ones get more samples.

What a call's time includes is what ``measuring.timing`` states: out-of-place outputs are
allocated in the call and freed after the clock stops; in-place inputs are restored from a
pristine copy before every call, outside the timed region. Each call is timed by
``measuring.timing.time_once``, the primitive of ``timing.time_layer`` (CUDA events on CUDA;
the working tree's clock for both sides), on the working tree's layer (``layer_tensors``);
CPU calls with ``common.CPU_THREADS`` threads.

Usage: ``python -m benchmarks.paired BASE HEAD [--bench REGEX] [--out FILE]``; writes the JSON
that ``moe_bench.compare --paired`` reads. Exit 0 when no cell regressed or failed, 1 otherwise,
2 on a usage error (an unknown commit, a bad regex).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import io
import json
import math
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

import torch

from moe_suite.metrics import quant_sibling

# the modules, not their functions: asv would take a module-level ``time_once`` for a benchmark
from . import common, formats, library

timing = library.module("measuring.timing")

#: A cell regresses when the whole confidence interval of head/base lies above this. Chosen so
#: that a 1.25x slowdown is caught under load (docs/timing.md: measured detection).
THRESHOLD = 1.10
#: Confidence of the bootstrap interval. Two-sided 99 %: the chance that unchanged code is called
#: a regression in one cell is below 0.5 %, before the threshold's margin is even counted.
CONFIDENCE = 0.99
#: Pairs measured before the first verdict, added per batch after it, and at most per cell. A
#: fast call is noisier (a 20 ms call on the loaded 2-core machine: per-pair log-ratio standard
#: deviation 0.2-0.35), so it needs many pairs; a slow one is decided after the first batch.
MIN_PAIRS, BATCH_PAIRS, MAX_PAIRS = 10, 10, 400
#: Seconds of timed calls a cell may take before its verdict is read from what it has.
CELL_BUDGET_SECONDS = 20.0
#: Untimed pairs first: index caches, first touch of inputs and outputs.
WARMUP_PAIRS = 2
#: The asv figures this verdict decides (they measure the same call, unpaired): BF16's; the
#: quantized formats' are their ``metrics.quant_sibling``s.
JUDGED_BENCHMARKS = (
    "bench_convert.LayerTime.track_layer_seconds",
    "bench_convert.LayerTime.track_copy_ratio",
    "bench_convert.LayerTime.track_whole_model_seconds",
)


@dataclass(frozen=True)
class Cell:
    """The paired verdict of one shape x strategy."""

    shape: str
    strategy: str
    verdict: str  # "same", "regressed", "improved", "failed" (head fails), "n/a"
    ratio: float | None = None  # median of head_i / base_i
    ci_low: float | None = None
    ci_high: float | None = None
    n_pairs: int = 0
    base_seconds: float | None = None  # median of base's samples
    head_seconds: float | None = None
    error: str | None = None  # why failed or n/a


def load_commit(commit: str, root: Path, into: Path, side: str) -> ModuleType:
    """Import ``moe_convert`` as of ``commit`` of repository ``root``, as ``moe_convert_<side>``.

    The package is exported with ``git archive`` into ``into/<side>/`` and imported under its own
    name (its modules import each other relatively), so two commits' libraries, or two copies of
    one commit, live side by side with separate registries and caches.
    """
    tree = into / side
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", commit, "moe_convert"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    name = f"moe_convert_{side}"
    spec = importlib.util.spec_from_file_location(
        name,
        tree / "moe_convert" / "__init__.py",
        submodule_search_locations=[str(tree / "moe_convert")],
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _interval(log_ratios: list[float]) -> tuple[float, float, float]:
    """(median, low, high) of head/base from per-pair log ratios; bootstrap of the median."""
    # Imported here: asv imports every module of the suite in its benchmark environment, which
    # has neither (this module only runs from scripts/compare, in the project's environment).
    import numpy as np
    from scipy import stats

    data = np.asarray(log_ratios)
    median = float(np.median(data))
    if np.ptp(data) == 0:  # identical samples: bootstrap has nothing to resample
        return math.exp(median), math.exp(median), math.exp(median)
    interval = stats.bootstrap(
        (data,),
        np.median,
        confidence_level=CONFIDENCE,
        method="percentile",
        n_resamples=2000,
        random_state=0,
    ).confidence_interval
    return math.exp(median), math.exp(interval.low), math.exp(interval.high)


def _verdict(low: float, high: float) -> str:
    if low > THRESHOLD:
        return "regressed"
    if high < 1 / THRESHOLD:
        return "improved"
    return "same"


def _in_place(lib: ModuleType, strategy: str) -> bool:
    """Whether ``lib`` converts ``strategy`` in place: its record says so; a commit from before
    the registry of records (issue 12) says so with a set of names, ``INPLACE``."""
    if hasattr(lib, "INPLACE"):
        return strategy in lib.INPLACE
    return library.strategy_records(lib)[strategy].inplace


def _converter(lib: ModuleType, fmt: str) -> Callable[[dict, str, bool], object]:
    """``lib``'s conversion of a layer of ``fmt`` given as its named tensors,
    ``(layer, strategy, gated)``: ``convert`` of a layer since issue 36, ``convert_layer``
    since the format axis (issue 28); on a commit before it, BF16's ``convert`` of w13 and w2,
    or ``convert_quant`` of the side's own ``QuantLayer`` of the tensors."""
    if hasattr(lib, "Layer"):
        return lambda layer, strategy, gated: lib.convert(layer, strategy=strategy, gated=gated)
    if hasattr(lib, "convert_layer"):
        return lambda layer, strategy, gated: lib.convert_layer(
            layer, strategy=strategy, gated=gated
        )
    if fmt == "bf16":
        return lambda layer, strategy, gated: lib.convert(
            layer["w13"], layer["w2"], strategy=strategy, gated=gated
        )
    return lambda layer, strategy, gated: lib.convert_quant(
        lib.QuantLayer(**layer), strategy=strategy, gated=gated
    )


def measure_cell(
    libs: dict[str, ModuleType], label: str, kind: str, device: torch.device, seed: int = 0
) -> Cell:
    """Alternate base and head calls of one cell of ``benchmarks.formats``' grid (a shape and
    its format's strategy ``kind``) on the same layer: the working tree's seeded layer of the
    suite's timed shape (``moe_convert.layer_tensors``), each side converting it through its own
    library (``_converter``)."""
    # Imported here: asv imports this module with the measured commit's library, which may
    # predate the format axis.
    from moe_convert import layer_tensors

    fmt = formats.FORMAT_OF[label]
    strategy = formats.strategy_name(fmt, kind)
    records = {side: library.strategy_records(lib) for side, lib in libs.items()}
    missing = [side for side, known in records.items() if strategy not in known]
    if missing:
        return missing_cell(label, kind, missing, f"strategy {strategy!r} is not registered")
    takes = {getattr(known[strategy], "takes", fmt) for known in records.values()} - {fmt}
    if takes:  # FlashInfer's helpers: a BF16 layer, not the checkpoint's
        why = f"{strategy} takes a {' or '.join(sorted(takes))} layer, not a {fmt} one: not paired"
        return Cell(label, kind, "n/a", error=why)
    shape = formats.timed_shape(label)  # the suite's shape: both sides convert the same bytes
    layer = layer_tensors(shape, device, seed=seed)
    names = list(layer)
    converters = {side: _converter(lib, fmt) for side, lib in libs.items()}

    def call(side: str, tensors: list[torch.Tensor]):
        return converters[side](dict(zip(names, tensors, strict=True)), strategy, shape.gated)

    inplace = {side: _in_place(lib, strategy) for side, lib in libs.items()}
    return _paired(label, kind, list(layer.values()), call, inplace, device, seed)


def missing_cell(label: str, strategy: str, missing: list[str], why: str) -> Cell:
    """Head without the strategy fails; base without it (a new strategy) is n/a."""
    verdict = "failed" if missing == ["head"] else "n/a"
    return Cell(label, strategy, verdict, error=f"{why} in {' and '.join(missing)}")


def _paired(
    label: str,
    strategy: str,
    pristine: list[torch.Tensor],
    call: Callable[[str, list[torch.Tensor]], object],
    inplace: dict[str, bool],
    device: torch.device,
    seed: int,
) -> Cell:
    """The paired measurement of a cell: ``call(side, tensors)`` converts a copy of
    ``pristine`` with ``side``'s library, in place where ``inplace[side]``; pairs in a seeded
    random order until the interval decides or the budget is spent."""
    # Two sets of inputs, dealt to the two sides at random for every pair: where a buffer lies
    # in memory changes the time of the same code (unchanged `inplace` read 1.06-1.08x slower
    # when head always converted its own buffers), so neither side may keep one.
    buffers = [[w.clone() for w in pristine] for _ in inplace]

    def timed(side: str, buffer: int) -> float:
        tensors = buffers[buffer]
        if inplace[side]:
            for dst, src in zip(tensors, pristine, strict=True):
                dst.copy_(src)
        seconds, _ = timing.time_once(functools.partial(call, side, tensors), device)
        return seconds

    return paired_cell(label, strategy, timed, seed)


def paired_cell(
    label: str, strategy: str, timed: Callable[[str, int], float], seed: int = 0
) -> Cell:
    """The paired verdict of a cell from ``timed(side, buffer)``: the seconds of one call of
    ``side`` ("base" or "head") on input buffer ``buffer`` (0 or 1, restored first where the
    side converts in place). Pairs in a seeded random order, the buffers dealt at random, until
    the interval decides or the budget is spent; a side that raises is head's failure or base's
    n/a. ``benchmarks.engine_paired`` times each side in a process of its own."""
    order = random.Random(seed)
    sides = ["base", "head"]
    samples: dict[str, list[float]] = {side: [] for side in sides}
    spent, log_ratios = 0.0, []
    verdict, ratio, low, high = "same", math.nan, math.nan, math.nan
    for pair in range(WARMUP_PAIRS + MAX_PAIRS):
        times = {}
        dealt = dict(zip(sides, order.sample(range(len(sides)), k=len(sides)), strict=True))
        for side in order.sample(sides, k=len(sides)):
            try:
                times[side] = timed(side, dealt[side])
            except Exception as err:  # a strategy that raises is this cell's finding, not a crash
                if side == "head":
                    return Cell(label, strategy, "failed", error=f"head raised {err!r}")
                return Cell(label, strategy, "n/a", error=f"base raised {err!r}")
        if pair < WARMUP_PAIRS:
            continue
        for side, seconds in times.items():
            samples[side].append(seconds)
        spent += sum(times.values())
        log_ratios.append(math.log(times["head"] / times["base"]))
        n = len(log_ratios)
        out_of_budget = n == MAX_PAIRS or spent > CELL_BUDGET_SECONDS
        if n >= MIN_PAIRS and ((n - MIN_PAIRS) % BATCH_PAIRS == 0 or out_of_budget):
            ratio, low, high = _interval(log_ratios)
            verdict = _verdict(low, high)
            decided = low > THRESHOLD or high < THRESHOLD
            if decided or out_of_budget:
                break
    return Cell(
        label,
        strategy,
        verdict,
        ratio,
        low,
        high,
        len(log_ratios),
        statistics.median(samples["base"]),
        statistics.median(samples["head"]),
    )


def say(tag: str, i: int, n: int, cell: Cell) -> None:
    """The progress line of the ``i``-th of ``n`` cells, on stderr."""
    print(
        f"[{tag} {i}/{n}] {cell.shape} {cell.strategy}: {cell.verdict} "
        + (
            f"{cell.ratio:.3f} [{cell.ci_low:.3f}, {cell.ci_high:.3f}] n={cell.n_pairs}"
            if cell.ratio is not None
            else str(cell.error)
        ),
        file=sys.stderr,
        flush=True,
    )


def finish(result: dict, out: Path | None) -> int:
    """Write ``result`` to ``out`` where given; the exit status: 1 when a cell regressed or
    failed, else 0."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    failing = [row for row in result["rows"] if row["verdict"] in ("regressed", "failed")]
    return 1 if failing else 0


def _selected(regex: re.Pattern | None, judged: tuple[str, ...], label: str, strategy: str) -> bool:
    return regex is None or any(regex.search(f"{name}('{label}', '{strategy}')") for name in judged)


def cells(regex: re.Pattern | None) -> list[tuple[str, str]]:
    """Every cell (shape, strategy of its format) the profile times (``formats.is_timed``) that
    ``regex`` selects: a cell is selected by its format's names of ``JUDGED_BENCHMARKS``
    (``bench_convert.LayerTime...`` for BF16's, ``bench_nvfp4.LayerTime...`` for NVFP4's)."""
    judged = {
        fmt: JUDGED_BENCHMARKS
        if fmt == "bf16"
        else tuple(quant_sibling(name, fmt) for name in JUDGED_BENCHMARKS)
        for fmt in formats.FORMAT_SHAPES
    }
    return [
        (label, kind)
        for label, fmt in formats.FORMAT_OF.items()
        if formats.is_timed(label)
        for kind in formats.kinds(fmt)
        if _selected(regex, judged[fmt], label, kind)
    ]


def compare(root: Path, base: str, head: str, regex: re.Pattern | None = None) -> dict:
    """Every selected cell of the suite's grid, paired; the JSON-ready result."""
    device = torch.device(common.device())
    noise_before = timing.calibration_copy(device=device, threads=common.CPU_THREADS).spread
    # time_once sets no threads: the cells' calls (and their untimed restores) run with
    # CPU_THREADS on CPU for the whole comparison.
    with (
        timing.cpu_threads(common.CPU_THREADS, device=device),
        tempfile.TemporaryDirectory(prefix="moe-paired-") as folder,
    ):
        libs = {
            side: load_commit(commit, root, Path(folder), side)
            for side, commit in (("base", base), ("head", head))
        }
        selected = cells(regex)
        rows = []
        for i, (label, kind) in enumerate(selected, 1):
            cell = measure_cell(libs, label, kind, device)
            rows.append({**asdict(cell), "format": formats.FORMAT_OF[label]})
            say("paired", i, len(selected), cell)
    # The machine's noise around the run (slowest / fastest of 15 calibration copies).
    noise = {
        "copy_spread_before": noise_before,
        "copy_spread_after": timing.calibration_copy(
            device=device, threads=common.CPU_THREADS
        ).spread,
    }
    return {
        "base": base,
        "head": head,
        "threshold": THRESHOLD,
        "confidence": CONFIDENCE,
        "device": str(device),
        "profile": common.profile(),
        "threads": common.CPU_THREADS if device.type == "cpu" else None,
        "noise": noise,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.paired",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("base", help="base commit (hash, branch or tag)")
    parser.add_argument("head", help="head commit")
    parser.add_argument(
        "--bench",
        "-b",
        default=None,
        help="regex over the judged benchmarks' names with parameters, as asv's -b",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    commits = []
    for given in (args.base, args.head):
        found = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "-q", f"{given}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if found.returncode != 0:
            parser.error(f"{given!r} is not a commit of {root}")
        commits.append(found.stdout.strip())
    try:
        regex = re.compile(args.bench) if args.bench else None
    except re.error as err:
        parser.error(f"--bench {args.bench!r} is not a regular expression: {err}")
    result = compare(root, *commits, regex)
    return finish(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
