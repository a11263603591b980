"""Measure a grid's cells in a worker process, so that a cell that crashes or hangs costs only
itself.

A grid benchmark measures every cell in its ``setup_cache`` (``common.measure_cells``). Measured in
that one process, a strategy that kills the interpreter (a segfault, an abort, a CUDA error that
poisons the context) or hangs would take every figure of the grid with it. Here one worker
process measures the cells in turn and sends each result back through a pipe as soon as it has
it; the parent waits at most ``timeout_s`` for each. A cell whose worker dies (a signal, an exit)
or does not answer in time (the worker is killed) is recorded with the reason, and a fresh worker
goes on with the next cell. So does a cell whose error names CUDA (``CUDA error: ...``): the
context that raised it is unusable for the cells after it.

The worker is forked on CPU (it starts in milliseconds with torch already imported) and spawned
on CUDA (a forked child cannot use CUDA; the measure function must then be a module-level
function, which a spawned worker imports).
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import multiprocessing
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["measure_cells"]

Cell = tuple[str, str]  # (shape, strategy)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _poisons_process(error: str) -> bool:
    """True for an error after which the process cannot measure again: a sticky CUDA error
    (torch's text for an illegal memory access, a device-side assert, a launch failure)."""
    return "CUDA error" in error


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux ``prctl``; elsewhere
    nothing): asv kills a grid past its ``setup_cache`` timeout, and a hung worker must not
    outlive it holding a core or GPU memory."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _work(measure: Callable[[str, str], Any], cells: Sequence[Cell], send: Connection) -> None:
    """The worker: ``measure`` each cell in turn and send ``(ok, value or error text)``; return
    (ending the worker) after an error that poisons the process."""
    _die_with_parent()
    faulthandler.enable()  # a crash prints the Python stack on stderr (asv's log)
    # One intra-op thread: a forked child has none of its parent's OpenMP threads, and libgomp
    # hangs in the child's next parallel region once the parent has run one (a pytest process
    # that converted on CPU before). Every timed call uses one thread anyway (CPU_THREADS).
    import torch

    torch.set_num_threads(1)
    for cell in cells:
        try:
            send.send((True, measure(*cell)))
        except Exception as error:  # noqa: BLE001 (the cell's own failure, sent to the parent)
            text = f"{type(error).__name__}: {error}"
            send.send((False, text))
            if _poisons_process(text):
                return


@dataclasses.dataclass(frozen=True)
class _Outcome:
    value: Any  # the measured value, or the failure's text
    worker_gone: bool  # the worker ended (crashed, timed out, poisoned): start a fresh one


def _died(process: BaseProcess) -> str:
    """Why the worker ended without a result: the signal or the exit status."""
    process.join()
    code = process.exitcode
    if code is not None and code < 0:
        return f"the measuring process was killed by {signal.Signals(-code).name} (signal {-code})"
    return f"the measuring process exited with status {code} without a result"


def _next(receive: Connection, process: BaseProcess, timeout_s: float) -> _Outcome:
    """The worker's answer for its current cell, or why none came."""
    if not receive.poll(timeout_s):
        process.kill()
        process.join()
        return _Outcome(f"exceeded its time box of {timeout_s:g} s: stopped", True)
    try:
        ok, value = receive.recv()
    except EOFError:
        return _Outcome(_died(process), True)
    return _Outcome(value, not ok and _poisons_process(value))


def measure_cells(
    measure: Callable[[str, str], Any],
    cells: Sequence[Cell],
    *,
    timeout_s: float,
    start_method: str,
) -> dict[Cell, Any]:
    """``measure(shape, strategy)`` of each cell, in worker processes started by
    ``start_method`` (``fork`` or ``spawn``); each cell at most ``timeout_s`` seconds.

    Returns ``{cell: value}``, where a failed cell's value is the reason as one line of text:
    the exception (``"ValueError: ..."``), the signal that killed the worker, its exit status,
    or its time box.
    """
    context = multiprocessing.get_context(start_method)
    results: dict[Cell, Any] = {}
    remaining = list(cells)
    while remaining:
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_work, args=(measure, remaining, send))
        process.start()
        send.close()  # the worker's end: EOF here once the worker is gone
        try:
            while remaining:
                outcome = _next(receive, process, timeout_s)
                results[remaining.pop(0)] = outcome.value
                if outcome.worker_gone:
                    break
        finally:
            receive.close()
            if process.is_alive():
                process.kill()
            process.join()
    return results
