"""The engine dashboard's front page: an engine's own preparation of every format over its commits.

An engine config's results (``moe_bench.engine``: asv's ``repo`` is the engine's history) answer
what a vLLM maintainer asks first: where in the engine's history did its preparation of each format
change, and how. ``engine_blocks`` says it as ``moe_bench.document`` blocks, which
``report.write_front_page`` renders as the dashboard's front page (the main suite's page, the same
template and links, the blocks on the engine axis): the engine, its branch and the measured range
in the title; when the newest commit was measured (asv's ``started_at``: a result's ``date`` is the
commit's); per format (``moe_suite.formats.titled``' order) the engine's own cell
(``engine.reference_cell``) at the first measured commit, at each commit where a figure of it
stepped, with the commit's subject, and at the newest; then the reference lines at the newest
commit, never judged (the same code at every commit of the engine).

A step: an exact figure's any change; a time-derived one's by the metrics table's rule for a
history (``metrics.judge``: the copy ratio beyond ``NOISE_FACTOR``); absolute seconds never (one
machine name may cover hosts of different speed, as asv's regressions view has it); a cell that
fails, or measures again after failing.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from asv.config import Config
from asv.graph import Graph
from asv.repo import get_repo

from moe_suite.formats import titled
from moe_suite.metrics import ENGINE_FIGURES, FAILING, METRICS, NOISE_FACTOR, judge

from .document import NA, Block, Cell
from .engine import ENGINES, reference_cell
from .engine_env import KEY, read_measured
from .results import ResultsError
from .units import human

__all__ = [
    "EngineAxis",
    "EngineCommit",
    "engine_axis",
    "engine_blocks",
    "engine_commits",
    "engine_title",
    "figure_steps",
    "history_table",
    "reference_table",
    "write_environments",
    "write_subjects",
]

#: The engine suite's figures by ``<class>.<method>`` (each module's are named alike), in the
#: metrics table's order, with their columns' headers.
FIGURES = {
    name.partition(".")[2]: METRICS[name].title
    or name.rpartition(".track_")[2].removesuffix("_bytes").replace("_", " ")
    for name in ENGINE_FIGURES
}
#: What a step is, said once on the page.
STEP_RULE = (
    f"a step: any change of an exact figure (peak, traffic, launches); a copy ratio beyond "
    f"{NOISE_FACTOR:g}x (no paired run in a history); absolute seconds shown, never judged (one "
    "machine name may cover hosts of different speed); a cell that fails"
)


@dataclass(frozen=True)
class EngineAxis:
    """An engine config's history: ``engine`` (``ENGINES``' key), its ``branch``, the git
    directory asv reads it from (``repo``: the checkout, or asv's mirror of a URL) and what was
    recorded beside its results of each commit's environment (``engine_env.read_measured``)."""

    engine: str
    branch: str
    repo: str
    environments: dict[str, dict[str, str]]

    def commits(self, measured: set[str]) -> list[EngineCommit]:
        """``engine_commits`` of this history."""
        return engine_commits(self.repo, self.branch, measured, self.environments)


def engine_axis(config: Path) -> EngineAxis | None:
    """``config``'s engine history, or None where it is no engine config (no ``engine`` key:
    the suite's own)."""
    conf = Config.load(str(config))
    engine = getattr(conf, "engine", None)
    if engine is None:
        return None
    environments = read_measured(conf.results_dir)
    return EngineAxis(engine, conf.branches[0], get_repo(conf)._path, environments)


@dataclass(frozen=True)
class EngineCommit:
    """A measured commit of the engine: its hash, ``label`` (``git describe --tags``: the
    release, or the release and the commits since), ``subject`` (its first line) and
    ``environment``: what its environment held beside the engine (``FlashInfer 0.7.4, torch
    2.13.0+cpu``; empty where not recorded)."""

    hash: str
    label: str
    subject: str
    environment: str = ""

    @property
    def title(self) -> str:
        """``v0.34.0 (FlashInfer 0.7.4, torch 2.13.0+cpu): <subject>``."""
        held = f" ({self.environment})" if self.environment else ""
        return f"{self.label}{held}: {self.subject}"


#: How the page names the versions recorded of an environment (``engine_env``'s keys).
DISTRIBUTIONS = {KEY: "FlashInfer", "torch": "torch"}


def engine_commits(
    repo: str, branch: str, measured: set[str], environments: dict | None = None
) -> list[EngineCommit]:
    """The commits of ``measured`` on ``branch``'s first-parent history in the engine's git
    checkout ``repo``, oldest first (asv graphs those alone, in that order), each with what
    ``environments`` (``engine_env.read_measured``) recorded of it."""
    order = _git(repo, "rev-list", "--first-parent", "--reverse", branch).split()
    hashes = [commit for commit in order if commit in measured]
    if not hashes:
        return []
    labels = _git(repo, "describe", "--tags", "--always", *hashes).splitlines()
    subjects = _git(repo, "log", "--no-walk=unsorted", "--format=%s", *hashes).splitlines()
    held = [_environment((environments or {}).get(commit, {})) for commit in hashes]
    return [EngineCommit(*row) for row in zip(hashes, labels, subjects, held, strict=True)]


def _environment(facts: dict[str, str]) -> str:
    """``FlashInfer 0.7.4, torch 2.13.0+cpu``: the versions ``facts`` (one commit's
    ``read_measured``) record of what its environment held beside the engine."""
    return ", ".join(
        f"{name} {facts[key]}" for key, name in DISTRIBUTIONS.items() if facts.get(key)
    )


def _git(repo: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def engine_title(engine: str, branch: str, commits: list[EngineCommit]) -> str:
    """``vLLM main: v0.29.0 .. v0.34.0, 5 commits``."""
    span = commits[0].label if len(commits) == 1 else f"{commits[0].label} .. {commits[-1].label}"
    return f"{ENGINES[engine].title} {branch}: {span}, {len(commits)} commits"


def engine_blocks(
    df: pd.DataFrame, engine: str, branch: str, commits: list[EngineCommit]
) -> list[Block]:
    """The engine front page's blocks: the title and the run's line, then per machine (newest run
    first) and format a block of the engine's own cell over ``commits`` (``history_table``)
    and one of the reference lines at the newest commit. ``df``: ``load_results`` of the
    engine config's results (its commits not in ``commits`` are left out, as asv's graphs leave
    them); ``ResultsError`` where none of ``commits`` is in it."""
    order = {c.hash: i for i, c in enumerate(commits)}
    data = df[df["commit"].isin(order)].copy()
    if data.empty:
        raise ResultsError(
            f"no results of a commit of {branch}: measure one (moe-bench engine-nightly)"
        )
    data["figure"] = data["benchmark"].str.partition(".")[2]
    data["format"] = data["benchmark"].map(_format)
    data["order"] = data["commit"].map(order)
    runs = data.groupby("machine")["measured"].max().sort_values(ascending=False)
    lines = [
        f"`{machine}` ran last on {_when(at)} (asv's start of a benchmark; the commits are "
        f"dated {_span(data[data['machine'] == machine]['date'])})."
        for machine, at in runs.items()
    ]
    lines += [_environments(commits)] if any(c.environment for c in commits) else []
    blocks = [Block(engine_title(engine, branch, commits), level=1, text=tuple(lines))]
    own = f"`{engine}`"
    for machine in runs.index:
        of_machine = data[data["machine"] == machine]
        blocks.append(
            Block(
                f"`{machine}`: {ENGINES[engine].title}'s own preparation of each format",
                text=(
                    f"Per format, {own} (the engine's code at each commit) at the first measured "
                    f"commit, at each commit where it stepped and at the newest; {STEP_RULE}. "
                    "Then the reference lines: this suite's transcriptions (and engines installed "
                    "beside it), the same code at every commit, drawn on the same graphs, never "
                    "judged. Every figure links to its graph.",
                ),
            )
        )
        for fmt, title in titled(of_machine["format"].dropna()):
            rows = of_machine[of_machine["format"] == fmt]
            shapes = ", ".join(f"`{s}`" for s in dict.fromkeys(rows["shape"]))
            reference = rows["strategy"].map(lambda s: reference_cell(s, engine))
            table, steps = history_table(rows[~reference], commits)
            said = (
                f"{own}: n/a at every commit (no adapter of the engine's function ran)"
                if table is None
                else f"{own}: {steps} step(s) over {len(commits)} commits"
            )
            blocks.append(Block(f"{title} ({shapes})", level=3, text=(said + ".",), table=table))
            references, at, missing = reference_table(rows[reference])
            if references is not None:
                line = f"Reference lines at {commits[at].label}, the same code at every commit"
                line += f" ({', '.join(f'`{s}`' for s in missing)}: n/a)" if missing else ""
                blocks.append(Block(text=(line + ":",), table=references))
    return blocks


def _environments(commits: list[EngineCommit]) -> str:
    """What the environments held beside the engine, per run of commits holding the same."""
    runs = [list(group) for _, group in itertools.groupby(commits, lambda c: c.environment)]
    said = [
        f"{run[0].environment or 'not recorded'} ("
        + (run[0].label if len(run) == 1 else f"{run[0].label} .. {run[-1].label}")
        + ")"
        for run in runs
    ]
    return "Beside the engine: " + "; ".join(said) + "."


def _format(benchmark: str) -> str:
    """The engine suite's module's format: ``bench_engine`` BF16's, ``bench_<format>``'s."""
    module = benchmark.partition(".")[0]
    return "bf16" if module == "bench_engine" else module.removeprefix("bench_")


def _when(at: pd.Timestamp) -> str:
    return "an unrecorded date" if pd.isna(at) else f"{at:%Y-%m-%d %H:%M} UTC"


def _span(dates: pd.Series) -> str:
    first, last = dates.min(), dates.max()
    return f"{first:%Y-%m-%d}" if first == last else f"{first:%Y-%m-%d} .. {last:%Y-%m-%d}"


def history_table(
    rows: pd.DataFrame, commits: list[EngineCommit]
) -> tuple[pd.DataFrame | None, int]:
    """The engine's own cell of one format over the commits (``rows``: its figures, one shape):
    a row at the first commit where it was measured, at each commit where a figure stepped
    (``figure_steps``) and at the newest; columns commit, subject, then each figure in human units,
    each a ``Cell`` linked to its graph, a stepped one with its change (``⚠`` where worse by
    the rule). Returns ``(table, steps)``; ``(None, 0)`` where the cell is n/a throughout."""
    ran = rows["value"].notna() | rows["failed"]
    if not ran.any():
        return None, 0
    changes = figure_steps(rows)
    measured = sorted(set(rows.loc[ran, "order"]))
    shown = sorted({measured[0], measured[-1], *changes})
    table = []
    for index in shown:
        commit = commits[index]
        at = rows[rows["order"] == index]
        line = {"commit": f"{commit.label} ({commit.hash[:8]})", "subject": commit.subject}
        for figure, header in FIGURES.items():
            line[header] = _figure_cell(at[at["figure"] == figure], changes.get(index, {}))
        table.append(line)
    return pd.DataFrame(table), len(changes)


def figure_steps(rows: pd.DataFrame) -> dict[int, dict[str, tuple[str, float]]]:
    """commit index -> figure -> (status, new / previous) of each figure of ``rows`` (one cell)
    that stepped there against its previous measured commit: ``judge``'s ``regressed``,
    ``improved`` or ``changed``, ``failed`` where it failed (after a value, or first), or
    ``measured again`` after failing."""
    steps: dict[int, dict[str, tuple[str, float]]] = {}
    for figure, series in rows.sort_values("order").groupby("figure", sort=False):
        m = METRICS[series["benchmark"].iloc[0]]
        previous = None  # (value, failed) of the previous commit that measured or failed
        for row in series.itertuples():
            if not row.failed and math.isnan(row.value):
                continue  # n/a: not registered at that commit
            status = None
            if row.failed:
                status = None if previous is not None and previous[1] else "failed"
            elif previous is not None and previous[1]:
                status = "measured again"
            elif previous is not None and not m.host_bound:
                verdict = judge(m, previous[0], row.value)
                status = verdict if verdict in ("regressed", "improved", "changed") else None
            if status is not None:
                # no ratio from 0 (a reload class's 0 -> 1): the cell says its status instead
                change = (
                    row.value / previous[0]
                    if previous and not previous[1] and previous[0]
                    else math.nan
                )
                steps.setdefault(row.order, {})[figure] = (status, change)
            previous = (row.value, row.failed)
    return steps


def _figure_cell(at: pd.DataFrame, stepped: dict[str, tuple[str, float]]) -> Cell:
    """One figure of one commit (``at``: its row, or none) as a linked ``Cell``: a failure reads
    ``failed``; a step carries its change, marked ``⚠`` where ``FAILING``."""
    if at.empty:
        return Cell(NA)
    row = at.iloc[0]
    m = METRICS[row["benchmark"]]
    link = {"benchmark": row["benchmark"], "machine": row["machine"]}
    if row["failed"]:
        return Cell("failed", "⚠", **link)
    text = human(row["value"], m.display)
    status, change = stepped.get(row["figure"], (None, math.nan))
    how = "" if math.isnan(change) else f"{change - 1:+.{0 if abs(change - 1) >= 0.01 else 2}%}"
    if status in FAILING:
        return Cell(text, f"⚠ {how}".strip(), **link)
    if status is not None:
        return Cell(f"{text} ({how or status})", **link)
    return Cell(text, **link)


def reference_table(rows: pd.DataFrame) -> tuple[pd.DataFrame | None, str, tuple[str, ...]]:
    """The reference lines of one format at the newest commit that measured them: a row per
    strategy measured there (in the grid's order), each figure a linked ``Cell``, none marked;
    that commit's index; and the strategies n/a there (an engine not installed). ``(None, -1,
    ())`` where none was ever measured."""
    measured = rows[rows["value"].notna()]
    if measured.empty:
        return None, -1, ()
    index = measured["order"].max()
    newest = rows[rows["order"] == index]
    table, missing = [], []
    for strategy, cells in newest.groupby("strategy", sort=False):
        if cells["value"].isna().all() and not cells["failed"].any():
            missing.append(strategy)
            continue
        line = {"strategy": strategy}
        for figure, header in FIGURES.items():
            line[header] = _figure_cell(cells[cells["figure"] == figure], {})
        table.append(line)
    return pd.DataFrame(table), int(index), tuple(missing)


def write_subjects(explore_dir: Path, engine: EngineAxis) -> None:
    """Name each commit the explorer graphs (its ``index.json``) by its release and subject:
    asv-tachyon reads ``commits.json`` (hash -> subject; ``dashboard.SIDECARS`` writes it
    empty) for its points' labels."""
    index = json.loads((Path(explore_dir) / "index.json").read_text())
    graphed = set(index["revision_to_hash"].values())
    subjects = {c.hash: c.title for c in engine.commits(graphed)}
    (Path(explore_dir) / "commits.json").write_text(json.dumps(subjects))


def write_environments(explore_dir: Path, engine: EngineAxis) -> None:
    """Make the explorer's selectors show what the graphed commits were measured with
    (``engine.environments``, ``DISTRIBUTIONS``' keys recorded): each such key a selector whose
    one value lists the versions in commit order (``0.7.2.post1, 0.7.4``; which commit held
    which, its points' titles say: ``write_subjects``), over what asv put there (``torch``: the
    environment's requirement, ``2.13.0``; FlashInfer, installed per commit, nothing). A
    selector's value names its graphs' folder (``Graph.get_file_path``, as the UI builds it), so
    every entry's graphs and samples move to the new one, and the regressions name them there.
    Run before the front page's links are made from the index."""
    explore_dir = Path(explore_dir)
    path = explore_dir / "index.json"
    published = json.loads(path.read_text())
    commits = engine.commits(set(published["revision_to_hash"].values()))
    recorded = [engine.environments.get(c.hash, {}) for c in commits]
    held = {
        key: ", ".join(dict.fromkeys(facts[key] for facts in recorded if facts.get(key)))
        for key in DISTRIBUTIONS
    }
    held = {key: versions for key, versions in held.items() if versions}
    entries = published["graph_param_list"]
    if not held or len({json.dumps(e | held, sort_keys=True) for e in entries}) < len(entries):
        # none recorded (a FlashInfer history's environments), or entries the records (one per
        # commit) cannot tell apart (two torch environments): asv's selectors stay
        return
    moved = {}
    for entry in entries:
        for name in ("summary", *published["benchmarks"]):
            old, new = (Graph.get_file_path(e, name) + ".json" for e in (entry, entry | held))
            for top in ("graphs", "samples"):  # samples/ mirrors graphs/ (make_offline)
                source = explore_dir / top / Path(old).relative_to("graphs")
                if source.is_file():
                    target = explore_dir / top / Path(new).relative_to("graphs")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source.rename(target)
            moved[old] = new
        entry.update(held)
    for top in ("graphs", "samples"):  # the folders the moves emptied, deepest first
        for folder in sorted((explore_dir / top).rglob("*"), reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    published["params"] |= {key: [versions] for key, versions in held.items()}
    path.write_text(json.dumps(published))
    regressions = explore_dir / "regressions.json"
    listed = json.loads(regressions.read_text())
    for regression in listed["regressions"]:  # [name, graph path, graph params, ...]
        regression[1] = moved.get(regression[1], regression[1])
        regression[2] |= held
    regressions.write_text(json.dumps(listed))
