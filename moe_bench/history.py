"""Results gathered from several machines into one ``results/``: what cannot be one history.

The nightly on N GPU boxes and the CPU boxes each write ``results/<machine>/``; the folders are
gathered into one ``results/`` (committed, or rsync'd) and published together. Three mistakes
of gathering, each reported in one line and never silently dropped or counted twice:

- a machine folder copied twice (``results/gb200/`` and ``results/gb200-copy/``): the copy's
  ``machine.json`` names another folder's machine; its results are left out (``left_out``);
- two boxes under one machine name (two ``gb200`` rsync'd into one folder): a result file whose
  hardware (``HARDWARE``, recorded by asv in every result) differs from its folder's
  ``machine.json``; left out, since its figures are another box's (``left_out``);
- a result of a commit that is not on the configured branches (``main``): asv's dashboard graphs
  branch commits only, so it is not on the dashboard; the summary and the gate still read it
  (``off_branch``, reported by ``moe-bench publish``).
"""

from __future__ import annotations

from pathlib import Path

from asv import util
from asv.config import Config
from asv.repo import get_repo

__all__ = ["HARDWARE", "left_out", "off_branch"]

#: The machine fields that tell one box from another (asv's and ``moe_bench.machine``'s). Not
#: ``ram``: hosts of one kind report it a few bytes apart (25,276,502,016 and 25,275,990,016 on
#: two of this project's 2-core machines, issue 22), and a faster or slower host of the same kind
#: shares the history, its seconds judged by ``moe_bench.hardware``'s copy rule.
HARDWARE = ("arch", "cpu", "num_cpu", "gpu", "gpus")


def _result_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json") if p.name != "machine.json")


def _read(path: Path) -> dict | None:
    """The JSON of ``path``, or None where it is unreadable (``results`` reports those)."""
    try:
        return util.load_json(str(path))
    except util.UserError:
        return None


def left_out(results_dir: str | Path) -> dict[Path, str]:
    """The machine folders and result files under ``results_dir`` that are not this folder's
    machine, each with the one line that says why: ``{path: line}``."""
    root = Path(results_dir)
    lines: dict[Path, str] = {}
    for info_path in sorted(root.glob("*/machine.json")):
        folder = info_path.parent
        info = _read(info_path) or {}
        named = info.get("machine", folder.name)
        if named != folder.name:
            lines[folder] = (
                f"{folder}: left out: its machine.json names machine {named!r}, another folder's "
                f"(a copy of results/{named}/?); gather each machine folder once, under its name"
            )
            continue
        for path in _result_files(folder):
            params = (_read(path) or {}).get("params", {})
            differ = [f for f in HARDWARE if f in params and f in info and params[f] != info[f]]
            if differ:
                field = differ[0]
                lines[path] = (
                    f"{path}: left out: measured on other hardware than {info_path} ({field} "
                    f"{params[field]!r}, not {info[field]!r}): two boxes under one machine name; "
                    "name each apart (MOE_BENCH_MACHINE) and gather each folder once"
                )
    return lines


def off_branch(config: str | Path) -> list[str]:
    """One line per result file under the config's ``results_dir`` whose commit is on none of
    its ``branches``: the dashboard leaves it out."""
    conf = Config.load(str(config))
    repo = get_repo(conf)
    on_branch = {c for branch in conf.branches for c in repo.get_branch_commits(branch)}
    lines = []
    for path in sorted(Path(conf.results_dir).glob("*/*.json")):
        commit = (_read(path) or {}).get("commit_hash") if path.name != "machine.json" else None
        if commit and commit not in on_branch:
            lines.append(
                f"{path}: commit {commit[:8]} is not on {', '.join(conf.branches)}: not on the "
                "dashboard (asv graphs branch commits only); the summary and the gate read it"
            )
    return lines
