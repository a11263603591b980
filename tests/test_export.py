"""``moe-bench export``: the figures of a commit as PyTorch OSS benchmark database (v3) records,
checked against the schema of test-infra's ``oss_ci_benchmark_v3`` table (every field, every
type, every ``extra_info`` a map of strings), with a record for every metric of the table."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from moe_bench import cli, engine_env
from moe_bench.export import HUD_METRICS, metric_name
from moe_suite.metrics import (
    FORMAT_FIGURES,
    METRICS,
    PAIRED_TIME,
    PEAK_BYTES,
    RANK_LOAD_TIME,
    REFIT_EP,
)

ROOT = Path(__file__).resolve().parents[1]
SHAPE, STRATEGIES = "qwen3-235b-a22b/tp4", ["legacy", "strided_copy"]
#: A quantized figure's shape and kinds (each format's module, and the retired bench_quant's).
QUANT_SHAPES = {
    "bench_nvfp4": "qwen3-235b-a22b-nvfp4/tp4",
    "bench_quant": "qwen3-235b-a22b-nvfp4/tp4",
    "bench_mxfp4": "gpt-oss-120b-mxfp4/tp2",
    "bench_fp8": "llama-4-maverick-fp8/tp8",
    "bench_fp8block": "deepseek-r1-fp8block/tp8",
    "bench_mxfp8": "minimax-m3-mxfp8/tp4",
    "bench_mxint4": "kimi-k2-thinking-mxint4/tp8",
}
KINDS = ["legacy", "fast"]
COMMIT = "c" * 40
#: Every figure of the metrics table (not the paired run's: no asv benchmark), each format's
#: (named by its module, ``metrics.FORMAT_FIGURES``) included; not an engine history's
#: (bench_engine), which has results of its own: tests/test_engine_asv.py
SUITE = [n for n in METRICS if n != PAIRED_TIME and not n.startswith("bench_engine.")] + [
    f"{module}.{figure}"
    for module in QUANT_SHAPES
    if module != "bench_quant"
    for figure in FORMAT_FIGURES
]
#: A time_ benchmark whose raw samples asv kept (--record-samples)
SAMPLED = "bench_convert.TimeConvert.time_convert"
SAMPLES = [0.031, 0.029, 0.030]
MACHINE = {"machine": "gb200", "gpu": "NVIDIA GB200", "torch": "2.13.0", "flashinfer": "0.7.4"}


#: The refit by EP's shape, a rank's share under expert parallelism, and strategy.
EP_SHAPE, EP_STRATEGIES = "qwen3-30b-a3b/ep8", ["inplace"]


def _shape_and_strategies(name: str) -> tuple[str, list[str]]:
    """The shape and strategies of ``name``'s results: BF16's, the refit by EP's, or a quantized
    format's."""
    module = name.partition(".")[0]
    if name.startswith(REFIT_EP):
        return EP_SHAPE, EP_STRATEGIES
    return (QUANT_SHAPES[module], KINDS) if module in QUANT_SHAPES else (SHAPE, STRATEGIES)


def _params(name: str) -> tuple[list[str], list[list[str]]]:
    """asv's ``param_names`` and ``params`` (reprs) of ``name``: shape x strategy, shape alone
    (the profile's expert count) or none (the machine's noise)."""
    shape, strategies = _shape_and_strategies(name)
    if ".Profile." in name:
        return ["shape"], [[repr(shape)]]
    if ".Noise." in name:
        return [], []
    return ["shape", "strategy"], [[repr(shape)], [repr(s) for s in strategies]]


def _value(name: str, index: int) -> float:
    """A distinct value per figure; ``strided_copy``'s peak transient is skipped (NaN)."""
    if name == PEAK_BYTES and index == 1:
        return math.nan
    return 3 * 2**30 + 1 + SUITE.index(name) * 10 + index


def _write(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def results(tmp_path):
    """A results folder, as ``asv run`` writes it, holding one commit with every figure."""
    benchmarks, results = {"version": 2}, {}
    for name in SUITE:
        names, params = _params(name)
        benchmarks[name] = {
            "name": name,
            "param_names": names,
            "params": params,
            "unit": METRICS[name].unit,
            "version": "1",
            "type": "time" if name == SAMPLED else "track",
        }
        count = math.prod(len(p) for p in params)
        samples = [SAMPLES] * count if name == SAMPLED else None
        results[name] = [[_value(name, i) for i in range(count)], params, "1", samples]
    _write(tmp_path / "benchmarks.json", benchmarks)
    _write(tmp_path / "gb200" / "machine.json", {**MACHINE, "profile": "full", "version": 1})
    _write(
        tmp_path / "gb200" / f"{COMMIT[:8]}-existing-py.json",
        {
            "commit_hash": COMMIT,
            "env_name": "existing-py",
            "date": 1_700_000_000_000,
            "python": "3.11",
            "params": {"machine": "gb200", "python": "3.11"},
            "requirements": {},
            "env_vars": {},
            "result_columns": ["result", "params", "version", "samples"],
            "results": results,
            "durations": {},
            "version": 2,
        },
    )
    return tmp_path


def export(results, capsys, *args) -> tuple[int, list[dict], pytest.CaptureFixture]:
    """``moe-bench export --results RESULTS --out FILE ARGS``: exit code, the records, stdout and
    stderr."""
    out = results / "out" / "moe-convert-bench.json"
    code = cli.main(["export", "--results", str(results), "--out", str(out), *args])
    records = json.loads(out.read_text()) if out.exists() else []
    return code, records, capsys.readouterr()


def check_v3(record: dict) -> None:
    """Every field of a v3 record present with its type; every extra_info a map of strings.

    The columns of test-infra's clickhouse_db_schema/oss_ci_benchmark_v3/schema.sql this export
    fills; the uploader adds the run's own (timestamp, repo, head_sha, workflow and job ids,
    runners)."""

    def strings(value, where):
        assert isinstance(value, dict), where
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()), where

    def fields(value, names, where):
        assert isinstance(value, dict) and set(value) == set(names), (where, value)
        for name in names:
            if name == "extra_info":
                strings(value[name], f"{where}.extra_info")
            elif name not in ("origins", "benchmark_values", "target_value"):
                assert isinstance(value[name], str), f"{where}.{name}"

    assert set(record) == {"benchmark", "model", "inputs", "dependencies", "metric"}
    fields(record["benchmark"], ["name", "mode", "dtype", "extra_info"], "benchmark")
    fields(record["model"], ["name", "type", "backend", "origins", "extra_info"], "model")
    assert record["model"]["origins"] and all(
        isinstance(o, str) for o in record["model"]["origins"]
    )
    for name, value in record["inputs"].items():
        fields(value, ["dtype", "extra_info"], f"inputs.{name}")
    for name, value in record["dependencies"].items():
        fields(value, ["repo", "branch", "sha", "version", "extra_info"], f"dependencies.{name}")
    metric = record["metric"]
    fields(metric, ["name", "benchmark_values", "target_value", "extra_info"], "metric")
    assert isinstance(metric["benchmark_values"], list) and metric["benchmark_values"]
    assert all(isinstance(v, float) and math.isfinite(v) for v in metric["benchmark_values"])
    assert isinstance(metric["target_value"], float)


def test_every_figure_is_one_valid_record(results, capsys):
    code, records, printed = export(results, capsys)
    assert code == 0
    assert printed.out.startswith(f"{len(records)} pytorch-v3 records of commit {COMMIT[:8]} in ")
    for record in records:
        check_v3(record)
    infos = [r["benchmark"]["extra_info"] for r in records]
    exported = {(info["asv_benchmark"], info["strategy"]) for info in infos}
    expected = {
        (name, strategy)
        for name in SUITE
        if ".Noise." not in name  # no model: the database keys records by model
        for strategy in ([""] if ".Profile." in name else _shape_and_strategies(name)[1])
        if not (name == PEAK_BYTES and strategy == "strided_copy")  # skipped: NaN
    }
    assert exported == expected and len(records) == len(expected)


def test_a_record_per_metric_kind_with_names_the_hud_knows(results, capsys):
    _, records, _ = export(results, capsys)
    names = {r["metric"]["name"] for r in records}
    kinds = {metric_name(METRICS[n]) for n in SUITE if ".Noise." not in n}
    assert names == kinds
    # each figure its own name in its format: a quantized figure is BF16's kind of its dtype
    named = {(r["metric"]["name"], r["benchmark"]["dtype"]) for r in records}
    assert len(named) == len(SUITE) - 1
    peak = next(r for r in records if r["metric"]["name"] == "peak_load_mem_usuage(mb)")
    assert peak["benchmark"]["extra_info"]["asv_benchmark"] == PEAK_BYTES
    exact = _value(PEAK_BYTES, 0)
    assert peak["metric"]["benchmark_values"] == [exact / 2**20]  # MiB
    # Float32 in the database: the exact figure stays in extra_info, in the suite's unit
    assert peak["metric"]["extra_info"] == {
        "suite_value": repr(exact),
        "suite_unit": "bytes",
        "lower_is_better": "true",
        "gate_rule": "exact",
    }
    bf16 = {name for name, dtype in named if dtype == "bfloat16"}
    assert "PeakMemory.peak_transient_bytes" not in bf16


def test_the_whole_rank_load_time_goes_under_model_load_time_in_ms(results, capsys):
    """The whole rank's load time measured on CUDA is the HUD's load time, in ms; the one-layer
    x layers proxy (``WHOLE_MODEL``) keeps this suite's name."""
    _, records, _ = export(results, capsys)
    loads = [r for r in records if r["metric"]["name"] == "model_load_time(ms)"]
    assert [r["benchmark"]["extra_info"]["strategy"] for r in loads] == STRATEGIES
    for index, record in enumerate(loads):
        assert record["benchmark"]["extra_info"]["asv_benchmark"] == RANK_LOAD_TIME
        assert record["metric"]["benchmark_values"] == [_value(RANK_LOAD_TIME, index) * 1e3]


def test_raw_samples_where_asv_kept_them(results, capsys):
    _, records, _ = export(results, capsys)
    sampled = [r for r in records if r["benchmark"]["extra_info"]["asv_benchmark"] == SAMPLED]
    assert len(sampled) == 2 and all(r["metric"]["benchmark_values"] == SAMPLES for r in sampled)
    others = [r for r in records if r not in sampled]
    assert all(len(r["metric"]["benchmark_values"]) == 1 for r in others)


def test_model_benchmark_and_dependencies_say_what_was_measured(results, capsys):
    _, records, _ = export(results, capsys)
    record = next(r for r in records if r["benchmark"]["extra_info"]["strategy"] == "legacy")
    assert record["model"]["name"] == "Qwen/Qwen3-235B-A22B"  # the catalog's Hugging Face id
    assert record["model"]["backend"] == "flashinfer_trtllm"
    assert record["model"]["extra_info"] == {"tp": "4", "shape": SHAPE}
    assert record["benchmark"]["dtype"] == "bfloat16"
    info = record["benchmark"]["extra_info"]
    assert (info["tp"], info["profile"], info["machine"], info["gpu"]) == (
        "4",
        "full",
        "gb200",
        "NVIDIA GB200",
    )
    deps = record["dependencies"]
    assert deps["torch"]["version"] == "2.13.0" and deps["flashinfer"]["version"] == "0.7.4"
    assert deps["vllm"]["version"] == "not recorded"  # machine.json without it (older records)
    assert deps["moe-convert-bench"]["sha"] == COMMIT


def test_a_ranks_share_under_expert_parallelism_says_its_ep(results, capsys):
    _, records, _ = export(results, capsys)
    ep = [r for r in records if r["model"]["extra_info"]["shape"] == EP_SHAPE]
    assert {r["benchmark"]["extra_info"]["asv_benchmark"] for r in ep} == {
        n for n in SUITE if n.startswith(REFIT_EP)
    }
    assert all(r["model"]["extra_info"] == {"tp": "1", "ep": "8", "shape": EP_SHAPE} for r in ep)
    assert all(r["benchmark"]["extra_info"]["ep"] == "8" for r in ep)
    assert ep[0]["model"]["name"] == "Qwen/Qwen3-30B-A3B"


def test_an_engine_runs_dependencies_are_what_its_environment_installed(results, capsys):
    """An engine history's records name the FlashInfer installed beside the engine's commit
    (``engine_env.MEASURED``), not machine.json's (this suite's own interpreter), and the
    release the commit pinned where the index lacked it."""
    config = results / "asv.engine-vllm.conf.json"
    _write(
        config,
        {
            "results_dir": str(results),
            "branches": ["main"],
            "engine": "vllm",
            "engine_github": "vllm-project/vllm",
            "suite_commit": "s" * 40,
        },
    )
    for installed, pinned, info in (
        ("0.6.3", "0.6.3", {}),  # vLLM 0.16.0's pin; machine.json says 0.7.4
        ("0.7.4", "0.7.3", {"pinned": "0.7.3"}),  # vLLM 0.34.0's, which the index lacks
    ):
        engine_env.record(results, COMMIT, flashinfer=installed, flashinfer_pinned=pinned)
        code, records, said = export(results, capsys, "--config", str(config))
        assert code == 0 and records, said.err
        for deps in (r["dependencies"] for r in records):
            assert deps["flashinfer"]["version"] == installed
            assert deps["flashinfer"]["extra_info"] == info
            assert deps["vllm"]["sha"] == COMMIT
            assert deps["moe-convert-bench"]["sha"] == "s" * 40  # none recorded: the config's
        shutil.rmtree(results / "out")  # export's, in the results folder: not a machine's


def stored(record: dict) -> dict[str, tuple[str, str]]:
    """Each input tensor of an exported record: (dtype, shape)."""
    return {
        name: (value["dtype"], value["extra_info"]["shape"])
        for name, value in record["inputs"].items()
    }


def test_a_quantized_figure_says_its_format_model_and_tensors(results, capsys):
    # The format's name as the dtype, the quantized catalog's Hugging Face id, and each tensor
    # of the full-size layer with its stored dtype (gpt-oss: weights, e8m0 scales, bf16 biases).
    _, records, _ = export(results, capsys)
    peaks = {
        r["benchmark"]["dtype"]: r
        for r in records
        if r["benchmark"]["extra_info"]["asv_benchmark"].endswith(
            ".PeakMemory.track_peak_transient_bytes"
        )
        and r["benchmark"]["extra_info"]["strategy"] == "fast"
    }
    assert peaks.keys() == {"nvfp4", "mxfp4", "fp8", "fp8block", "mxfp8", "mxint4"}
    mxfp4 = peaks["mxfp4"]
    assert mxfp4["model"]["name"] == "openai/gpt-oss-120b"
    assert mxfp4["benchmark"]["extra_info"]["asv_benchmark"].startswith("bench_mxfp4.")
    assert mxfp4["metric"]["name"] == "PeakMemory.peak_transient_bytes"
    assert stored(mxfp4) == {
        # TP2: E 128, H 2880 padded to 3072, I 1440 per rank padded to 1536 (vLLM's rule)
        "w13": ("uint8", "[128, 3072, 1536]"),
        "w2": ("uint8", "[128, 3072, 768]"),
        "w13_scale": ("uint8", "[128, 3072, 96]"),
        "w2_scale": ("uint8", "[128, 3072, 48]"),
        "w13_bias": ("bfloat16", "[128, 3072]"),
        "w2_bias": ("bfloat16", "[128, 3072]"),
    }
    fp8 = peaks["fp8"]["inputs"]
    assert set(fp8) == {"w13", "w2"} and fp8["w13"]["dtype"] == "float8_e4m3fn"
    assert set(peaks["nvfp4"]["inputs"]) == {"w13", "w2", "w13_scale", "w2_scale"}
    block = peaks["fp8block"]
    assert block["model"]["name"] == "deepseek-ai/DeepSeek-R1-0528"
    assert stored(block) == {
        # TP8: E 256, H 7168, I 2048 / 8 = 256; a float32 scale per 128x128 block
        "w13": ("float8_e4m3fn", "[256, 512, 7168]"),
        "w2": ("float8_e4m3fn", "[256, 7168, 256]"),
        "w13_scale": ("float32", "[256, 4, 56]"),
        "w2_scale": ("float32", "[256, 56, 2]"),
    }
    m3 = peaks["mxfp8"]
    assert m3["model"]["name"] == "MiniMaxAI/MiniMax-M3-MXFP8"
    assert stored(m3) == {
        # TP4: E 128, H 6144, I 3072 / 4 = 768; an e8m0 (uint8) scale per 32 elements
        "w13": ("float8_e4m3fn", "[128, 1536, 6144]"),
        "w2": ("float8_e4m3fn", "[128, 6144, 768]"),
        "w13_scale": ("uint8", "[128, 1536, 192]"),
        "w2_scale": ("uint8", "[128, 6144, 24]"),
    }
    k2t = peaks["mxint4"]
    assert k2t["model"]["name"] == "moonshotai/Kimi-K2-Thinking"
    assert stored(k2t) == {
        # TP8: E 384, H 7168, I 2048 / 8 = 256; eight int4 per int32, a bf16 scale per 32
        "w13": ("int32", "[384, 512, 896]"),
        "w2": ("int32", "[384, 7168, 32]"),
        "w13_scale": ("bfloat16", "[384, 512, 224]"),
        "w2_scale": ("bfloat16", "[384, 7168, 8]"),
    }


def test_the_table_names_only_hud_metrics_in_their_units():
    named = [m for m in METRICS.values() if m.pytorch_name is not None]
    assert named, "the peak transient memory goes under peak_load_mem_usuage(mb)"
    for m in named:
        assert m.pytorch_name in HUD_METRICS, m.benchmark
        assert HUD_METRICS[m.pytorch_name][0] == m.unit, m.benchmark
    names = [(metric_name(m), m.benchmark.partition(".")[0]) for m in METRICS.values()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("machine", ["cpu-2core-epyc", "cpu-2core-xeon"])
def test_the_committed_results_export(machine, tmp_path, capsys):
    # What the nightly's export step runs on its own results: the latest commit of results/
    # (quantized shapes included since 9a89166), every record valid.
    out = tmp_path / "records.json"
    argv = ["export", "--results", str(ROOT / "results"), "--machine", machine]
    assert cli.main([*argv, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert records
    for record in records:
        check_v3(record)


def test_the_file_is_one_json_list_as_the_uploader_reads_it(results, capsys):
    code, _, _ = export(results, capsys)
    text = (results / "out" / "moe-convert-bench.json").read_text()
    loaded = json.loads(text)
    assert code == 0 and isinstance(loaded, list) and all("metric" in r for r in loaded)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--commit", "deadbeef"], "no results of commit 'deadbeef' on any machine"),
        (["--machine", "h200"], "h200"),
    ],
)
def test_nothing_to_export_is_one_error_line(results, capsys, args, message):
    code, records, printed = export(results, capsys, *args)
    err = printed.err
    assert code == 2 and not records
    assert err.count("\n") == 1 and err.startswith("moe-bench export: error: ") and message in err


def test_a_shape_the_catalog_lacks_is_named(results, capsys):
    path = results / "gb200" / f"{COMMIT[:8]}-existing-py.json"
    path.write_text(path.read_text().replace(SHAPE, "retired-model/tp4"))
    bench = results / "benchmarks.json"
    bench.write_text(bench.read_text().replace(SHAPE, "retired-model/tp4"))
    code, _, printed = export(results, capsys)
    assert code == 2 and "'retired-model/tp4'" in printed.err and "catalog" in printed.err
