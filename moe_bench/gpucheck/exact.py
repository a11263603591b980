"""Step 1, ``exact``: every strategy on CUDA against the CPU result, byte for byte, then the
quantized formats (the torch 128x4 swizzle against FlashInfer's ``block_scale_interleave``, every
quantized strategy against its format's ``-legacy``).
"""

from __future__ import annotations

import os
import time

from . import plan


def step_exact(dry_run: bool) -> dict:
    import torch

    from moe_convert import Layer, convert
    from moe_convert.formats.bf16.inputs import random_weights

    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for label in plan.CHECK_SHAPES:
        shape = plan.shape(label)
        w13, w2 = random_weights(shape.w13_shape, shape.w2_shape, seed=1)
        start = time.perf_counter()
        ref13, ref2 = convert(
            Layer(w13, w2), strategy=plan.CPU_REFERENCE, gated=shape.gated
        ).values()
        cpu_s = time.perf_counter() - start
        print(f"[exact] {label}: CPU reference ({plan.CPU_REFERENCE}) in {cpu_s:.1f} s", flush=True)
        if dry_run:
            plan.record(
                rows,
                {
                    "shape": label,
                    "strategy": f"{plan.CPU_REFERENCE} (cpu)",
                    "cpu_reference_s": cpu_s,
                    "exact": None,
                },
            )
            continue
        device = plan.cuda_device()
        ref13, ref2 = ref13.to(device), ref2.to(device)
        pristine13, pristine2 = w13.to(device), w2.to(device)
        del w13, w2
        for name, record in plan.strategies(shape).items():
            try:
                in13, in2 = (
                    (pristine13.clone(), pristine2.clone())
                    if record.inplace
                    else (pristine13, pristine2)
                )
                out13, out2 = convert(Layer(in13, in2), strategy=name, gated=shape.gated).values()
                torch.cuda.synchronize(device)
                bad = int(
                    (out13.view(torch.uint8) != ref13.view(torch.uint8)).sum()
                    + (out2.view(torch.uint8) != ref2.view(torch.uint8)).sum()
                )
                plan.record(
                    rows,
                    {
                        "shape": label,
                        "strategy": name,
                        "exact": bad == 0,
                        "bytes_differing": bad,
                        "cpu_reference_s": cpu_s,
                    },
                )
                del in13, in2, out13, out2
            except Exception as error:  # one strategy's failure must not hide the others'
                plan.record(
                    rows,
                    {
                        "shape": label,
                        "strategy": name,
                        "exact": False,
                        "error": f"{type(error).__name__}: {error}",
                    },
                )
            print(f"[exact] {label} {name}: {rows[-1].get('exact')}", flush=True)
        del ref13, ref2, pristine13, pristine2
        torch.cuda.empty_cache()
    rows += _quantized_exact(dry_run)
    ok = all(row["exact"] in (True, None) for row in rows)
    return {"ok": ok, "rows": rows}


def _layer_to(layer, device):
    """A copy of the ``Layer`` on ``device`` (strategies may write their input)."""
    from moe_convert import Layer

    return Layer(**{name: t.to(device, copy=True) for name, t in layer.items()})


def _quantized_exact(dry_run: bool) -> list[dict]:
    """The quantized formats' part of step 1 (issue 18): ``swizzle.block_scale_interleave``
    against FlashInfer's CUDA ``block_scale_interleave`` on FlashInfer's own test shapes, then
    every quantized strategy on CUDA against its format's ``-legacy`` on CPU (FlashInfer's
    helpers, which take a BF16 layer: against ``-legacy`` of their own quantizer's layer), for
    ``plan.QUANT_CHECK_EXPERTS`` experts of each ``plan.quant_check_shapes()``. A row says where
    FlashInfer is absent; the dry run computes nothing (the CPU tests check the same on CPU)."""
    import torch

    from moe_convert import convert, layer_tensors
    from moe_convert.formats.swizzle import block_scale_interleave
    from moe_convert.formats.table import reference_conversion, strategy_input

    if dry_run:
        return []
    rows: list[dict] = []
    device = plan.cuda_device()
    try:
        from flashinfer import block_scale_interleave as flashinfer_interleave
    except ImportError as error:
        rows.append(
            {
                "shape": "128x4 swizzle",
                "strategy": "FlashInfer block_scale_interleave",
                "exact": None,
                "error": f"FlashInfer absent, not compared ({error})",
            }
        )
        flashinfer_interleave = None
    cells = [(dims, dtype) for dims in plan.SWIZZLE_CHECK_SHAPES for dtype in ("uint8", "bfloat16")]
    for dims, dtype in cells if flashinfer_interleave else ():
        # uint8: NVFP4's, MXFP4's, MXFP8's scales; bfloat16: MXINT4's (random bytes, compared as
        # bytes: a NaN is a NaN's bytes)
        item = getattr(torch, dtype).itemsize
        raw = torch.randint(0, 256, (*dims[:-1], dims[-1] * item), dtype=torch.uint8, device=device)
        sf = raw.view(getattr(torch, dtype))
        try:
            ours, theirs = block_scale_interleave(sf), flashinfer_interleave(sf)
            bad = int((ours.view(torch.uint8) != theirs.view(torch.uint8)).sum())
            row = {"exact": bad == 0, "bytes_differing": bad}
        except Exception as error:  # a wrong output size, an unsupported GPU
            row = {"exact": False, "error": f"{type(error).__name__}: {error}"}
        rows.append(
            {"shape": f"{dtype} scales {dims}", "strategy": "block_scale_interleave", **row}
        )
    for label in plan.quant_check_shapes():
        shape = plan.shape(label).with_experts(plan.QUANT_CHECK_EXPERTS)
        layer = layer_tensors(shape, "cpu")

        legacy = convert(_layer_to(layer, "cpu"), strategy=shape.fmt.upstream)
        for name, record in plan.strategies(shape).items():
            try:
                if record.takes == shape.format:
                    got = convert(_layer_to(layer, device), strategy=name)
                    want = legacy
                else:  # FlashInfer's helpers: a BF16 layer in, -legacy of what they quantize
                    bf16 = strategy_input(shape, name, device)
                    want = reference_conversion(shape, name)[1](bf16)
                    got = convert(bf16, strategy=name, gated=shape.gated)
                bad = sum(
                    int((got[f].cpu().view(torch.uint8) != t.cpu().view(torch.uint8)).sum())
                    for f, t in want.items()
                )
                row = {"exact": bad == 0, "bytes_differing": bad}
            except Exception as error:  # one strategy's failure must not hide the others'
                row = {"exact": False, "error": f"{type(error).__name__}: {error}"}
            rows.append({"shape": f"{label} (E {shape.experts})", "strategy": name, **row})
            print(f"[exact] {label} {name}: {rows[-1]['exact']}", flush=True)
    return rows
