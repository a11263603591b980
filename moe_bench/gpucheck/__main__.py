"""The whole CUDA-side check of moe-convert-bench, in one command with a time budget.

Run by ``scripts/gpu-check OUT [--dry-run]`` (``python3 -m moe_bench.gpucheck`` with the checkout
on ``PYTHONPATH``): ``plan`` says what it does, a module per step does it (``exact``,
``memory``, ``load``, ``timing``, ``asvrun``), ``report`` writes it up. Each step runs in its own
Python process (so an allocator setting, a CUDA error or a hang stays inside it), under its own
time box, and writes its findings; a failed or timed-out step is reported and the next one runs.
On CUDA each step but asv is the NVTX range ``gpu_check/<step>``, and every conversion in it
``moe_convert/<strategy>/<shape>`` (``moe_convert.nvtx``): run under ``nsys profile`` to read
the trace beside an engine's.
At the end ``OUT/gpu-check.md`` (the report) and ``OUT/gpu-check.json`` (every figure) are
written, with ``OUT/asv.zip`` (results and the published dashboard) when step 6 ran.

Steps (budgets in ``plan.STEPS``):

1. ``exact``: every strategy on CUDA against the CPU result for the full-size
   ``CHECK_SHAPES``, byte for byte. The CPU result is ``strided_copy``'s on the box's CPU
   (``CPU_REFERENCE``: byte-identical to FlashInfer's helpers and ``legacy`` by the CPU tests,
   and seconds where ``legacy`` takes tens of seconds per layer on CPU). Then the quantized
   formats: the torch 128x4 swizzle against FlashInfer's CUDA ``block_scale_interleave`` (or a
   row saying FlashInfer is absent), and every quantized strategy on CUDA against its format's
   ``-legacy`` on CPU.
2. ``memory``: CUDA memory of every strategy (peak requested/allocated/reserved, retries)
   against the dispatch-level peak (``strategy_memory`` on ``meta``; a quantized strategy's
   record's exact formula) and the allocator model's peak reserved for the same call, on
   ``CHECK_SHAPES`` and, for every quantized strategy, ``quant_check_shapes()`` at full size.
3. ``allocator``: one recorded load (``replay.load_steps``) replayed in
   ``moe_convert.load.allocator`` and in PyTorch's caching allocator under
   ``max_split_size_mb:20``, reserved bytes compared after every allocation and free; the first
   step that differs is named.
4. ``load``: a quantized rank (``QUANT_LOAD_SHAPE``, whose upstream path the replay finds in
   trouble on an H200) for each of ``QUANT_LOAD_STRATEGIES`` under vLLM's setting, then vLLM
   #45589's whole rank (``LOAD_SHAPE``, every layer, a ballast to its 109.61 GiB) for each of
   ``LOAD_STRATEGIES`` x ``LOAD_CONFIGS``, each run on CUDA (``wholemodel.run_load``), timed
   layer by layer, against the same load replayed for the memory the device had free
   (``replay.replay_load``, ``replay.pr45589_replay``), field by field and driver
   call by driver call; the allocator events' costs measured
   (``loadtime.measure_event_costs``) and each load predicted from them.
   The costs and the per-layer seconds of step 5 become ``OUT/device-costs.json``: the committed
   ``docs/gpu-results/device-costs.json`` with this run's record added (copy it over that file).
5. ``timing``: every strategy and a same-size device copy with CUDA events, per shape of the asv
   suite, and every quantized strategy on ``quant_check_shapes()`` at full size: copy ratio,
   GB/s, per-layer and whole-model seconds; then ``TRITON_SWEEPS``.
6. ``asv``: ``asv run -E existing:python3 --quick`` of ``LayerTime.track_layer_seconds`` on
   ``LOAD_SHAPE``, published, zipped.

The report ends with the targets, judged on step 5's figures (``report.target_lines``; the
quantized formats' in ``report.quant_target_lines``).
``docs/gpu.md`` has the recipe and the figures of the H200 run.

``--dry-run`` prints the plan and runs the parts that need no CUDA (the CPU references, the
dispatch-level formulas, the allocator-model predictions, asv's presence); the CUDA parts are
reported as not run. ``GPU_CHECK_TIME_BOX_SCALE`` multiplies every time box (``plan.
time_box_scale``): the budgets are the GPU box's, and a dry run on a busy CPU can overrun them
without a fault; the report then says the boxes were scaled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..argparsing import ArgumentParser
from . import plan
from .asvrun import step_asv
from .exact import step_exact
from .load import step_load
from .memory import step_allocator, step_memory
from .report import costs_record, report_markdown
from .timing import step_timing

STEP_FUNCTIONS = {
    "exact": step_exact,
    "memory": step_memory,
    "allocator": step_allocator,
    "load": step_load,
    "timing": step_timing,
}


def plan_lines(dry_run: bool) -> list[str]:
    lines = [
        f"gpu-check plan ({'dry run: CUDA parts skipped' if dry_run else 'full'}), "
        f"wall budget {plan.WALL_BUDGET_S} s:"
    ]
    for number, step in enumerate(plan.STEPS, 1):
        env = " ".join(f"{k}={v}" for k, v in step.env)
        lines.append(
            f"  {number}. {step.name:<9} {step.budget_s:>4} s  {step.title}"
            + (f"  [{env}]" if env else "")
        )
    lines.append(f"  total      {sum(step.budget_s for step in plan.STEPS):>4} s")
    return lines


def run_step(step: plan.Step, out: Path, scratch: Path, dry_run: bool, timeout_s: float) -> dict:
    """Run one step in a fresh interpreter under ``timeout_s``; its findings, or why none."""
    result_file = scratch / f"{step.name}.json"
    env = dict(os.environ, **dict(step.env), PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "moe_bench.gpucheck",
        "--step",
        step.name,
        "--result",
        str(result_file),
        str(out),
    ] + (["--dry-run"] if dry_run else [])
    start = time.perf_counter()
    try:
        process = subprocess.run(cmd, cwd=plan.ROOT, env=env, timeout=timeout_s)
        status = "passed" if process.returncode == 0 else f"crashed (exit {process.returncode})"
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout_s:.0f} s"
    seconds = time.perf_counter() - start
    findings = json.loads(result_file.read_text()) if result_file.exists() else {}
    if status == "passed" and not findings.get("ok", False):
        status = "failed"
    return {
        "step": step.name,
        "title": step.title,
        "status": status,
        "seconds": seconds,
        "budget_s": step.budget_s,
        **findings,
    }


def _environment() -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"no CUDA device ({platform.processor() or platform.machine()})"
    )
    commit = os.environ.get("GPU_CHECK_COMMIT", "unknown")
    if shutil.which("git"):
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=plan.ROOT,
                text=True,
                capture_output=True,
            ).stdout.strip()
            or commit
        )
    return {
        "device": device,
        "torch": torch.__version__,
        "triton": triton_version,
        "commit": commit,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(  # a usage error: one line, exit 2
        prog="scripts/gpu-check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", type=Path, help="folder for gpu-check.md, gpu-check.json, asv.zip")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan, run only what needs no CUDA"
    )
    parser.add_argument(
        "--step", choices=[step.name for step in plan.STEPS], help=argparse.SUPPRESS
    )
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step:  # inside one step's own process
        plan.RESULT_FILE = args.result
        if args.step == "asv":  # asv's own processes do the work: no range, no torch here
            findings = step_asv(args.dry_run, args.out)
        else:
            import torch

            from moe_convert.nvtx import nvtx_range

            # the step as one NVTX range in an nsys trace of the run (nothing without CUDA)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            with nvtx_range(f"gpu_check/{args.step}", device):
                findings = STEP_FUNCTIONS[args.step](args.dry_run)
        args.result.write_text(json.dumps(findings, default=str))
        return 0
    try:
        scale = plan.time_box_scale()
    except ValueError as err:
        parser.error(str(err))
    print("\n".join(plan_lines(args.dry_run)), flush=True)
    if scale != 1:
        print(f"time boxes x{scale:g} ({plan.TIME_BOX_SCALE_ENV})", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        for step in plan.STEPS:
            left = plan.WALL_BUDGET_S * scale - (time.perf_counter() - start)
            if left < 5:
                results.append(
                    {
                        "step": step.name,
                        "title": step.title,
                        "seconds": 0.0,
                        "budget_s": step.budget_s,
                        "status": "not run: out of time",
                    }
                )
                continue
            box = min(step.budget_s * scale, left)
            print(f"== step {step.name} (budget {step.budget_s} s, {left:.0f} s left)", flush=True)
            results.append(run_step(step, args.out, Path(scratch), args.dry_run, box))
            print(
                f"== step {step.name}: {results[-1]['status']} in {results[-1]['seconds']:.1f} s",
                flush=True,
            )
    summary = {
        "started": started,
        "dry_run": args.dry_run,
        "time_box_scale": scale,
        "seconds": time.perf_counter() - start,
        **_environment(),
        "steps": results,
    }
    (args.out / "gpu-check.json").write_text(json.dumps(summary, indent=1, default=str))
    record = costs_record(summary)
    if record is not None:
        from moe_suite.loadtime import COSTS_FILE, append_costs

        if COSTS_FILE.exists():
            shutil.copyfile(COSTS_FILE, args.out / COSTS_FILE.name)
        append_costs(record, args.out / COSTS_FILE.name)
    (args.out / "gpu-check.md").write_text(report_markdown(summary))
    print(report_markdown(summary), flush=True)
    return 0 if all(r["status"] == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
