"""asv results as one pandas table: a row per machine, commit, benchmark and parameter set.

Read through asv's own loaders (``asv.results.Results.load``, ``asv.benchmarks.Benchmarks``'s
file format via ``asv.util.load_json``), never by parsing its columns by hand. Anything missing,
corrupt or empty raises ``ResultsError`` naming the path, so that a gate never passes on
nothing; so does a figure the metrics table (``moe_suite.metrics``) does not know, a unit other
than the table's, or an infinite value: every consumer then judges only figures it has a rule for.
One exception: a commit's result file that is not JSON (empty, or cut short by a kill or a full
disk while it was written, by an asv without ``asv_atomic`` or a copy) is left out with one line
on stderr, so that one lost commit does not hide every other one. That commit counts as not
measured (``new_commits``), and asv's next run of it writes the file anew (``asv_atomic``).
Results gathered wrongly from several machines (a folder copied twice, two boxes under one name:
``moe_bench.history``) are left out in one line each, never counted twice.

Layout read (asv 0.6): ``<results_dir>/benchmarks.json`` (units, parameter names),
``<results_dir>/<machine>/machine.json`` and ``<results_dir>/<machine>/<hash8>-<env>.json``.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from asv import util
from asv.benchmarks import Benchmarks
from asv.config import Config
from asv.machine import Machine
from asv.repo import get_repo
from asv.results import Results, iter_results_for_machine

from moe_suite.metrics import METRICS

from .history import left_out

__all__ = [
    "COLUMNS",
    "ResultsError",
    "latest",
    "load_results",
    "machine_info",
    "machine_names",
    "new_commits",
    "unmeasurable",
]

#: The columns of ``load_results``, in order; parameter columns other than ``shape`` and
#: ``strategy`` (none today) would follow, then ``profile``.
COLUMNS = [
    "machine",
    "commit",
    "date",
    "measured",
    "env",
    "benchmark",
    "shape",
    "strategy",
    "value",
    "samples",
    "unit",
    "failed",
    "version",
    "profile",
]


class ResultsError(Exception):
    """asv results are missing, corrupt or empty; the message names the path."""


def _load_json(path: Path, api_version: int) -> Any:
    if not path.is_file():
        raise ResultsError(f"{path}: missing (run the suite first: scripts/bench)")
    try:
        return util.load_json(str(path), api_version=api_version)
    except util.UserError as err:
        raise ResultsError(f"{path}: corrupt asv file: {err}") from None


def machine_names(results_dir: str | Path) -> list[str]:
    """Names of the machine folders under ``results_dir`` (any folder holding a ``.json``), sorted.

    A folder of results without its ``machine.json`` is listed too: ``load_results`` then
    refuses it rather than skipping its results.
    """
    return sorted({p.parent.name for p in Path(results_dir).glob("*/*.json")})


def machine_info(results_dir: str | Path, machine: str) -> dict[str, str]:
    """What ``moe-bench machine`` recorded for ``machine``: its ``machine.json`` under
    ``results_dir`` (asv's facts, the GPU, the engines' versions, the profile)."""
    return _load_json(Path(results_dir) / machine / "machine.json", Machine.api_version)


def _param_value(text: str) -> Any:
    """asv stores parameter values as their ``repr``: ``"'qwen3-235b-a22b/tp4'"``."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _rows(result: Results, machine: str, benchmarks: dict, profile: str | None):
    date = pd.Timestamp(result.date, unit="ms", tz="UTC")
    for name in sorted(result.get_all_result_keys()):
        meta = benchmarks.get(name)
        if meta is None:  # a benchmark since removed from the suite
            continue
        params = result.get_result_params(name) or []
        values = result.get_result_value(name, params)  # one per combination; [v] without params
        # the raw samples where asv kept them (time_ benchmarks under --record-samples): a list
        # per combination, or None for the whole benchmark
        samples = result.get_result_samples(name, params) or [None] * len(values)
        names = meta.get("param_names", [])
        started = result.started_at.get(name)
        measured = pd.NaT if started is None else pd.Timestamp(started, unit="ms", tz="UTC")
        combos = zip(itertools.product(*params), values, samples, strict=True)
        for combo, value, raw in combos:
            labels = dict(zip(names, (_param_value(v) for v in combo), strict=True))
            failed = value is None
            yield {
                "machine": machine,
                "commit": result.commit_hash,
                "date": date,
                "measured": measured,
                "env": result.env_name,
                "benchmark": name,
                "shape": labels.pop("shape", None),
                "strategy": labels.pop("strategy", None),
                "value": math.nan if failed else float(value),
                "samples": None if raw is None else tuple(map(float, raw)),
                "unit": meta.get("unit"),
                "failed": failed,
                "version": result.benchmark_version.get(name),
                **labels,
                "profile": profile,
            }


def load_results(results_dir: str | Path, machine: str | None = None) -> pd.DataFrame:
    """All results under ``results_dir`` (or one ``machine``'s) as a DataFrame.

    One row per (machine, commit, env, benchmark, parameter combination), columns
    ``COLUMNS``: ``date`` a UTC ``Timestamp``, the commit's (asv's: when it was made, not
    measured); ``measured`` when asv started the benchmark (its ``started_at``, UTC; NaT where
    not recorded); ``value`` a float in ``unit`` (``seconds``,
    ``bytes``, ``ratio``, ...), NaN when the benchmark failed (``failed`` True) or was skipped
    (n/a, ``failed`` False); ``samples`` a tuple of the raw samples (floats, in ``unit``) where
    asv kept them (``time_`` benchmarks run with ``--record-samples``), else None; ``version``
    the benchmark's version as run; ``profile`` the ``profile`` key of the machine's
    ``machine.json`` (``scripts/bench`` records it), or None.

    Raises ``ResultsError`` if ``results_dir``, its ``benchmarks.json``, the machine, or any
    result are missing or corrupt, or if no result is found.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise ResultsError(
            f"{root}: no such results directory (run the suite first: scripts/bench)"
        )
    benchmarks = _load_json(root / "benchmarks.json", Benchmarks.api_version)
    excluded = left_out(root)  # a machine folder copied twice, two boxes under one name
    for line in excluded.values():
        print(f"moe-bench: {line}", file=sys.stderr)
    machines = [machine] if machine is not None else machine_names(root)
    rows = []
    for name in (m for m in machines if root / m not in excluded):
        if machine is None and not (root / name / "machine.json").is_file():
            raise ResultsError(
                f"{root / name}: results without machine.json (asv writes it beside them: copy the "
                "whole machine folder, e.g. rsync -a results/<machine>/)"
            )
        info = machine_info(root, name)
        files = sorted(p for p in (root / name).glob("*.json") if p.name != "machine.json")
        for path in (p for p in files if p not in excluded):
            try:
                result = Results.load(str(path), machine_name=name)
            except (util.UserError, KeyError, TypeError, ValueError) as err:
                if not _is_json(path):  # empty or cut short: one commit lost, not the history
                    print(
                        f"moe-bench: {path}: left out, not a readable asv result (empty, or cut "
                        f"short while it was written); commit {path.name[:8]} counts as not "
                        "measured: measure it again (scripts/nightly does where it is the newest)",
                        file=sys.stderr,
                    )
                    continue
                raise ResultsError(f"{path}: corrupt asv result file: {err}") from None
            rows.extend(_rows(result, name, benchmarks, info.get("profile")))
    if not rows:
        where = f"machine {machine!r} in " if machine else ""
        raise ResultsError(f"{where}{root}: no benchmark results found")
    frame = pd.DataFrame(rows)
    _check_metrics(frame, root)
    extra = [c for c in frame.columns if c not in COLUMNS]
    return frame[COLUMNS[:-1] + extra + ["profile"]]


def latest(frame: pd.DataFrame, commit: str | None = None) -> pd.DataFrame:
    """The rows of ``commit`` (a hash prefix), or of each machine's most recent commit."""
    if commit is not None:
        return frame[frame["commit"].str.startswith(commit)]
    newest = frame.groupby("machine")["date"].transform("max")
    return frame[frame["date"] == newest]


def _is_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return False
    return True


def _check_metrics(frame: pd.DataFrame, root: Path) -> None:
    """Raise ``ResultsError`` for a benchmark not in ``METRICS``, a wrong unit or an inf value."""
    unknown = sorted(name for name in set(frame["benchmark"]) if name not in METRICS)
    if unknown:
        raise ResultsError(
            f"{root}: benchmark(s) not in the metrics table: {', '.join(unknown)}; add each to "
            "moe_suite/metrics.py (unit, lower-is-better, gate rule, display unit)"
        )
    units = frame.drop_duplicates("benchmark").set_index("benchmark")["unit"]
    for name, unit in units.items():
        if unit != METRICS[name].unit:
            raise ResultsError(
                f"{root}: {name} is in unit {unit!r}, the metrics table says "
                f"{METRICS[name].unit!r}: fix the benchmark or the table (moe_suite/metrics.py)"
            )
    infinite = frame[frame["value"].isin([math.inf, -math.inf])]
    if not infinite.empty:
        row = infinite.iloc[0]
        raise ResultsError(
            f"{root}: infinite value of {row['benchmark']} {row['shape'] or ''} "
            f"{row['strategy'] or ''} at commit {row['commit'][:8]} on {row['machine']} "
            f"({len(infinite)} infinite value(s) in all)"
        )


def new_commits(config: str | Path, machine: str) -> list[str]:
    """Commits ``asv run`` should measure next on ``machine``, newest first; [] when none.

    asv's own ``NEW`` with this machine's history instead of every machine's: the commits of the
    configured branches newer than the latest one in ``<results_dir>/<machine>/``
    (``Repo.get_new_branch_commits``). A machine without history gets the checkout's ``HEAD``
    only (measuring every past commit would take days). Commits the suite cannot measure
    (``unmeasurable``) are left out. Empty when ``HEAD`` is measured: a night without a new
    commit, not an error.
    """
    conf = Config.load(str(config))
    repo = get_repo(conf)
    measured = {r.commit_hash for r in iter_results_for_machine(conf.results_dir, machine)}
    if not measured:
        commits = [repo.get_hash_from_name("HEAD")]
    else:
        commits = repo.get_new_branch_commits(conf.branches, measured)
    too_old = set(unmeasurable(config, commits))
    return [commit for commit in commits if commit not in too_old]


def unmeasurable(config: str | Path, revisions: list[str]) -> list[str]:
    """The revisions of ``revisions`` older than the config's ``oldest_commit``: not it and not
    its descendants (none where the config has no ``oldest_commit``).

    The suite's ``benchmarks/`` come from the checkout while asv builds the measured commit's
    library, so a commit from before what the benchmarks import cannot be measured: every
    benchmark of it would fail. ``ResultsError`` for a revision git does not know.
    """
    conf = Config.load(str(config))
    oldest = getattr(conf, "oldest_commit", None)
    if not oldest:
        return []
    root = Path(config).resolve().parent / conf.repo
    older = []
    for revision in revisions:
        # exit 0: ``oldest`` is the revision or one of its ancestors; 1: it is not; else: unknown
        done = subprocess.run(
            ["git", "-C", str(root), "merge-base", "--is-ancestor", oldest, revision],
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 1):
            raise ResultsError(f"{revision!r} is no commit of {root}: {done.stderr.strip()}")
        if done.returncode == 1:
            older.append(revision)
    return older
