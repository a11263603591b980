"""``OUT/gpu-check.md`` from the steps' findings, the targets judged on them, and this run's
``loadtime.DeviceCosts`` record.
"""

from __future__ import annotations

from . import plan


def _gib(nbytes) -> str:
    from moe_convert.units import format_bytes

    return format_bytes(nbytes, unit="GiB", digits=3)


def _mib(nbytes) -> str:
    from moe_convert.units import format_bytes

    return format_bytes(nbytes, unit="MiB")


def _seconds(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds:.3f} s"


def _agreement(difference) -> str:
    """A measured-minus-formula difference in bytes as the report says it."""
    if difference is None:
        return "n/a"
    return "agree" if difference == 0 else f"DISAGREE ({difference:+,} B)"


#: Issue 19's targets: out-of-place and in-place time over a same-size device copy on every
#: shape timed (issue 11 had 1.25 and 1.6); issue 11's whole qwen3-235b-a22b/tp4 rank.
TARGET_OUT_OF_PLACE_RATIO = 1.10
TARGET_INPLACE_RATIO = 1.5
TARGET_WHOLE_MODEL_S = 0.060

#: Issue 17's: vLLM #45589's 4.5x (legacy / preallocated load), within 25 %.
TARGET_LOAD_RATIO = 3.4

#: Issue 18's: each quantized format's ``-fast`` over a same-size device copy of the layer's
#: tensors on an H200 (and every strategy of ours no slower than the format's ``-legacy``).
TARGET_QUANT_FAST_RATIO = 1.3


def _bf16(rows: list[dict]) -> list[dict]:
    """The timed rows of BF16 shapes (rows from before the formats have no ``format``)."""
    return [r for r in rows if "error" not in r and r.get("format", "bf16") == "bf16"]


def target_lines(rows: list[dict]) -> list[str]:
    """Per BF16 shape: the best out-of-place and in-place strategies against the targets."""
    lines = []
    timed = _bf16(rows)
    for label in dict.fromkeys(row["shape"] for row in timed):
        for inplace, target in ((False, TARGET_OUT_OF_PLACE_RATIO), (True, TARGET_INPLACE_RATIO)):
            group = [r for r in timed if r["shape"] == label and r["inplace"] == inplace]
            if not group:
                continue
            best = min(group, key=lambda r: r["copy_ratio"])
            verdict = "met" if best["copy_ratio"] <= target else "NOT met"
            lines.append(
                f"- {label}, best {'in place' if inplace else 'out of place'}: "
                f"`{best['strategy']}` x{best['copy_ratio']:.3f} copy (target <= {target}: "
                f"{verdict}), {best['seconds'] * 1e3:.3f} ms/layer, peak "
                f"{_mib(best['peak_bytes'])}, "
                f"whole model {best['whole_model_seconds'] * 1e3:.1f} ms"
            )
    qwen = [r for r in timed if r["shape"] == plan.LOAD_SHAPE]
    if qwen:
        best = min(qwen, key=lambda r: r["whole_model_seconds"])
        verdict = "met" if best["whole_model_seconds"] <= TARGET_WHOLE_MODEL_S else "NOT met"
        lines.append(
            f"- whole {plan.LOAD_SHAPE} rank ({best['moe_layers']} layers): `{best['strategy']}` "
            f"{best['whole_model_seconds'] * 1e3:.1f} ms (target <= "
            f"{TARGET_WHOLE_MODEL_S * 1e3:.0f} ms: {verdict})"
        )
    return lines


def quant_target_lines(rows: list[dict]) -> list[str]:
    """Per quantized shape timed: its format's ``-fast`` against ``TARGET_QUANT_FAST_RATIO``
    (and the fastest strategy, where another), then every strategy of ours against the
    format's ``-legacy`` (the upstream path): those slower than it named, or a line saying
    none is. Rows that failed are left out."""
    lines = []
    timed = [r for r in rows if "error" not in r and r.get("format", "bf16") != "bf16"]
    for label in dict.fromkeys(r["shape"] for r in timed):
        group = {r["strategy"]: r for r in timed if r["shape"] == label}
        fmt = next(iter(group.values()))["format"]
        fast, legacy = group.get(f"{fmt}-fast"), group.get(f"{fmt}-legacy")
        if fast is not None:
            verdict = "met" if fast["copy_ratio"] <= TARGET_QUANT_FAST_RATIO else "NOT met"
            best = min(group.values(), key=lambda r: r["copy_ratio"])
            lines.append(
                f"- {label}: `{fast['strategy']}` x{fast['copy_ratio']:.3f} copy (target <= "
                f"{TARGET_QUANT_FAST_RATIO}: {verdict}), {fast['seconds'] * 1e3:.3f} ms/layer"
                + (
                    ""
                    if best is fast
                    else f"; fastest `{best['strategy']}` x{best['copy_ratio']:.3f} copy"
                )
            )
        if legacy is None:
            lines.append(f"- {label}: `{fmt}-legacy` not timed, ours not compared with it")
            continue
        ours = [r for r in group.values() if r["origin"].startswith("ours")]
        slower = [
            f"`{r['strategy']}` {r['seconds'] / legacy['seconds']:.2f}x its time"
            for r in ours
            if r["seconds"] > legacy["seconds"]
        ]
        names = ", ".join(f"`{r['strategy']}`" for r in ours)
        lines.append(
            f"- {label}, ours against `{legacy['strategy']}` ({legacy['seconds'] * 1e3:.3f} ms): "
            + (f"SLOWER: {', '.join(slower)}" if slower else f"none slower ({names})")
        )
    return lines


def _table(header: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(str(cell) for cell in row) + " |" for row in rows
    ]


def _load_table(rows: list[dict]) -> list[str]:
    """Step 4's rows as a table: seconds run and predicted, driver calls and the OOM layer run
    and replayed, the fields that differ; a line per row that failed."""
    done = [r for r in rows if "error" not in r]
    lines = _table(
        [
            "strategy",
            "max_split_mb",
            "pool",
            "seconds",
            "predicted",
            "cudaMalloc run/replay",
            "cudaFree run/replay",
            "retries run/replay",
            "OOM layer run/replay",
            "fields differing",
        ],
        [
            [
                r["strategy"],
                r["max_split_mb"],
                r["pool"],
                _seconds(r.get("run", {}).get("seconds")),
                _seconds(r.get("predicted_seconds")),
                *(
                    f"{r.get('run', {}).get(field, 'n/a')}/{r['replayed'][field]}"
                    for field in (
                        "num_device_alloc",
                        "num_device_free",
                        "num_alloc_retries",
                        "oom_layer",
                    )
                ),
                ", ".join(r["differences"]) if "differences" in r else "n/a",
            ]
            for r in done
        ],
    )
    return lines + [
        f"- {r['strategy']} {r['max_split_mb']} {r['pool']}: {r['error']}"
        for r in rows
        if "error" in r
    ]


def load_lines(step: dict) -> list[str]:
    """Step 4's section: the quantized loads (issue 18: the run against the replay, OOM layer
    and driver calls), then vLLM #45589's rank, each load's seconds measured and predicted, its
    driver calls run and replayed, and its ratio against the target of issue 17."""
    lines = [
        "",
        "## 4. Whole-rank loads",
        "",
        f"Event costs: {step.get('events') or 'not measured'}.",
    ]
    rows = [r for r in step["rows"] if r.get("shape", plan.LOAD_SHAPE) != plan.LOAD_SHAPE]
    for label in dict.fromkeys(r["shape"] for r in rows):
        group = [r for r in rows if r["shape"] == label]
        lines += [
            "",
            f"### {label}: vLLM's load (default pool, max_split_size_mb {plan.MAX_SPLIT_MB}), "
            "no ballast",
            "",
        ]
        lines += _load_table(group)
        for r in group:
            if "differences" in r:
                found = set(r["differences"]) - {"oom_message"}
                lines.append(
                    f"- {r['strategy']}: OOM layer {r['run']['oom_layer']}, run and replay "
                    + (f"DIFFER in {', '.join(sorted(found))}" if found else "agree")
                )
    lines += [
        "",
        f"### {plan.LOAD_SHAPE}: vLLM #45589's rank, all layers, ballast to 109.61 GiB",
        "",
    ]
    rows = [r for r in step["rows"] if r.get("shape", plan.LOAD_SHAPE) == plan.LOAD_SHAPE]
    lines += _load_table(rows)
    seconds = {
        (r["strategy"], r["max_split_mb"], r["pool"]): r["run"]["seconds"]
        for r in rows
        if "run" in r and r["run"]["oom_layer"] is None
    }
    for max_split in (plan.MAX_SPLIT_MB, None):
        legacy = seconds.get(("legacy", max_split, "default"))
        preallocated = seconds.get(("preallocated", max_split, "default"))
        if legacy and preallocated:
            lines.append(
                f"- legacy / preallocated, default pool, max_split_size_mb {max_split}: "
                f"{legacy / preallocated:.2f}x (vLLM #45589: 4.5x at 20; target at 20: "
                f">= {TARGET_LOAD_RATIO}x)"
            )
    return lines


def report_markdown(summary: dict) -> str:
    lines = [
        f"# gpu-check {summary['started']}",
        "",
        f"{summary['device']}; torch {summary['torch']}, triton {summary['triton']}, "
        f"commit {summary['commit']}; {'dry run' if summary['dry_run'] else 'full run'}; "
        f"{summary['seconds']:.0f} s wall"
        + (
            f"; time boxes x{summary['time_box_scale']:g} (GPU_CHECK_TIME_BOX_SCALE)."
            if summary.get("time_box_scale", 1) != 1
            else "."
        ),
        "",
    ]
    lines += _table(
        ["step", "status", "seconds (budget)"],
        [
            [f"{s['step']}: {s['title']}", s["status"], f"{s['seconds']:.0f} ({s['budget_s']})"]
            for s in summary["steps"]
        ],
    )
    steps = {step["step"]: step for step in summary["steps"]}

    def rows_of(name: str) -> list[dict]:
        return steps.get(name, {}).get("rows") or []

    if rows_of("exact"):
        lines += ["", f"## 1. Byte-exactness (CUDA vs CPU {plan.CPU_REFERENCE})", ""]
        lines += _table(
            ["shape", "strategy", "exact", "bytes differing"],
            [
                [
                    r["shape"],
                    r["strategy"],
                    r.get("exact"),
                    r.get("bytes_differing", r.get("error", "")),
                ]
                for r in rows_of("exact")
            ],
        )
    if rows_of("memory"):
        lines += [
            "",
            "## 2. CUDA memory vs dispatch-level peak",
            "",
            "requested = unrounded caching-allocator requests (should equal the dispatch "
            "peak); allocated rounds each block up to 512 B; reserved counts whole segments "
            "(2 MiB small-pool, 20 MiB for 1-10 MiB requests, 2 MiB rounding above), "
            "compared with the allocator model replaying the same call. Quantized formats: "
            "the dispatch peak is the strategy record's exact formula.",
            "",
        ]
        lines += _table(
            [
                "shape",
                "strategy",
                "dispatch",
                "requested",
                "requested = dispatch",
                "allocated",
                "reserved",
                "model reserved",
                "retries",
            ],
            [
                [
                    r["shape"],
                    r["strategy"],
                    _mib(r["dispatch_peak_bytes"]),
                    _mib(r.get("requested_peak_bytes")),
                    _agreement(r.get("requested_minus_dispatch")),
                    _mib(r.get("peak_allocated_bytes")),
                    _mib(r.get("peak_reserved_bytes")),
                    _mib(r["model_reserved_bytes"]),
                    r.get("num_alloc_retries", r.get("error", "n/a")),
                ]
                for r in rows_of("memory")
            ],
        )
    if rows_of("allocator"):
        lines += [
            "",
            f"## 3. Allocator model vs caching allocator ({plan.LOAD_SHAPE}, "
            f"{plan.ALLOCATOR_LAYERS} layers, max_split_size_mb:{plan.MAX_SPLIT_MB})",
            "",
        ]
        lines += _table(
            [
                "strategy",
                "steps",
                "match",
                "model reserved after last layer",
                "real",
                "first difference",
            ],
            [
                [
                    r["strategy"],
                    r["steps"],
                    r["match"],
                    _gib(r["model_reserved_after_layer"][-1]),
                    _gib((r.get("real_reserved_after_layer") or [None])[-1]),
                    r["first_difference"] or "",
                ]
                for r in rows_of("allocator")
            ],
        )
    if rows_of("load"):
        lines += load_lines(steps["load"])
    if not rows_of("timing") and steps.get("timing", {}).get("plan"):  # a dry run
        lines += ["", "## 5. Timing: the cells a run times", ""]
        lines += [f"- {cell}" for cell in steps["timing"]["plan"]]
    if rows_of("timing"):
        lines += [
            "",
            f"## 5. Timing (CUDA events, {plan.TIMING_REPEATS} calls each paired with a "
            "same-size device copy; x copy: median of the paired ratios)",
            "",
        ]
        lines += _table(
            ["shape", "strategy", "ms / layer", "x copy", "GB/s", "copy GB/s", "whole model (s)"],
            [
                [r["shape"], r["strategy"], r["error"], "", "", "", ""]
                if "error" in r
                else [
                    r["shape"],
                    r["strategy"],
                    f"{r['seconds'] * 1e3:.3f}",
                    f"{r['copy_ratio']:.2f}",
                    f"{r['gbps']:.0f}",
                    f"{r['copy_gbps']:.0f}",
                    f"{r['whole_model_seconds']:.4f}",
                ]
                for r in rows_of("timing")
            ],
        )
        sweep = steps["timing"].get("sweep") or []
        if sweep:
            lines += ["", "Triton constants tried (the chosen ones are in the table above):", ""]
            lines += _table(
                ["shape", "strategy", "settings", "ms / layer", "x copy"],
                [
                    [
                        r["shape"],
                        r["strategy"],
                        r["settings"],
                        r.get("error", "") or f"{r['seconds'] * 1e3:.3f}",
                        "" if "error" in r else f"{r['copy_ratio']:.3f}",
                    ]
                    for r in sweep
                ],
            )
        lines += ["", "## Targets (issues 11 and 19)", ""] + target_lines(rows_of("timing"))
        lines += ["", "## Quantized formats' targets (issue 18)", ""]
        lines += quant_target_lines(rows_of("timing"))
    if "asv" in steps:
        lines += ["", "## 6. asv", "", str({k: v for k, v in steps["asv"].items() if k != "title"})]
    return "\n".join(lines) + "\n"


def costs_record(summary: dict):
    """This run's ``loadtime.DeviceCosts``: step 4's event costs, with one layer's seconds of
    every shape and strategy step 5 timed (and step 4's for its shapes and strategies); None
    without step 4's costs (a dry run, or a step that failed before measuring them)."""
    from moe_suite.loadtime import DeviceCosts, EventCosts

    steps = {step["step"]: step for step in summary["steps"]}
    load = steps.get("load", {})
    if not load.get("events"):
        return None
    layer_seconds: dict[str, dict[str, float]] = {}
    for row in steps.get("timing", {}).get("rows") or []:
        if "error" not in row:
            layer_seconds.setdefault(row["shape"], {})[row["strategy"]] = row["seconds"]
    for label, seconds in (load.get("layer_seconds") or {}).items():
        layer_seconds.setdefault(label, {}).update(seconds)
    return DeviceCosts(
        device=summary["device"],
        torch=summary["torch"],
        commit=summary["commit"],
        date=summary["started"],
        events=EventCosts(**load["events"]),
        layer_seconds=layer_seconds,
    )
