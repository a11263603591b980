"""One side of the engine PR's paired timing: run by ``benchmarks.engine_paired`` as ``python
worker.py`` with an asv environment's Python, the engine's commit first on ``PYTHONPATH``.

Reads one JSON request a line on stdin, ``{"shape", "strategy", "buffer"}``, and answers each
with ``{"seconds": s}`` (one call of ``moe_convert.convert`` on input buffer 0 or 1 of the
cell's timed layer, restored first where the strategy converts in place, timed by
``moe_convert.timing.time_once``) or ``{"error": text}``. The engine's own prints (vLLM's log
lines go to stdout in 0.24.0 - 0.30.0) are sent to stderr: stdout carries the answers only.
Nothing runs at import (asv imports every module of the engine suite).
"""

from __future__ import annotations

import functools
import json
import os
import sys


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the engine prints goes to stderr
    sys.stdout = sys.stderr
    import torch
    from bench_engine import CPU_THREADS, _timed_shape  # this folder: the worker's sys.path[0]

    import moe_convert
    from moe_convert.formats.bf16 import inputs
    from moe_convert.formats.catalog import shape_from_label
    from moe_convert.measuring import timing
    from moe_suite.profiles import detect_device

    device = torch.device(detect_device())
    cells: dict[tuple[str, str], tuple] = {}
    with timing.cpu_threads(CPU_THREADS, device=device):
        for line in sys.stdin:
            request = json.loads(line)
            key = request["shape"], request["strategy"]
            try:
                if key not in cells:
                    shape = _timed_shape(shape_from_label(key[0]), device.type)
                    pristine = inputs.random_weights(
                        shape.w13_shape, shape.w2_shape, seed=0, device=device
                    )
                    record = moe_convert.REGISTRY.get(key[1])
                    if record is None:
                        raise KeyError(f"strategy {key[1]!r} is not registered here")
                    buffers = [moe_convert.Layer(*(w.clone() for w in pristine)) for _ in "ab"]
                    cells[key] = pristine, buffers, record.inplace, shape.gated
                pristine, buffers, inplace, gated = cells[key]
                layer = buffers[request["buffer"]]
                if inplace:
                    for dst, src in zip(layer.values(), pristine, strict=True):
                        dst.copy_(src)
                seconds, _ = timing.time_once(
                    functools.partial(moe_convert.convert, layer, strategy=key[1], gated=gated),
                    device,
                )
                answer = {"seconds": seconds}
            except Exception as error:  # the cell's finding: the parent judges it
                answer = {"error": f"{type(error).__name__}: {error}"}
            answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
