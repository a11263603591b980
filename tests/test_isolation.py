"""Fault injection in a grid benchmark's cells (``benchmarks.isolation`` through
``common.measure_cells``, which every grid's ``setup_cache`` measures with): a cell that aborts,
segfaults, hangs or hits a sticky CUDA error fails alone, with the reason, and every other cell's
figures equal a clean run's exactly.

Real worker processes and real signals: the faulty cell really calls ``abort()``, really reads
address 0, really sleeps past its time box. The grid is two shapes and three strategies
whose traffic counts take milliseconds once warmed up (this process warms up; workers are forked
from it): seconds a run.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package
from benchmarks import common, formats  # noqa: E402

SHAPES = ("qwen3-30b-a3b/tp1", "deepseek-v3/tp8")
STRATEGIES = ("strided_copy", "legacy", "batched")
FAULTY = ("deepseek-v3/tp8", "legacy")  # cells are measured before it and after it
CUDA_ERROR = "CUDA error: an illegal memory access was encountered"


def _abort() -> None:
    os.abort()


def _segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _hang() -> None:
    time.sleep(3600)


def _cuda_error() -> None:
    raise RuntimeError(CUDA_ERROR)  # torch's text for a sticky CUDA error


FAULTS = {"abort": _abort, "segfault": _segfault, "hang": _hang, "cuda error": _cuda_error}


CELLS = [(shape, strategy) for shape in SHAPES for strategy in STRATEGIES]


def _grid(measure, timeout_s: float = common.CELL_TIMEOUT_S) -> dict:
    return common.measure_cells(measure, CELLS, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def clean() -> dict:
    """The Traffic grid's exact figures of a run without a fault."""
    formats._traffic(*FAULTY)  # warm up here: every forked worker starts warm
    return _grid(formats._traffic)


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("abort", "killed by SIGABRT (signal 6)"),
        ("segfault", "killed by SIGSEGV (signal 11)"),
        ("hang", "exceeded its time box of 5 s"),
        ("cuda error", f"RuntimeError: {CUDA_ERROR}"),
    ],
)
def test_a_faulty_cell_costs_only_itself(clean, fault, reason):
    def measure(shape: str, strategy: str):
        if (shape, strategy) == FAULTY:
            FAULTS[fault]()
        return formats._traffic(shape, strategy)

    started = time.monotonic()
    # a short time box for the hang alone: a worker forked under CI's load once passed 5 s before
    # its cell's segfault ran, and was stopped by the box instead (a fault read as another)
    measured = _grid(measure, timeout_s=5 if fault == "hang" else 30)
    assert time.monotonic() - started < 60
    assert reason in measured[FAULTY]
    assert {cell: value for cell, value in measured.items() if cell != FAULTY} == {
        cell: value for cell, value in clean.items() if cell != FAULTY
    }
    assert len(measured) == len(clean) and all(
        not isinstance(value, str) for value in clean.values()
    )
    failed = re.escape(f"{FAULTY[0]} {FAULTY[1]} failed: ") + ".*" + re.escape(reason)
    with pytest.raises(RuntimeError, match=failed):
        formats._cell(measured, *FAULTY)  # the cell's figures fail in asv, saying why


def test_cells_after_a_sticky_cuda_error_run_in_a_fresh_process():
    ordinary = (SHAPES[0], "batched")  # before FAULTY

    def measure(shape: str, strategy: str) -> int:
        if (shape, strategy) == FAULTY:
            _cuda_error()
        if (shape, strategy) == ordinary:
            raise ValueError("an ordinary error")  # the process stays usable: no new one
        return os.getpid()

    measured = _grid(measure)
    cells = list(measured)
    before = {measured[c] for c in cells[: cells.index(FAULTY)] if c != ordinary}
    after = {measured[c] for c in cells[cells.index(FAULTY) + 1 :]}
    assert len(before) == 1 and len(after) == 1 and before != after
    assert os.getpid() not in before | after  # measured in workers, never in the asv process
    assert measured[ordinary] == "ValueError: an ordinary error"


_KILLED_PARENT = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks import common


def hang(shape, strategy):
    print(os.getpid(), flush=True)  # the worker's pid, for the test
    time.sleep(3600)

common.measure_cells(hang, [("qwen3-30b-a3b/tp1", "strided_copy")])
"""


def test_a_worker_dies_with_the_process_that_measures_the_grid():
    """asv kills a grid past its setup_cache timeout: the hung worker goes with it."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT, str(ROOT)], stdout=subprocess.PIPE, text=True
    )
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(worker):
        os.kill(worker, signal.SIGKILL)  # not left running after the test
        raise AssertionError(f"worker {worker} outlived its parent")


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, reaped by init, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_spawned_worker_of_cuda_measures_the_same(clean):
    """On CUDA the worker is spawned (a fork cannot use CUDA): it imports the grid's module-level
    measure function and gives the forked worker's figures."""
    from benchmarks import isolation

    cell = (SHAPES[1], "strided_copy")
    spawned = isolation.measure_cells(formats._traffic, [cell], timeout_s=120, start_method="spawn")
    assert spawned == {cell: clean[cell]}
