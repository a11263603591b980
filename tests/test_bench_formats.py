"""Every format in the suite (``benchmarks.formats``) and the quantized formats' replay: every
catalog shape and strategy benchmarked, each figure in the metrics table, the grid's figures the
records', and an OOM the replay finds."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
from conftest import requires_flashinfer

from moe_convert import FORMATS, REGISTRY, UNAVAILABLE, layer_shape
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.load.replay import rank_load, replay_load
from moe_convert.load.wholemodel import LOAD_DEVICES, PR45589_HEADROOM_BYTES
from moe_suite.metrics import (
    FORMAT_CLASSES,
    METRICS,
    RANK_LOAD_CLASSES,
    REFIT_EP_FIGURES,
    REFIT_REPLAY_FIGURES,
    metric,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import (  # noqa: E402
    bench_allocator,
    bench_convert,
    bench_fp8,
    bench_fp8block,
    bench_mxfp4,
    bench_mxfp8,
    bench_mxint4,
    bench_nvfp4,
    bench_refit,
    common,
    formats,
)

pytestmark = pytest.mark.usefixtures("warm_grids")  # most tests fork a grid's measuring worker

#: Each format's modules: BF16's two, each quantized format's one.
MODULES = {
    "bf16": (bench_convert, bench_allocator, bench_refit),
    "nvfp4": bench_nvfp4,
    "mxfp4": bench_mxfp4,
    "fp8": bench_fp8,
    "fp8block": bench_fp8block,
    "mxfp8": bench_mxfp8,
    "mxint4": bench_mxint4,
}
MODULES = {fmt: m if isinstance(m, tuple) else (m,) for fmt, m in MODULES.items()}


def quant_records(records: dict) -> dict:
    """The quantized formats' records of ``records`` (``REGISTRY`` or ``UNAVAILABLE``), read now."""
    return {name: r for name, r in records.items() if r.format != "bf16"}


def quant_catalog_shapes() -> list:
    """Every quantized catalog shape, in the catalog's order."""
    return [shape for shape in catalog_shapes() if shape.format != "bf16"]


def narrow(monkeypatch, *labels: str, kinds: tuple[str, ...] = ()) -> None:
    """Every grid of the suite measures ``labels`` only and, given ``kinds``, only those of each
    format's strategy axis (BF16's strategy names, a quantized format's kinds): the cells a test
    reads, not every cell of its shapes."""
    monkeypatch.setattr(formats, "FORMAT_OF", {label: formats.FORMAT_OF[label] for label in labels})
    if kinds:
        monkeypatch.setattr(common, "STRATEGY_AXIS", kinds)
        monkeypatch.setattr(formats, "QUANT_KINDS", kinds)


def test_every_format_has_a_module_of_every_shape_and_kind():
    assert MODULES.keys() == FORMATS.keys() == formats.FORMAT_SHAPES.keys()
    assert formats.REFIT_SHAPES.keys() == FORMATS.keys()  # a refit shape for every format
    modules = {path.stem for path in (ROOT / "benchmarks").glob("bench_*.py")}
    assert {f"bench_{fmt}" for fmt in MODULES if fmt != "bf16"} <= modules
    for fmt, labels in formats.FORMAT_SHAPES.items():
        if fmt != "bf16":  # BF16's: tests/test_asv_suite.py
            catalog = [shape.label for shape in quant_catalog_shapes() if shape.format == fmt]
            assert catalog == list(labels)
    quantized = [label for label, fmt in formats.FORMAT_OF.items() if fmt != "bf16"]
    assert quantized == [shape.label for shape in quant_catalog_shapes()]
    registered = quant_records(REGISTRY)
    records = {**registered, **quant_records(UNAVAILABLE)}  # registered here or not
    assert {name.split("-", 1)[1] for name in records} - {"vllm"} == set(formats.QUANT_KINDS)
    # every registered strategy's name is its format's strategy of its kind
    assert all(formats.strategy_name(r.format, r.kind) == name for name, r in REGISTRY.items())
    for shape in quant_catalog_shapes():
        for kind in formats.QUANT_KINDS:
            # FlashInfer has no helper of vLLM's layout for MXFP4 and block-FP8: n/a cells
            if kind != "flashinfer" or shape.format not in ("mxfp4", "fp8block"):
                assert f"{shape.format}-{kind}" in (registered if kind != "flashinfer" else records)


def test_each_format_has_every_figure_class_judged_as_bf16s():
    # The same classes for every format (BF16's over its two modules), over the format's shapes
    # and strategies, every figure in the metrics table with its BF16 sibling's rule and column.
    assert formats.CLASSES == FORMAT_CLASSES
    assert RANK_LOAD_CLASSES == tuple(f"RankLoad{d}" for d in formats.RANK_LOAD_DEVICES)
    assert formats.RANK_LOAD_DEVICES[1:] == tuple(LOAD_DEVICES)
    assert set(formats.CONVERSION) | set(formats.LOAD) | set(formats.REFIT) == set(formats.CLASSES)
    for fmt, modules in MODULES.items():
        classes = {
            name: (module, cls)
            for module in modules
            for name, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__
        }
        headline = formats.HEADLINE if fmt == "bf16" else ()  # BF16's headline shapes alone
        assert classes.keys() == {*FORMAT_CLASSES, *headline}, fmt
        for name, (module, cls) in classes.items():
            refit = name in (*formats.REFIT, *headline)
            shapes = formats.refit_shapes(fmt) if refit else formats.FORMAT_SHAPES[fmt]
            axis = (formats.refit_kinds if refit else formats.kinds)(fmt)
            if name == "RefitByEP":  # a rank's share under EP, of BF16's models
                shapes, axis = formats.REFIT_EP_SHAPES, formats.REFIT_EP_STRATEGIES
                assert {s.partition("/")[0] for s in shapes} <= {
                    s.partition("/")[0] for s in formats.FORMAT_SHAPES[fmt]
                }
            else:
                assert set(shapes) <= set(formats.FORMAT_SHAPES[fmt])
            assert cls.params[0] == list(shapes)
            if name != "Profile":
                assert cls.params[1] == list(axis)
                assert cls.param_names == ["shape", "strategy"]  # what moe_bench keys results by
            for method in (m for m in dir(cls) if m.startswith("track_")):
                got = metric(f"{module.__name__.rpartition('.')[2]}.{name}.{method}")
                bf16 = next(
                    m for m in METRICS if m.split(".")[1:] == [name, method] and "bench_" in m
                )
                assert (got.rule, got.unit, got.column) == (
                    METRICS[bf16].rule,
                    METRICS[bf16].unit,
                    METRICS[bf16].column,
                ), got


def test_asv_measures_each_figure_once_for_every_format():
    # asv keys a setup_cache by its function's file and line: every format's classes of one
    # figure share it (every format's cells measured in one run), and so do the devices' rank
    # loads (each cell's process replays the three).
    everyone = [module for modules in MODULES.values() for module in modules]
    for name in (
        "PeakMemory",
        "Traffic",
        "SleepModeReplay",
        "LayerTime",
        "RankLoadTime",
        *formats.REFIT,
    ):
        caches = {getattr(m, name).setup_cache for m in everyone if hasattr(m, name)}
        assert len(caches) == 1, name
    caches = {
        getattr(m, c).setup_cache for m in everyone for c in RANK_LOAD_CLASSES if hasattr(m, c)
    }
    assert len(caches) == 1


def test_the_grid_reads_the_records_peaks_and_traffic(monkeypatch):
    narrow(monkeypatch, "gpt-oss-20b-mxfp4/tp1")
    shape = layer_shape("gpt-oss-20b-mxfp4", 1)
    peaks, traffic = bench_mxfp4.PeakMemory(), bench_mxfp4.Traffic()
    peak_cache, traffic_cache = peaks.setup_cache(), traffic.setup_cache()
    # FlashInfer has no MXFP4 helper of gpt-oss's layout: n/a, saying so
    with pytest.raises(NotImplementedError, match="mxfp4-flashinfer is not registered here"):
        peaks.setup(peak_cache, shape.label, "flashinfer")
    for kind in (kind for kind in formats.QUANT_KINDS if kind != "flashinfer"):
        record = REGISTRY[f"mxfp4-{kind}"]
        peaks.setup(peak_cache, shape.label, kind)
        got = peaks.track_peak_transient_bytes(peak_cache, shape.label, kind)
        assert got == record.peak.evaluate(shape)
        traffic.setup(traffic_cache, shape.label, kind)
        moved = traffic.track_traffic_bytes(traffic_cache, shape.label, kind)
        assert moved == record.traffic.evaluate(shape)
        assert traffic.track_launches(traffic_cache, shape.label, kind) == (
            record.launches.evaluate(shape)
        )
        # A copy of the layer moves 2 x its bytes; MXFP4's biases come back float32, so more.
        ratio = traffic.track_traffic_ratio(traffic_cache, shape.label, kind)
        assert ratio == moved / (2 * shape.layer_bytes) > 1


@requires_flashinfer
def test_fp8_helper_is_measured_on_meta_and_one_that_cannot_run_there_is_na(monkeypatch):
    # FP8's runs on meta (its host reads answered as for finite weights) and is measured as the
    # others; one that calls CUDA ops (mxint4-flashinfer, ... on a GPU box) cannot: its
    # PeakMemory, Traffic and replay cells are n/a with the reason
    label = "llama-4-maverick-fp8/tp8"
    narrow(monkeypatch, label, kinds=("fast", "flashinfer"))
    record = REGISTRY["fp8-flashinfer"]
    shape = layer_shape("llama-4-maverick-fp8", 8)
    peak = bench_fp8.PeakMemory()
    cache = peak.setup_cache()
    peak.setup(cache, label, "flashinfer")
    assert peak.track_peak_transient_bytes(cache, label, "flashinfer") == record.peak.evaluate(
        shape
    )
    monkeypatch.setitem(
        REGISTRY, "fp8-flashinfer", dataclasses.replace(record, not_on_meta="a CUDA op")
    )
    for cls in (bench_fp8.PeakMemory, bench_fp8.Traffic, bench_fp8.SleepModeReplay):
        cache = cls().setup_cache()
        with pytest.raises(NotImplementedError, match="fp8-flashinfer cannot run on meta"):
            cls().setup(cache, label, "flashinfer")
        cls().setup(cache, label, "fast")  # the others are measured


def test_a_library_without_a_format_makes_its_cells_na(monkeypatch):
    import moe_convert

    nvfp4, bf16 = "kimi-k2-nvfp4/tp8", "qwen3-30b-a3b/tp2"
    narrow(monkeypatch, nvfp4, bf16, kinds=("fast", "legacy"))
    # a commit before issue 18 (no FORMATS) or one without NVFP4's record
    monkeypatch.setattr(moe_convert, "FORMATS", {"bf16": moe_convert.FORMATS["bf16"]})
    cache = bench_nvfp4.PeakMemory().setup_cache()
    with pytest.raises(NotImplementedError, match="has no nvfp4 layers"):
        bench_nvfp4.PeakMemory().setup(cache, nvfp4, "fast")
    with pytest.raises(NotImplementedError, match="has no nvfp4 layers"):
        bench_nvfp4.Profile().setup(nvfp4)
    bench_convert.PeakMemory().setup(cache, bf16, "legacy")  # BF16's are measured


def test_cuda_memory_is_na_without_cuda(monkeypatch):
    monkeypatch.setattr(common, "device", lambda: "cpu")
    with pytest.raises(NotImplementedError, match="needs a CUDA device"):
        bench_fp8.CudaMemory().setup("llama-4-maverick-fp8/tp8", "fast")


def test_the_replay_finds_the_upstream_oom_and_ours_fit():
    # gpt-oss-20b's 24 MXFP4 layers on a 15 GiB device (10.1 GiB of MoE weights): vLLM's path
    # reserves a second copy of a layer and strands segments every layer; ours fit, no growth.
    shape = layer_shape("gpt-oss-20b-mxfp4", 1)
    device = 15 * 2**30

    def load(kind: str):
        return replay_load(
            shape, f"mxfp4-{kind}", max_split_size_mb=20, pool="sleep", device_bytes=device
        )

    legacy = load("legacy")
    assert legacy.oom_layer is not None and legacy.num_ooms == 1
    for kind in ("fast", "inplace"):
        ours = load(kind)
        assert ours.oom_layer is None and ours.reserved_growth_per_layer_bytes == 0, kind


def test_the_replay_frees_the_inputs_the_result_does_not_keep():
    # Out of place: every input; in place: all but the new float32 biases; vLLM's block-FP8
    # path: all but w2's scales, which it clamps in place and returns.
    from moe_convert.load.replay import _meta_conversion

    r1 = layer_shape("deepseek-r1-fp8block", 8)
    oss = layer_shape("gpt-oss-20b-mxfp4", 1)
    scaled = {"w13", "w2", "w13_scale", "w2_scale"}
    assert _meta_conversion(r1, "fp8block-legacy")[1] == {"w2_scale"}
    assert _meta_conversion(r1, "fp8block-inplace")[1] == scaled
    assert _meta_conversion(r1, "fp8block-fast")[1] == set()
    assert _meta_conversion(oss, "mxfp4-inplace")[1] == scaled


def test_the_rank_load_grids_replay_vllms_load_on_their_device(monkeypatch):
    # One class per device, one setup_cache for the three; every figure read from the cell's
    # rank_load on the class's device: PR #45589's headroom beside the rank's weights, a GB200,
    # an H200.
    narrow(monkeypatch, "gpt-oss-20b-mxfp4/tp1", kinds=("legacy", "fast"))
    shape = layer_shape("gpt-oss-20b-mxfp4", 1)
    devices = {"Replay": shape.model_bytes + PR45589_HEADROOM_BYTES, **LOAD_DEVICES}
    loads = bench_mxfp4.RankLoadReplay().setup_cache()
    for device in formats.RANK_LOAD_DEVICES:
        bench = getattr(bench_mxfp4, f"RankLoad{device}")()
        for kind in ("legacy", "fast"):
            want = rank_load(shape, f"mxfp4-{kind}", devices[device])
            assert want.pool == "default" and want.max_split_size_mb == 20
            bench.setup(loads, shape.label, kind)
            assert bench.track_num_device_alloc(loads, shape.label, kind) == want.num_device_alloc
            assert bench.track_peak_reserved_bytes(loads, shape.label, kind) == (
                want.peak_reserved_bytes
            )
            assert bench.track_layers_lost_to_oom(loads, shape.label, kind) == 0


def test_the_refit_replay_says_which_refit_runs_out_and_what_a_refit_costs(monkeypatch):
    # Exact on meta: the rank load in the sleep pool at 20 MiB on RankLoadReplay's device, then
    # REFIT_REPLAYS refits. inplace's one-expert scratch strands a 20 MiB segment per layer and
    # refit (94 layers: 94 cudaMalloc, 1880 MiB) until the 16th direct refit runs out (the
    # 15th layerwise one); its streamed refit and streaming allocate nothing: none of the 20
    # runs out (21).
    monkeypatch.setattr(formats, "REFIT_SHAPES", {"bf16": ("qwen3-235b-a22b/tp4",)})
    monkeypatch.setattr(formats, "REFIT_STRATEGIES", ("inplace", "streaming"))
    bench = bench_refit.RefitReplay()
    results = bench.setup_cache()
    label = "qwen3-235b-a22b/tp4"
    want = {
        ("inplace", "direct"): (16, 94 * 20 * 2**20, 94, 7717519),
        ("inplace", "layerwise"): (15, 94 * 20 * 2**20, 94, 16106127),
        ("inplace", "streamed"): (21, 0, 0, 30122820239),
        ("streaming", "direct"): (21, 0, 0, 30886183567),
        ("streaming", "streamed"): (21, 0, 0, 30886183567),
    }
    assert formats.REFIT_REPLAYS == 20
    for (kind, way), figures in want.items():
        bench.setup(results, label, kind)
        got = tuple(
            getattr(bench, f"track_{way}_{figure}")(results, label, kind)
            for figure, _, _ in REFIT_REPLAY_FIGURES
        )
        assert got == figures, (kind, way)
        assert bench.track_refits(results, label, kind) == formats.REFIT_REPLAYS


def test_the_refit_by_ep_gives_the_whole_ranks_refit_of_each_ep_share(monkeypatch):
    # Exact on meta, as `python -m moe_convert refit --model qwen3-30b-a3b --ep all` prints it:
    # one layer's peak, the rank's traffic and launches (48 MoE layers). At EP 8 a rank holds
    # 16 of the 128 experts: inplace's direct refit keeps its 6 MiB one-expert scratch at any
    # EP; streaming's streamed refit allocates nothing and moves each new byte once (its strided
    # copies: read once, written once, the floor 2 L a layer).
    monkeypatch.setattr(formats, "REFIT_EP_SHAPES", ("qwen3-30b-a3b/ep8",))
    monkeypatch.setattr(formats, "REFIT_EP_STRATEGIES", ("inplace", "streaming"))
    bench = bench_refit.RefitByEP()
    results = bench.setup_cache()
    label = "qwen3-30b-a3b/ep8"
    shape = layer_shape("qwen3-30b-a3b", 1, 8)
    assert (shape.experts, shape.moe_layers) == (16, 48)
    want = {
        ("inplace", "direct"): (6 * 2**20, 43508563968, 3168),
        ("inplace", "layerwise"): (157286400, 58004078592, 3264),
        ("streaming", "streamed"): (0, 2 * shape.layer_bytes * shape.moe_layers, 2304),
    }
    for (kind, way), figures in want.items():
        bench.setup(results, label, kind)
        got = tuple(
            getattr(bench, f"track_{way}_{figure}")(results, label, kind)
            for figure, _ in REFIT_EP_FIGURES
        )
        assert got == figures, (kind, way)


def test_a_rank_whose_weights_do_not_fit_a_device_is_na_there(monkeypatch):
    # DeepSeek-V3 TP4's BF16 experts (58 layers, 330 GiB) fit neither a GB200 nor an H200: n/a,
    # with the replay's reason; with PR #45589's headroom beside them they load and convert.
    label = "deepseek-v3/tp4"
    narrow(monkeypatch, label, kinds=("strided_copy",))
    loads = bench_allocator.RankLoadReplay().setup_cache()
    for device in ("GB200", "H200"):
        with pytest.raises(NotImplementedError, match="do not fit: device_bytes"):
            getattr(bench_allocator, f"RankLoad{device}")().setup(loads, label, "strided_copy")
    bench = bench_allocator.RankLoadReplay()
    bench.setup(loads, label, "strided_copy")
    assert bench.track_layers_lost_to_oom(loads, label, "strided_copy") == 0


@requires_flashinfer
def test_a_helper_that_takes_bf16_weights_is_loaded_with_them(monkeypatch):
    # fp8-flashinfer quantizes the BF16 layers the rank loads: PR #45589's device is their bytes
    # and its headroom, not the FP8 checkpoint's.
    label = "llama-4-maverick-fp8/tp8"
    narrow(monkeypatch, label, kinds=("flashinfer",))
    shape = layer_shape("llama-4-maverick-fp8", 8)
    loaded = dataclasses.replace(shape, format="bf16").model_bytes
    assert formats._loaded_bytes(label, "flashinfer") == loaded > shape.model_bytes
    assert formats._loaded_bytes(label, "fast") == shape.model_bytes
    loads = bench_fp8.RankLoadReplay().setup_cache()
    bench = bench_fp8.RankLoadReplay()
    bench.setup(loads, label, "flashinfer")
    want = rank_load(shape, "fp8-flashinfer", loaded + PR45589_HEADROOM_BYTES)
    assert bench.track_num_device_alloc(loads, label, "flashinfer") == want.num_device_alloc


def test_the_rank_load_names_the_oom_layer_and_the_refused_device_calls():
    # DeepSeek-R1 NVFP4 TP4 on an H200 under vLLM's load (default pool, 20 MiB): vLLM 0.29's path
    # fills the device with stranded segments, then each refused cudaMalloc frees the cache and
    # retries, and it still fits. With 2 GiB beside the weights its 2.4 GiB per layer runs out
    # at once; -fast's 1.5 GiB fits; the figure counts the layers lost.
    shape = layer_shape("deepseek-r1-nvfp4", 4)
    h200 = rank_load(shape, "nvfp4-legacy", LOAD_DEVICES["H200"])
    assert h200.oom_layer is None
    assert h200.num_device_alloc_failed == h200.num_device_free == 1797
    assert rank_load(shape, "nvfp4-legacy", LOAD_DEVICES["GB200"]).num_device_free == 0
    tight = shape.moe_layers * shape.layer_bytes + 2 * 2**30
    small = rank_load(shape, "nvfp4-legacy", tight)
    assert small.oom_layer == 0 and small.num_ooms == 1
    bench = bench_nvfp4.RankLoadH200()
    bench.result = small
    assert bench.track_layers_lost_to_oom({}, shape.label, "legacy") == shape.moe_layers
    assert rank_load(shape, "nvfp4-fast", tight).oom_layer is None


def test_gpu_check_compares_the_quantized_strategies_and_names_a_missing_interleave(monkeypatch):
    # Step 1's quantized part with the CPU standing in for the GPU: FlashInfer's interleave
    # rejects CPU tensors (its rows fail, saying why), every strategy matches its -legacy.
    import torch

    from moe_bench.gpucheck import exact, plan

    monkeypatch.setattr(plan, "cuda_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(plan, "QUANT_CHECK_EXPERTS", 1)
    monkeypatch.setattr(plan, "SWIZZLE_CHECK_SHAPES", ((128, 4),))
    assert exact._quantized_exact(dry_run=True) == []
    rows = exact._quantized_exact(dry_run=False)
    registered = quant_records(REGISTRY)
    strategies = [row["strategy"] for row in rows if row["strategy"] in registered]
    assert sorted(strategies) == sorted(registered)
    assert all(row["exact"] for row in rows if row["strategy"] in registered)
    interleaves = [row for row in rows if row["strategy"] not in registered]
    # one row per scale dtype: uint8 (NVFP4, MXFP4, MXFP8) and bf16 (MXINT4)
    assert [row["shape"].split()[0] for row in interleaves] == ["uint8", "bfloat16"]
    for interleave in interleaves:
        assert interleave["exact"] in (False, None) and "error" in interleave


def test_quant_layer_time_derives_its_figures_from_one_measurement_per_timed_cell(monkeypatch):
    # A reduced profile (smoke: one expert) times CPU_PROFILE_SHAPES with its experts; every
    # other shape is n/a, saying why; the three figures read one timing.time_layer each.
    monkeypatch.setattr(common, "profile", lambda: "smoke")
    monkeypatch.setattr(formats, "REPEATS", 3)
    timed, untimed = "gpt-oss-20b-mxfp4/tp1", "kimi-k2-nvfp4/tp8"
    monkeypatch.setattr(formats, "CPU_PROFILE_SHAPES", (timed,))
    bench = bench_mxfp4.LayerTime()
    timings = bench.setup_cache()
    assert set(timings) == {(timed, kind) for kind in formats.QUANT_KINDS}
    full = layer_shape("gpt-oss-20b-mxfp4", 1)
    with pytest.raises(NotImplementedError, match="mxfp4-flashinfer is not registered here"):
        bench.setup(timings, timed, "flashinfer")  # no FlashInfer helper of gpt-oss's layout
    for kind in (kind for kind in formats.QUANT_KINDS if kind != "flashinfer"):
        bench.setup(timings, timed, kind)
        measured = timings[timed, kind]
        assert measured.strategy == f"mxfp4-{kind}" and measured.shape.experts == 1
        assert len(measured.strategy_time.samples) == 3
        assert bench.track_layer_seconds(timings, timed, kind) == measured.seconds > 0
        assert bench.track_copy_ratio(timings, timed, kind) == measured.copy_ratio
        assert bench.track_whole_model_seconds(timings, timed, kind) == pytest.approx(
            measured.seconds * full.experts * full.moe_layers
        )
    with pytest.raises(NotImplementedError, match="smoke profile does not time kimi-k2"):
        bench.setup(timings, untimed, "fast")
    profile = bench_nvfp4.Profile()
    profile.setup(timed)
    assert profile.track_timed_experts(timed) == 1
    with pytest.raises(NotImplementedError, match="does not time"):
        profile.setup(untimed)
    monkeypatch.setattr(common, "profile", lambda: "full")
    profile.setup(untimed)
    assert profile.track_timed_experts(untimed) == layer_shape("kimi-k2-nvfp4", 8).experts


def test_time_layer_of_a_quantized_shape_copies_every_tensor_and_restores_in_place_inputs(
    monkeypatch,
):
    # The reference copies weights, scales and biases; an in-place strategy finds its pristine
    # input before every call (a conversion of converted bytes would differ from the first).
    import torch

    from moe_convert import convert, layer_tensors
    from moe_convert.measuring import timing

    shape = layer_shape("gpt-oss-20b-mxfp4", 1).with_experts(1)
    pristine = layer_tensors(shape, "cpu")
    want = convert(layer_tensors(shape, "cpu"), strategy="mxfp4-inplace", gated=shape.gated)
    seen = []
    real = timing.convert

    def same(a, b) -> bool:  # bytes: random fp8 and bf16 bytes hold NaNs, never equal as numbers
        return all(
            torch.equal(x.view(torch.uint8), y.view(torch.uint8))
            for x, y in zip(a.values(), b.values(), strict=True)
        )

    def spy(layer, *, strategy, gated):
        seen.append(same(layer, pristine))
        out = real(layer, strategy=strategy, gated=gated)
        assert same(out, want)
        return out

    monkeypatch.setattr(timing, "convert", spy)
    measured = timing.time_layer(shape, "mxfp4-inplace", repeats=3, warmup=1)
    assert seen == [True] * 4
    assert measured.bytes_moved == 2 * shape.layer_bytes
    with pytest.raises(ValueError, match="meta"):
        timing.time_layer(shape, "mxfp4-fast", device="meta")
