"""One side of the engine PR's paired timing: run by ``benchmarks.engine_paired`` as ``python
worker.py`` with an asv environment's Python, the engine's commit first on ``PYTHONPATH``.

Reads one JSON request a line on stdin and answers each with one JSON line on stdout:

- ``{"shape", "strategy"}``: make the cell's timed layer (``timing.conversion``: the layer of
  any format that ``timing.time_layer`` times, a ``model/tpN`` shape at the suite's timed size,
  ``bench_engine._timed_shape``), twice, as input buffers 0 and 1 (the previous cell's freed:
  the parent times one cell at a time); ``{"ready": true}``, or
  ``{"missing": why}`` where the strategy is not registered at this commit;
- ``{"shape", "strategy", "buffer"}``: one call on buffer 0 or 1 (restored first where the
  strategy converts in place), timed by ``timing.time_once``: ``{"seconds": s}``.

Either answers ``{"error": text}`` where the cell raises, or where the engine's function no
longer honours the form its code reads as (``engines.form_breaches``: the breach's line). The
engine's own prints (vLLM's log lines go to stdout in 0.24.0 - 0.30.0) are sent to stderr:
stdout carries the answers only. Nothing runs at import (asv imports every module of the engine
suite).
"""

from __future__ import annotations

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
    from moe_convert.formats.catalog import shape_from_label
    from moe_convert.formats.engines import form_breaches
    from moe_convert.measuring import timing
    from moe_suite.profiles import detect_device

    device = torch.device(detect_device())
    cells: dict[tuple[str, str], tuple] = {}
    with timing.cpu_threads(CPU_THREADS, device=device):
        for line in sys.stdin:
            request = json.loads(line)
            key = request["shape"], request["strategy"]
            try:
                with form_breaches() as breaches:
                    if "buffer" not in request:
                        cells.clear()  # the parent times one cell at a time: free the last
                        if key[1] not in moe_convert.REGISTRY:
                            answer = {"missing": f"strategy {key[1]!r} is not registered"}
                        else:
                            shape = _timed_shape(shape_from_label(key[0]), device.type)
                            made = [timing.conversion(shape, key[1], device) for _ in "ab"]
                            tensors, _, inplace = made[0]
                            pristine = [t.clone() for t in tensors] if inplace else []
                            cells[key] = made, pristine
                            answer = {"ready": True}
                    else:
                        made, pristine = cells[key]
                        tensors, run, _ = made[request["buffer"]]
                        timing.restore(tensors, pristine)
                        answer = {"seconds": timing.time_once(run, device)[0]}
                if breaches:  # the commit's finding: the parent fails the cell with it
                    answer = {"error": "; ".join(breaches)}
            except Exception as error:  # the cell's finding: the parent judges it
                answer = {"error": f"{type(error).__name__}: {error}"}
            answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
