"""How noisy the machine was during the run: a calibration copy recorded beside every result.

Time figures of unchanged code move with the machine's load (2x on the shared 2-core machine
when another job runs). This records the spread of a plain same-size ``copy_`` on the suite's
device in every run, so a reader of the history (summary, dashboard) can tell a noisy night from
a regression. Never gated: it describes the machine, not the code.
"""

from __future__ import annotations

from . import common, library

timing = library.module("measuring.timing")


class Noise:
    """Slowest / fastest of 15 timed 64 MiB ``copy_`` (``measuring.timing.calibration_copy``)."""

    version = "1"
    unit = "ratio"

    def track_copy_spread(self) -> float:
        return timing.calibration_copy(device=common.device(), threads=common.CPU_THREADS).spread
