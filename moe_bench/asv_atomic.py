"""An asv plugin: every JSON file asv writes appears whole or not at all, and a commit's result
file that a kill cut short does not stop the next run of that commit.

asv 0.6 writes its files (each commit's results, ``benchmarks.json``, ``machine.json``, the
published dashboard's data) in place with ``asv.util.write_json``: a run killed while one is
written leaves it truncated, and asv's next ``run`` of that commit stops at it ("Error parsing
JSON": ``Results.load_data`` loads the previous results first). Named in the configs' ``plugins``
(``".moe_bench.asv_atomic"``: asv imports it and calls ``setup`` before any command), this module

- writes through a hidden temporary file beside the target, renamed over it (``os.replace``,
  atomic on POSIX): a reader finds the previous file or the new one; a kill leaves at most the
  hidden ``.NAME.PID.tmp`` (git-ignored), which no asv glob (``*.json``) reads;
- lets ``Results.load_data`` take a result file that is not JSON (cut short by an older asv, a
  copy or a full disk) as absent, with one warning line: the run measures the commit anew and
  its save replaces the file. A file that is JSON but not asv's still stops the run.

No ``fsync``: this is about processes killed, not about power lost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from asv import util
from asv.console import log
from asv.results import Results

__all__ = ["setup", "atomic_write_json", "load_data_unless_cut_short"]

_write_json = util.write_json  # asv's own: it makes the folder and formats the JSON
_load_data = Results.load_data


def atomic_write_json(path, data, api_version=None, compact=False) -> None:
    """``asv.util.write_json`` into ``.NAME.PID.tmp`` beside ``path``, then renamed over it."""
    target = Path(os.path.abspath(path))
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _write_json(str(temporary), data, api_version=api_version, compact=compact)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)  # a write that raised (a full disk) leaves nothing


def load_data_unless_cut_short(self: Results, result_dir: str) -> None:
    """``Results.load_data``, except that a previous file that is not JSON counts as absent."""
    try:
        _load_data(self, result_dir)
    except util.UserError:
        path = Path(result_dir) / self._filename
        try:
            json.loads(path.read_bytes())
        except ValueError:
            log.warning(f"{path}: not JSON (cut short while written?): this run measures anew")
            return
        raise


def setup() -> None:
    """asv's plugin hook, before any command: patch asv's writer and its results loader."""
    util.write_json = atomic_write_json
    Results.load_data = load_data_unless_cut_short
