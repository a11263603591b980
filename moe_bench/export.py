"""The suite's figures as records of the PyTorch OSS benchmark database ("v3"), the database
behind the PyTorch HUD, where vLLM's performance dashboard lives.

One record per figure of a commit: per (benchmark, shape, strategy) of ``load_results``' frame,
in the schema of pytorch/test-infra's ``oss_ci_benchmark_v3`` table: ``benchmark{name, mode,
dtype, extra_info}``, ``model{name, type, backend, origins, extra_info}``, ``inputs``,
``dependencies{<name>: {repo, branch, sha, version, extra_info}}``, ``metric{name,
benchmark_values, target_value, extra_info}``; every ``extra_info`` a map of strings. The
uploader (test-infra's ``upload_benchmark_results.py``) adds the run's own fields (timestamp,
repo, head_sha, workflow and job ids, runners); docs/ecosystem.md says how to upload.

Records of an engine's history (``moe_bench.engine``: asv's ``repo`` is the engine's) carry the
engine's repository, branch and commit as the measured code (its ``dependencies`` entry, and
``uploader_metadata``'s head fields for the uploader), and this suite's commit that measured it
as provenance (``dependencies["moe-convert-bench"]``, ``role`` "measuring suite").

Every figure of the metrics table (``moe_suite.metrics``) is exported, each under the name the
HUD already knows where its row says one (``Metric.pytorch_name``, converted to that name's unit
by ``HUD_METRICS``), else under its own (``metric_name``): a new row of the table is exported
with no change here. Figures without a model shape (the machine's noise) are left out: the
database keys a record by its model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from moe_suite.metrics import METRICS, Metric

from .results import ResultsError, latest, machine_info

__all__ = [
    "BACKEND",
    "DEPENDENCIES",
    "EngineRun",
    "HUD_METRICS",
    "SUITE",
    "metric_name",
    "pytorch_v3_records",
    "uploader_metadata",
    "write_records",
]

#: ``benchmark.name`` of every record, and this suite's entry in ``dependencies``.
SUITE = "moe-convert-bench"
#: ``model.backend``: vLLM's MoE backend whose weight layout the suite converts to.
BACKEND = "flashinfer_trtllm"
#: ``benchmark.dtype`` of a BF16 shape's records; a quantized shape's is its format's name
#: (``nvfp4``, ``mxfp4``, ``fp8``).
BF16 = "bfloat16"
#: Metric names the HUD knows (torchci's ``IS_INCREASING_METRIC_VALUE_GOOD``: both lower is
#: better; ``usuage`` is their spelling), each with the suite's unit it takes and the factor
#: to the unit in its name (mb: MiB, as this suite prints bytes).
HUD_METRICS = {
    "model_load_time(ms)": ("seconds", 1e3),
    "peak_load_mem_usuage(mb)": ("bytes", 1 / 2**20),
}
#: ``dependencies``: the machine.json key of each version ``moe-bench machine`` records -> the
#: project's repository.
DEPENDENCIES = {
    "torch": "pytorch/pytorch",
    "flashinfer": "flashinfer-ai/flashinfer",
    "vllm": "vllm-project/vllm",
}


@dataclass(frozen=True)
class EngineRun:
    """Results of an engine's history (an engine config, ``moe_bench.engine``): what a record
    says of the code it measured and of the suite that measured it."""

    engine: str  # the ``DEPENDENCIES`` key: vllm, flashinfer
    github: str  # owner/name
    branch: str
    # engine commit -> what measured it: ``suite`` (this suite's commit), the versions of
    # ``DEPENDENCIES`` installed beside it, each with its ``_pinned`` (``engine_env.MEASURED``)
    measured: dict[str, dict[str, str]]
    suite_default: str  # the config's suite commit, for a commit without ``suite``

    @classmethod
    def from_config(cls, config: str | Path) -> EngineRun | None:
        """The engine run of an asv config, None for this suite's own configs."""
        from .engine_env import read_measured

        conf = json.loads(Path(config).read_text())
        if "engine" not in conf:
            return None
        return cls(
            engine=conf["engine"],
            github=conf["engine_github"],
            branch=conf["branches"][0],
            measured=read_measured(conf["results_dir"]),
            suite_default=conf.get("suite_commit", ""),
        )


def metric_name(m: Metric) -> str:
    """The record's ``metric.name``: ``m.pytorch_name``, else the benchmark's class and method
    without asv's prefix (``PeakMemory.peak_transient_bytes``), unique in the table."""
    if m.pytorch_name is not None:
        return m.pytorch_name
    cls, _, method = m.short.rpartition(".")
    return f"{cls}.{method.removeprefix('track_').removeprefix('time_')}"


def _values(m: Metric, row: pd.Series) -> list[float]:
    """``metric.benchmark_values``: the raw samples where asv kept them, else the one value; in
    the unit of the HUD's name where the figure has one."""
    samples = row["samples"]  # a tuple, or None (NaN once pandas has filled a column of None)
    values = list(samples) if isinstance(samples, tuple) else [row["value"]]
    if m.pytorch_name is None:
        return values
    unit, factor = HUD_METRICS[m.pytorch_name]
    assert unit == m.unit, (m.benchmark, unit)  # tests/test_export.py checks the whole table
    return [v * factor for v in values]


@dataclass(frozen=True)
class _Model:
    """What a record says of a shape label: the model's Hugging Face id, its TP, and its EP
    (a rank's share of E/EP experts: ``model/epN``; ``ep`` in the records where above 1), the
    weights' format (``benchmark.dtype``) and each tensor of one layer as converted
    (``inputs``)."""

    hf_id: str
    tp: int
    dtype: str
    inputs: dict[str, dict]
    ep: int = 1

    @property
    def parallel(self) -> dict[str, int]:
        """``tp``, and ``ep`` where above 1: the records' extra_info of the rank's share."""
        return {"tp": self.tp} | ({"ep": self.ep} if self.ep > 1 else {})


def _models(labels: set[str]) -> dict[str, _Model]:
    """``model/tpN`` or ``model/epN`` label -> its ``_Model``, from the catalog of every format.

    The one import of ``moe_convert`` in ``moe_bench``: the catalog is the one place a model's
    Hugging Face id is written, and a result file holds only the label. A layer's tensors are
    its full-size shape's (``LayerShape.tensor_specs``): BF16 ``w13``, ``w2``; a quantized
    layer's weights, block scales and biases with their stored dtypes. ``ResultsError`` naming
    a label the catalog of this checkout does not know.
    """
    from moe_convert.formats.catalog import CATALOG, shape_from_label

    found = {}
    for label in sorted(labels):
        try:
            shape = shape_from_label(label)
        except ValueError as err:
            raise ResultsError(
                f"shape {label!r} of the results is not in this checkout's catalog ({err}); "
                "export from a checkout whose moe_convert/formats/catalog.py has it"
            ) from None
        hf_id = CATALOG[shape.model].hf_id
        dtype = BF16 if shape.format == "bf16" else shape.format
        tensors = {name: (dt, dims) for name, (dims, dt) in shape.tensor_specs.items()}
        inputs = {
            name: {
                "dtype": str(tensor_dtype).removeprefix("torch."),
                "extra_info": {"shape": str(list(dims))},
            }
            for name, (tensor_dtype, dims) in tensors.items()
        }
        found[label] = _Model(hf_id, shape.tp, dtype, inputs, shape.ep)
    return found


def _exact(value: float) -> str:
    """The figure as text, exactly: a whole number without ``.0`` (bytes, launches)."""
    return repr(int(value)) if value.is_integer() else repr(value)


def _text(value: object) -> str:
    """A text column's value, "" where the frame has none (None or NaN: no strategy axis)."""
    return value if isinstance(value, str) else ""


def _strings(mapping: dict) -> dict[str, str]:
    return {key: str(value) for key, value in mapping.items()}


def _dependencies(
    machine: dict[str, str], row: pd.Series, engine: EngineRun | None
) -> dict[str, dict]:
    """``dependencies``: the engines' versions ``machine.json`` holds, and this suite's commit;
    for an engine run, the engine at the measured commit, the versions installed beside it
    where recorded (the pinned one in ``extra_info`` where the index lacked it), and this suite
    as provenance."""
    recorded = {
        name: {
            "repo": repo,
            "branch": "",
            "sha": "",
            "version": machine.get(name, "not recorded"),
            "extra_info": {},
        }
        for name, repo in DEPENDENCIES.items()
    }
    date = {"date": row["date"].isoformat()}
    if engine is None:
        suite = {"repo": "", "branch": "", "sha": row["commit"], "version": "", "extra_info": date}
        return {**recorded, SUITE: suite}
    facts = engine.measured.get(row["commit"], {})
    for name in DEPENDENCIES.keys() & facts.keys():
        pinned = facts.get(f"{name}_pinned", "")
        recorded[name]["version"] = facts[name]
        recorded[name]["extra_info"] = {"pinned": pinned} if pinned not in ("", facts[name]) else {}
    recorded[engine.engine] = {
        "repo": engine.github,
        "branch": engine.branch,
        "sha": row["commit"],
        "version": "",
        "extra_info": date,
    }
    measuring = facts.get("suite", engine.suite_default)
    suite = {
        "repo": "",
        "branch": "",
        "sha": measuring,
        "version": "",
        "extra_info": {"role": "measuring suite"},
    }
    return {**recorded, SUITE: suite}


def _metric(m: Metric, row: pd.Series) -> dict:
    """``metric``: its name and values, and the figure exactly as measured in ``extra_info``."""
    info = {
        "suite_value": _exact(row["value"]),
        "suite_unit": m.unit,
        "lower_is_better": json.dumps(m.lower_is_better),
        "gate_rule": m.rule,
    }
    return {
        "name": metric_name(m),
        "benchmark_values": _values(m, row),
        "target_value": 0.0,
        "extra_info": info,
    }


def _record(
    row: pd.Series, machine: dict[str, str], model: _Model, engine: EngineRun | None
) -> dict:
    """The v3 record of one figure (a row of ``load_results``' frame)."""
    benchmark = {
        "asv_benchmark": row["benchmark"],
        "strategy": _text(row["strategy"]),
        **model.parallel,
        "shape": row["shape"],
        "profile": _text(row["profile"]),
        "machine": row["machine"],
        "gpu": machine.get("gpu", "n/a"),
        "env": row["env"],
    }
    return {
        "benchmark": {
            "name": SUITE,
            "mode": "inference",
            "dtype": model.dtype,
            "extra_info": _strings(benchmark),
        },
        "model": {
            "name": model.hf_id,
            "type": "moe weight conversion, one rank",
            "backend": BACKEND,
            "origins": ["huggingface"],
            "extra_info": _strings({**model.parallel, "shape": row["shape"]}),
        },
        "inputs": model.inputs,
        "dependencies": _dependencies(machine, row, engine),
        "metric": _metric(METRICS[row["benchmark"]], row),
    }


def pytorch_v3_records(
    results_dir: str | Path, frame: pd.DataFrame, engine: EngineRun | None = None
) -> list[dict]:
    """The v3 records of every valid figure in ``frame`` (``load_results``' rows: pick the
    commit first, e.g. with ``results.latest``); skipped or failed figures (NaN) have none.

    ``results_dir`` gives each machine's ``machine.json`` (engine versions, GPU). Records are in
    the frame's order; ``metric.target_value`` is 0 (none: budgets are ``moe-bench gate``'s), and
    ``metric.extra_info`` keeps the figure exactly as measured (``suite_value``, ``suite_unit``):
    the database stores ``benchmark_values`` as Float32.
    """
    rows = frame[frame["shape"].notna() & frame["value"].notna()]
    models = _models(set(rows["shape"]))
    machines = {name: machine_info(results_dir, name) for name in rows["machine"].unique()}
    return [
        _record(row, machines[row["machine"]], models[row["shape"]], engine)
        for _, row in rows.iterrows()
    ]


def write_records(
    results_dir: str | Path,
    frame: pd.DataFrame,
    out: str | Path,
    *,
    machine: str | None = None,
    commit: str | None = None,
    engine: EngineRun | None = None,
) -> tuple[int, list[str]]:
    """Write the v3 records of ``commit`` (hash prefix; default each machine's latest) of
    ``machine`` (default every one) to ``out`` as one JSON list, the form the uploader reads
    (it reads every ``*.json`` of a folder). Returns (records written, commits exported).
    For an engine run, also ``<out>.metadata``: the uploader's head fields
    (``uploader_metadata``; not ``.json``, which the uploader would read as records).

    ``ResultsError`` when the choice leaves no result, and for a shape the catalog lacks.
    """
    if machine is not None:
        frame = frame[frame["machine"] == machine]
    chosen = latest(frame, commit)
    if chosen.empty:
        what = f"commit {commit!r}" if commit else "a commit"
        where = f"machine {machine!r}" if machine else "any machine"
        raise ResultsError(f"{results_dir}: no results of {what} on {where}")
    records = pytorch_v3_records(results_dir, chosen, engine)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1, allow_nan=False) + "\n")
    commits = sorted(chosen["commit"].unique())
    if engine is not None:
        if len(commits) != 1:
            raise ResultsError(
                f"{results_dir}: {len(commits)} commits chosen (machines measured different "
                "ones): an upload has one head commit; give --machine or --commit"
            )
        meta = uploader_metadata(engine, commits[0])
        path.with_name(path.name + ".metadata").write_text(json.dumps(meta, indent=1) + "\n")
    return len(records), commits


def uploader_metadata(engine: EngineRun, commit: str) -> dict[str, str]:
    """The fields test-infra's uploader takes from its ``--metadata`` for an engine run: the
    engine's repository, branch and commit as the head (as vLLM's own dashboard keys records to
    vLLM's ``head_sha``); the run's own fields (timestamp, workflow and job ids) are the job's."""
    return {"repo": engine.github, "head_branch": engine.branch, "head_sha": commit}
