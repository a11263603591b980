"""The paired A/B comparison: two commits' libraries side by side, the verdict rule, usage errors.

The verdict logic is tested on given times (``time_once`` replaced), not on the machine's
clock: a unit test asserts the rule, docs/timing.md's trials measure the detection.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import paired  # noqa: E402

#: The quantized shapes the cpu profile times.
QUANT_TIMED = [
    label
    for label in paired.formats.CPU_PROFILE_SHAPES
    if paired.formats.FORMAT_OF[label] != "bf16"
]
HEAD = subprocess.run(
    ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
).stdout.strip()


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("commits")
    return {side: paired.load_commit(HEAD, ROOT, folder, side) for side in ("base", "head")}


def test_two_copies_of_the_library_live_side_by_side(libs):
    base, head = libs["base"], libs["head"]
    assert base is not head and base.REGISTRY is not head.REGISTRY
    # not the installed package
    assert base.convert.__module__ != "moe_convert.formats.table"
    assert set(base.REGISTRY) == set(head.REGISTRY)


def test_in_place_is_read_from_the_record_or_from_an_older_base_s_set(libs):
    assert paired._in_place(libs["head"], "strided_inplace")
    assert not paired._in_place(libs["head"], "strided_copy")
    older = SimpleNamespace(STRATEGIES={"inplace": None, "legacy": None}, INPLACE={"inplace"})
    assert paired._in_place(older, "inplace") and not paired._in_place(older, "legacy")


def _fake_clock(monkeypatch, head_factor: float) -> None:
    """Base calls take 10 ms, head calls 10 ms x ``head_factor``; the machine's load multiplies
    both calls of a pair alike (up to 2x), and each call has its own +-3 % on top."""
    load = [1.0, 1.6, 1.1, 2.0, 1.3]
    own = [1.03, 0.97, 1.0, 0.98, 1.02, 1.01, 0.99]
    calls = itertools.count()

    def time_once(fn, device):
        fn()  # the real call, so the strategy still runs
        call = next(calls)
        seconds = 0.01 * load[call // 2 % len(load)] * own[call % len(own)]
        return seconds * (head_factor if _side[0] == "head" else 1.0), 0

    monkeypatch.setattr(paired.timing, "time_once", time_once)


_side = [""]
_buffers: dict[str, set[int]] = {"base": set(), "head": set()}


@pytest.fixture
def track_side(monkeypatch, libs):
    """Remember which library each timed call belongs to (the fake clock needs it) and the
    buffers it converted (its first tensor's)."""
    for side, lib in libs.items():
        original = lib.convert

        def convert(layer, _side_name=side, _original=original, **kwargs):
            _side[0] = _side_name
            _buffers[_side_name].add(next(iter(layer.values())).data_ptr())
            return _original(layer, **kwargs)

        monkeypatch.setattr(lib, "convert", convert)


@pytest.mark.parametrize(
    "factor, verdict", [(1.0, "same"), (1.3, "regressed"), (1.5, "regressed"), (0.7, "improved")]
)
def test_verdict_rule(monkeypatch, libs, track_side, factor, verdict):
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    _fake_clock(monkeypatch, factor)
    cell = paired.measure_cell(
        libs, "qwen3-30b-a3b/tp2", "strided_copy", paired.torch.device("cpu")
    )
    assert cell.verdict == verdict
    assert cell.ci_low <= cell.ratio <= cell.ci_high
    assert cell.ratio == pytest.approx(factor, rel=0.05)
    assert paired.MIN_PAIRS <= cell.n_pairs <= paired.MAX_PAIRS


def test_both_sides_convert_both_input_buffers(monkeypatch, libs, track_side):
    # Where a buffer lies changes the time of the same code: neither side may keep one.
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    _fake_clock(monkeypatch, 1.0)
    for used in _buffers.values():
        used.clear()
    paired.measure_cell(libs, "qwen3-30b-a3b/tp2", "strided_copy", paired.torch.device("cpu"))
    assert len(_buffers["base"]) == len(_buffers["head"]) == 2
    assert _buffers["base"] == _buffers["head"]


def test_a_head_that_raises_fails_its_cell(monkeypatch, libs):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    record = dataclasses.replace(libs["head"].REGISTRY["strided_copy"], function=broken)
    monkeypatch.setitem(libs["head"].REGISTRY, "strided_copy", record)
    cell = paired.measure_cell(
        libs, "qwen3-30b-a3b/tp2", "strided_copy", paired.torch.device("cpu")
    )
    assert (cell.verdict, cell.ratio) == ("failed", None)
    assert "head raised RuntimeError('boom')" in cell.error


def test_a_strategy_missing_in_head_fails_and_one_new_in_head_is_not_judged(monkeypatch, libs):
    monkeypatch.delitem(libs["head"].REGISTRY, "batched")
    cell = paired.measure_cell(libs, "qwen3-30b-a3b/tp2", "batched", paired.torch.device("cpu"))
    assert cell.verdict == "failed" and "not registered in head" in cell.error
    monkeypatch.setitem(libs["head"].REGISTRY, "batched", libs["base"].REGISTRY["batched"])
    monkeypatch.delitem(libs["base"].REGISTRY, "batched")
    cell = paired.measure_cell(libs, "qwen3-30b-a3b/tp2", "batched", paired.torch.device("cpu"))
    assert cell.verdict == "n/a" and "not registered in base" in cell.error


@pytest.mark.parametrize("kind", ["fast", "inplace"])
def test_a_quantized_cell_is_paired_by_the_same_rule(monkeypatch, libs, track_side, kind):
    # benchmarks.formats' cell (shape, kind): the shape's format's strategy through each side's
    # own convert (in place too), judged as a BF16 cell is.
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    _fake_clock(monkeypatch, 1.3)
    label = QUANT_TIMED[0]
    cell = paired.measure_cell(libs, label, kind, paired.torch.device("cpu"))
    assert (cell.shape, cell.strategy, cell.verdict) == (label, kind, "regressed")
    assert cell.ratio == pytest.approx(1.3, rel=0.05)


def test_a_format_selects_its_own_cells(monkeypatch):
    # -b picks cells by their format's names: bench_nvfp4's are NVFP4's alone, bench_convert's
    # BF16's, LayerTime all.
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    formats = paired.formats
    nvfp4 = paired.cells(re.compile(r"bench_nvfp4\."))
    assert {label for label, _ in nvfp4} == {
        label for label in QUANT_TIMED if label in formats.FORMAT_SHAPES["nvfp4"]
    }
    assert len(nvfp4) == len(formats.QUANT_KINDS)
    bf16 = paired.cells(re.compile(r"bench_convert\."))
    assert bf16 == [
        (label, strategy)
        for label in formats.FORMAT_SHAPES["bf16"]
        for strategy in formats.kinds("bf16")
    ]
    everything = paired.cells(re.compile("LayerTime"))
    assert everything == paired.cells(None) == bf16 + [c for c in everything if c not in bf16]
    assert {label for label, _ in everything} == set(formats.CPU_PROFILE_SHAPES)
    assert paired.cells(re.compile(r"bench_fp8\..*'fast'\)")) == [
        (formats.FORMAT_SHAPES["fp8"][0], "fast")
    ]


def test_a_base_from_before_the_formats_is_not_judged_and_a_head_without_them_fails(
    monkeypatch, libs
):
    label = QUANT_TIMED[0]
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    head = libs["head"]
    bf16_only = {name: r for name, r in head.REGISTRY.items() if r.format == "bf16"}
    monkeypatch.setattr(head, "REGISTRY", bf16_only)  # a head without the quantized formats
    cell = paired.measure_cell(libs, label, "fast", paired.torch.device("cpu"))
    assert cell.verdict == "failed" and "not registered in head" in cell.error
    monkeypatch.undo()
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    # a commit before issue 18: no Layer, BF16's STRATEGIES only, no QUANT_STRATEGIES
    base = libs["base"]
    monkeypatch.setattr(base, "STRATEGIES", base.strategies("bf16"), raising=False)
    monkeypatch.delattr(base, "Layer")
    assert not hasattr(base, "QUANT_STRATEGIES")
    cell = paired.measure_cell(libs, label, "fast", paired.torch.device("cpu"))
    assert cell.verdict == "n/a" and "not registered in base" in cell.error


@pytest.mark.parametrize("label", ["qwen3-30b-a3b/tp2", "gpt-oss-120b-mxfp4/tp2"])
def test_a_base_from_before_the_format_axis_converts_through_its_own_functions(
    monkeypatch, libs, label
):
    # No Layer nor convert_layer before issue 28: BF16's convert of w13 and w2 (returning both),
    # a quantized format's convert_quant of the side's own QuantLayer; the registry was BF16's
    # STRATEGIES and the quantized formats' QUANT_STRATEGIES. Made here of the side's own.
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    _fake_clock(monkeypatch, 1.0)
    base = libs["base"]
    layer_type, convert = base.Layer, base.convert

    def convert_weights(w13, w2, *, strategy, gated):
        out = convert(layer_type(w13, w2), strategy=strategy, gated=gated)
        return out.w13, out.w2

    def convert_quant(layer, *, strategy, gated):
        assert isinstance(layer, layer_type)
        return convert(layer, strategy=strategy, gated=gated)

    quantized = {name: r for name, r in base.REGISTRY.items() if r.format != "bf16"}
    monkeypatch.delattr(base, "Layer")
    monkeypatch.delattr(base, "convert_layer", raising=False)
    monkeypatch.setattr(base, "STRATEGIES", base.strategies("bf16"), raising=False)
    monkeypatch.setattr(base, "QUANT_STRATEGIES", quantized, raising=False)
    monkeypatch.setattr(base, "QuantLayer", layer_type, raising=False)
    monkeypatch.setattr(base, "convert", convert_weights)
    monkeypatch.setattr(base, "convert_quant", convert_quant, raising=False)
    name = "convert" if paired.formats.FORMAT_OF[label] == "bf16" else "convert_quant"
    calls, original = [], getattr(base, name)

    def spy(*args, **kwargs):
        calls.append(kwargs["strategy"])
        _side[0] = "base"
        return original(*args, **kwargs)

    monkeypatch.setattr(base, name, spy)
    cell = paired.measure_cell(libs, label, "inplace", paired.torch.device("cpu"))
    assert cell.verdict != "failed" and cell.error is None
    assert set(calls) == {paired.formats.strategy_name(paired.formats.FORMAT_OF[label], "inplace")}


def test_asv_can_import_it_without_scipy():
    # asv imports every module of benchmarks/ in its own environment: torch and the project only.
    code = "import sys; sys.modules['scipy'] = None; import benchmarks.paired"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nosuchcommit", "HEAD"], "'nosuchcommit' is not a commit"),
        (["HEAD", "HEAD", "-b", "("], "--bench '(' is not a regular expression"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, message):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.paired", *argv], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
