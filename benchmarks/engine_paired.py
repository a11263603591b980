"""Paired A/B timing of two commits of an engine: the engine PR's time verdict
(``moe-bench engine-pr``), by ``benchmarks.paired``'s rule.

Two builds of one engine cannot be imported side by side in one process as two commits of this
suite can (vLLM is one package with one name). So each commit runs in a worker process of its
own (``engine_benchmarks/worker.py``, with the asv environment's Python and the commit's wheel,
from asv's build cache, first on ``PYTHONPATH``), and this process alternates their calls, pair
by pair, in a seeded random order, each worker on one of two identical input buffers dealt at
random: ``paired.paired_cell``, the same pairs, interval and threshold as the suite's own PR gate.
A load that comes and goes moves both sides of a pair alike. Only the engine's own cell of each
grid of ``bench_engine.GRIDS`` is timed, at the grid's shapes: the one its axis names as the
config's engine (``vllm``: BF16's and every quantized format's adapter; ``flashinfer`` where
FlashInfer is the repo: BF16's only), each side's layer made as the main suite's timing makes
it (``moe_convert.measuring.timing.conversion``). Every other cell is the same code on both
sides, and two processes can differ where one process's two sides cannot (identical FlashInfer
code read 1.32x [1.232, 1.361] slower in the head's worker in one of two unchanged-PR runs under
a load of 4-5, docs/engines.md): a cell of identical code is no verdict. A cell registered in
neither commit or in head only is n/a, in base only failed (``paired.missing_cell``); a head
whose function no longer honours its code's form fails the cell with that line.

Usage: ``python -m benchmarks.engine_paired CONFIG BASE HEAD [--bench REGEX] [--out FILE]``
(CONFIG an engine config, after ``asv continuous`` built both commits); writes the JSON that
``moe_bench.compare --paired`` reads. Exit 0 when no cell regressed or failed, 1 otherwise, 2 on
a usage error (no build of a commit, a bad regex).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from moe_suite.metrics import COPY_RATIO, TIME, engine_sibling, quant_sibling

from . import paired

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "engine_benchmarks" / "worker.py"
#: The main suite's timed figures this verdict decides: a grid's are BF16's in the engine
#: suite's module (``engine_sibling``), a quantized format's in its own (``quant_sibling``).
JUDGED = (TIME, COPY_RATIO)


def judged(fmt: str) -> tuple[str, ...]:
    """asv's names of format ``fmt``'s figures ``JUDGED`` in the engine suite."""
    return tuple(
        engine_sibling(name) if fmt == "bf16" else quant_sibling(name, fmt) for name in JUDGED
    )


def _engine_suite():
    """``engine_benchmarks.bench_engine``'s axes (imported from the checkout: not installed)."""
    sys.path.insert(0, str(ROOT / "engine_benchmarks"))
    try:
        import bench_engine
    finally:
        sys.path.pop(0)
    return bench_engine


class Worker:
    """One side: a worker process with ``python`` and the engine's package dir first on the
    path; ``ready(shape, strategy)`` makes a cell's layers (None, or why the strategy is not
    registered), ``time(shape, strategy, buffer)`` is one timed call's seconds (both raise on
    the cell's error)."""

    def __init__(self, python: str, package_dir: Path):
        # glibc's mmap threshold fixed at its initial 128 KiB: left dynamic, it rises with what
        # a process happened to free, so two workers of the same code served a call's large
        # outputs from mapped pages in one and reused heap in the other (A/A, one commit on both
        # sides, load 3-9: BF16 read 0.746 [0.642, 0.865] in 1 of 4 runs; FP8's unchanged cell
        # 0.649 and 1.47 in 2 of 3 PR runs; fixed, 3 of 3 A/A runs same for both).
        env = dict(os.environ, PYTHONPATH=str(package_dir), MALLOC_MMAP_THRESHOLD_="131072")
        self.process = subprocess.Popen(
            [python, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=WORKER.parent,
        )

    def _ask(self, **request) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited ({self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def ready(self, shape: str, strategy: str) -> str | None:
        return self._ask(shape=shape, strategy=strategy).get("missing")

    def time(self, shape: str, strategy: str, buffer: int) -> float:
        return self._ask(shape=shape, strategy=strategy, buffer=buffer)["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def environment(config: Path, commit: str) -> tuple[str, Path]:
    """The asv environment's Python and ``commit``'s wheel in its build cache; ``SystemExit``
    (exit 2) naming what is missing."""
    conf = json.loads(config.read_text())
    wheels = sorted(Path(conf["env_dir"]).glob(f"*/asv-build-cache/{commit}/*.whl"))
    if not wheels:
        sys.exit(
            f"engine_paired: no build of {commit[:8]} under {conf['env_dir']}: run asv "
            "continuous (moe-bench engine-pr) first"
        )
    return str(wheels[0].parents[2] / "bin" / "python"), wheels[0]


def cells(engine: str, regex: re.Pattern | None = None) -> list[tuple[str, str, str]]:
    """``(format, shape, axis value)`` of every grid's cell named as ``engine`` (its own code),
    at the grid's shapes, that ``regex`` selects by its format's ``judged`` names."""
    suite = _engine_suite()
    return [
        (grid.format, shape, engine)
        for grid in suite.GRIDS.values()
        if engine in grid.strategies
        for shape in grid.shapes
        if regex is None
        or any(regex.search(f"{name}('{shape}', '{engine}')") for name in judged(grid.format))
    ]


def _cell(workers: dict[str, Worker], shape: str, strategy: str, registry: str) -> paired.Cell:
    """The paired verdict of one cell: its layers made on both sides first (a side that raises
    then is head's failure or base's n/a, as in ``paired.paired_cell``; a side without the
    strategy ``paired.missing_cell``), then the pairs."""
    missing, why = [], ""
    for side, worker in workers.items():
        try:
            absent = worker.ready(shape, registry)
        except RuntimeError as err:
            verdict = "failed" if side == "head" else "n/a"
            return paired.Cell(shape, strategy, verdict, error=f"{side}: {err}")
        if absent:
            missing, why = [*missing, side], absent
    if missing:
        return paired.missing_cell(shape, strategy, missing, why)
    return paired.paired_cell(
        shape, strategy, lambda side, buffer: workers[side].time(shape, registry, buffer)
    )


def compare(config: Path, base: str, head: str, regex: re.Pattern | None = None) -> dict:
    """Every selected cell of the config's engine (``cells``), paired; the JSON-ready result,
    each row with its format."""
    suite = _engine_suite()
    engine = json.loads(config.read_text())["engine"]  # the adapter is named as the engine
    assert engine in suite.ENGINE_STRATEGIES, engine
    selected = cells(engine, regex)
    workers = {}
    with tempfile.TemporaryDirectory(prefix="moe-engine-paired-") as folder:
        for side, commit in (("base", base), ("head", head)):
            python, wheel = environment(config, commit)
            target = Path(folder) / side
            subprocess.run(
                [
                    python,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--target",
                    str(target),
                    str(wheel),
                ],
                check=True,
            )
            workers[side] = Worker(python, target)
        rows = []
        try:
            for i, (fmt, shape, strategy) in enumerate(selected, 1):
                registry = suite.GRIDS[fmt].strategy(strategy)
                cell = _cell(workers, shape, strategy, registry)
                rows.append({**asdict(cell), "format": fmt})
                paired.say("engine-paired", i, len(selected), cell)
        finally:
            for worker in workers.values():
                worker.close()
    return {
        "base": base,
        "head": head,
        "threshold": paired.THRESHOLD,
        "confidence": paired.CONFIDENCE,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_paired",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", type=Path, help="the engine config (moe-bench engine-config)")
    parser.add_argument("base", help="base commit of the engine (full hash)")
    parser.add_argument("head", help="head commit of the engine (full hash)")
    parser.add_argument("--bench", "-b", default=None, help="regex over the timed cells' names")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    try:
        regex = re.compile(args.bench) if args.bench else None
    except re.error as err:
        parser.error(f"--bench {args.bench!r} is not a regular expression: {err}")
    return paired.finish(compare(args.config, args.base, args.head, regex), args.out)


if __name__ == "__main__":
    sys.exit(main())
