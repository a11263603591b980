"""The installed engines' adapters (``moe_convert.formats.bf16.engines``, on
``moe_convert.formats.engines``' mechanism) and ``python -m moe_convert engines``.

Where vLLM (or SGLang) is installed, its adapter is also covered by every per-strategy test in
test_strategies.py and test_memory.py (they read ``REGISTRY``); here: registration follows the
installation, the adapter calls the installed function itself and never falls back, and the
``engines`` command reports and fails as it should. CI does not install the engines: their tests
skip there, saying why (docs/engines.md: how the vLLM adapter was tested against vLLM 0.33.0).
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import requires_flashinfer
from engine_repo import MXFP4_FORMS

from moe_convert import (
    REGISTRY,
    UNAVAILABLE,
    Layer,
    LayerShape,
    convert,
    layer_shape,
    layer_tensors,
    register,
    strategies,
)
from moe_convert.cli import commands as cli
from moe_convert.formats.bf16.engines import ENGINES, SGLANG, VLLM, VLLM_FORMS, register_vllm
from moe_convert.formats.bf16.inputs import random_weights
from moe_convert.formats.bf16.reference import flashinfer_reference
from moe_convert.formats.engines import (
    UNCALLABLE,
    Engine,
    FunctionCode,
    check_engine,
    form_breaches,
    registered_form,
)
from moe_convert.formats.preparations import PREPARATIONS, register_preparations
from moe_convert.load.refit import reload_safety, reversibility
from moe_convert.measuring.memory import strategy_memory
from moe_convert.measuring.traffic import strategy_traffic


def requires_engine(engine: Engine) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not engine.installed,
        reason=f"{engine.distribution} is not installed "
        "(CI does not install the engines; see docs/engines.md)",
    )


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.strategy)
def test_adapter_registered_exactly_where_its_engine_is_installed(engine):
    assert (engine.strategy in strategies(engine.format)) == engine.installed
    assert engine.transcription in strategies(engine.format)
    assert engine.transcription != engine.strategy
    assert (
        engine.version != "not installed" if engine.installed else engine.version == "not installed"
    )


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize(
    "engine", [pytest.param(e, marks=requires_engine(e)) for e in ENGINES], ids=lambda e: e.strategy
)
def test_adapter_calls_the_installed_function_and_matches_flashinfer(engine, gated, monkeypatch):
    form = registered_form(engine)
    if form is not None and form.gated_only and not gated:
        pytest.skip(f"{engine.distribution} {engine.version}: {form.gated_only}")
    owner, name = engine.resolve()
    original, calls = getattr(owner, name), []

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    w13, w2 = random_weights((3, 256 if gated else 128, 512), (3, 512, 128), seed=5)
    in13, in2 = w13.clone(), w2.clone()
    got = convert(Layer(in13, in2), strategy=engine.strategy, gated=gated)
    assert calls, f"{engine.function} never ran"  # once (vLLM) or per weight (SGLang)
    aliased = (got.w13.data_ptr(), got.w2.data_ptr()) == (in13.data_ptr(), in2.data_ptr())
    assert aliased == REGISTRY[engine.strategy].inplace
    for g, w in zip(got.values(), flashinfer_reference(w13, w2, gated=gated), strict=True):
        assert g.shape == w.shape and torch.equal(g.view(torch.uint8), w.view(torch.uint8))


def test_check_engine_of_an_absent_engine_says_so():
    absent = Engine("absent", "no-such-engine-distribution", "absent.module", "convert", "inplace")
    check = check_engine(absent)
    assert (check.identical, check.version) == (None, "not installed")
    assert "no-such-engine-distribution is not installed" in check.detail


@pytest.fixture
def fake_engines(monkeypatch):
    """Two "installed" engines (torch is installed), adapters of a right and a wrong strategy."""

    def wrong(w13, w2, gated):
        """Test probe: right shapes, wrong bytes. In place. Peak transient: 0."""
        return tuple(w.view(w.shape[0], 2 * w.shape[2] // 128, w.shape[1], 64) for w in (w13, w2))

    register("_wrong", format="bf16", inplace=True, origin="test probe")(wrong)
    right = Engine(
        "strided_inplace",
        "torch",
        "moe_convert.formats.bf16.strategies",
        "strided_inplace",
        "inplace",
    )
    bad = Engine("_wrong", "torch", "tests", "wrong", "inplace")
    monkeypatch.setattr(cli, "ENGINES", (right,))
    yield right, bad
    REGISTRY.pop("_wrong")


@requires_flashinfer
def test_engines_command_passes_when_every_installed_engine_agrees(fake_engines, capsys):
    assert cli.main(["engines"]) == 0
    out = capsys.readouterr().out
    assert "strided_inplace   torch" in out and "byte-identical" in out
    assert "gated=True: w13 ok, w2 ok; gated=False: w13 ok, w2 ok" in out


@requires_flashinfer
def test_engines_command_fails_when_an_installed_engine_disagrees(
    fake_engines, monkeypatch, capsys
):
    right, bad = fake_engines
    monkeypatch.setattr(cli, "ENGINES", (right, bad))
    assert cli.main(["engines"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS or FAILED" in out and "w13 MISMATCH" in out


def test_engines_command_lists_every_engine(capsys):
    status = cli.main(["engines"])
    out = capsys.readouterr().out
    for engine in (VLLM, SGLANG):
        assert f"calls {engine.module}.{engine.function}" in out
        assert f"{engine.distribution} {engine.version}" in out
    assert status == (1 if any(check_engine(e).identical is False for e in ENGINES) else 0)


def test_machine_records_the_engine_versions():
    pytest.importorskip("asv", reason="moe_bench.machine needs asv (the bench extra)")
    from moe_bench.machine import machine_facts

    facts = machine_facts("cpu")
    assert (facts["vllm"], facts["sglang"]) == (VLLM.version, SGLANG.version)


def test_vllm_asv_configuration_has_a_release_matrix_apart_from_the_nightly():
    pytest.importorskip("asv", reason="asv is in the bench extra")
    from asv.config import Config

    root = Path(__file__).resolve().parents[1]
    vllm, nightly = (Config.load(root / name) for name in ("asv.vllm.conf.json", "asv.conf.json"))
    assert len(vllm.matrix["req"]["vllm"]) >= 2  # releases side by side
    assert "torch" not in vllm.matrix["req"]  # each release brings its own pins
    for key in ("env_dir", "results_dir", "html_dir"):
        assert getattr(vllm, key) != getattr(nightly, key), (
            key
        )  # never mixed into the nightly history
    assert vllm.benchmark_dir == nightly.benchmark_dir


# A fake vLLM made by the test: the package path and function name of vLLM's converter, a body
# that does each release's form with this library's transcriptions, and a log line to stdout
# on import and per call, as vLLM 0.24.0 to 0.30.0 log.
_FAKE_HEADER = """
import torch
from moe_convert.formats.layout import block_layout_view, swap_w13_to_w31
from moe_convert.formats.bf16.strategies import legacy, preallocated

print("INFO fake vllm logs to stdout on import")
"""
PER_EXPERT = """
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight
):
    print("INFO fake vllm logs to stdout per call")
    return legacy(swap_w13_to_w31(w13_weight), w2_weight, True)  # w13 came as [w3; w1]
"""
PREALLOCATED = """
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight, is_gated_act_gemm=True
):
    print("INFO fake vllm logs to stdout per call")
    return preallocated(w13_weight, w2_weight, is_gated_act_gemm)
"""
IN_PLACE = """
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight, is_gated_act_gemm=True
):
    out = preallocated(w13_weight, w2_weight, is_gated_act_gemm)
    for weight, converted in zip((w13_weight, w2_weight), out):
        weight.view(-1).copy_(converted.reshape(-1))
    return block_layout_view(w13_weight), block_layout_view(w2_weight)
"""
# In place by its code (a copy_ back), new tensors in fact: the adapter must not believe it.
SAYS_IN_PLACE = IN_PLACE.replace("    return block_layout_view", "    return out  #")
NEW_SIGNATURE = PREALLOCATED.replace("is_gated_act_gemm=True", "is_gated_act_gemm=True, tile=128")
ABSENT = "\ndef some_other_helper():\n    pass\n"


@pytest.fixture
def fake_vllm(tmp_path):
    """``install(version, source[, mxfp4])``: a fake vLLM on ``sys.path`` (``source`` its
    ``flashinfer_utils.py``, ``mxfp4`` its ``fused_moe/oracle/mxfp4.py``), the adapters
    registered again for it; afterwards the real state (vLLM installed here or not) is registered
    again, with the real vLLM's modules put back where it was imported (vLLM does not import
    twice in a process)."""
    paths = []
    real = {name: module for name, module in sys.modules.items() if _is_vllm(name)}

    def install(version: str, source: str, mxfp4: str = ""):
        root = tmp_path / version
        package = root / "vllm" / "model_executor" / "layers"
        for folder in ("fused_moe/oracle", "quantization/utils"):
            (package / folder).mkdir(parents=True)
        for folder in (root / "vllm", package.parent, package, *package.rglob("*")):
            (folder / "__init__.py").touch()
        (package / "quantization/utils/flashinfer_utils.py").write_text(
            textwrap.dedent(_FAKE_HEADER) + textwrap.dedent(source)
        )
        if mxfp4:
            (package / "fused_moe/oracle/mxfp4.py").write_text(mxfp4)
        info = root / f"vllm-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        sys.path.insert(0, str(root))
        paths.append(str(root))
        _forget_vllm()
        register_preparations()
        return register_vllm()

    yield install
    for path in paths:
        sys.path.remove(path)
    _forget_vllm()
    sys.modules.update(real)
    register_vllm()
    register_preparations()


def _is_vllm(name: str) -> bool:
    return name == "vllm" or name.startswith("vllm.")


def _forget_vllm():
    for name in [n for n in sys.modules if _is_vllm(n)]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.mark.parametrize(
    ("version", "source", "form"),
    [
        ("0.23.0", PER_EXPERT, "per-expert"),
        ("0.24.0", PREALLOCATED, "preallocated (#45589)"),
        # A commit between tags with the in-place code: the code decides, not the version.
        ("0.30.1.dev1+g0123abc", IN_PLACE, "in place (#54699)"),
    ],
)
def test_vllm_form_is_read_from_its_code(fake_vllm, version, source, form, capsys):
    found = fake_vllm(version, source)
    assert found is not None and found.name == form and registered_form(VLLM) is found
    record = REGISTRY[VLLM.strategy]
    assert record.inplace == found.inplace and form in record.origin
    doc = " ".join(record.function.__doc__.split())  # the form's contract, as registered
    assert ("In place" in doc, "Out of place" in doc) == (found.inplace, not found.inplace)
    transcription = REGISTRY[found.transcription]
    if found.figures is None:  # the form's figures are its transcription's
        assert (record.peak, record.traffic, record.launches) == (
            transcription.peak,
            transcription.traffic,
            transcription.launches,
        )
    w13, w2 = random_weights((3, 256, 512), (3, 512, 128), seed=5)
    want = REGISTRY["legacy"].function(Layer(w13.clone(), w2.clone()), True)
    in13, in2 = w13.clone(), w2.clone()
    got = convert(Layer(in13, in2), strategy=VLLM.strategy, gated=True)
    assert (got.w13.data_ptr() == in13.data_ptr()) == found.inplace
    assert list(got) == list(want) == ["w13", "w2"]
    for g, w in zip(got.values(), want.values(), strict=True):
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
    out = capsys.readouterr()
    assert "fake vllm logs" not in out.out and "fake vllm logs to stdout on import" in out.err


def test_vllm_per_expert_form_converts_gated_layers_only(fake_vllm):
    fake_vllm("0.23.0", PER_EXPERT)
    w13, w2 = random_weights((2, 128, 256), (2, 256, 128))
    before = w13.clone()
    with pytest.raises(NotImplementedError, match=r"vllm 0\.23\.0 converts gated w13 only"):
        convert(Layer(w13, w2), strategy=VLLM.strategy, gated=False)
    assert torch.equal(w13.view(torch.uint8), before.view(torch.uint8))


def test_vllm_result_against_its_code_is_an_error(fake_vllm):
    """Code that reads as in place but returns new tensors: never believed silently."""
    assert fake_vllm("0.31.0", SAYS_IN_PLACE).inplace
    w13, w2 = random_weights((2, 256, 256), (2, 256, 128))
    with pytest.raises(RuntimeError, match="returned new tensors, but its code read as the in"):
        convert(Layer(w13, w2), strategy=VLLM.strategy, gated=True)


def test_an_engine_commit_that_breaks_its_form_is_measured_and_named(fake_vllm):
    """The same call in the engine suite (``form_breaches``: an engine's commit measured) is the
    engine's breach, not the adapter's misreading: said in those words, and the call measured as
    it ran (its new tensors are its peak)."""
    fake_vllm("0.31.0", SAYS_IN_PLACE)
    shape = LayerShape("check", 1, 4, 512, 256, 1)
    with form_breaches() as breaches:
        peak = strategy_memory(shape, VLLM.strategy, device="meta").peak_bytes
    assert breaches == [
        "vllm 0.31.0's convert_moe_weights_to_flashinfer_trtllm_block_layout no longer honours "
        "the in place (#54699) form its code reads as: it returned new tensors"
    ]
    assert peak >= shape.layer_bytes


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        (ABSENT, "vllm 0.15.1 has no convert_moe_weights_to_flashinfer_trtllm_block_layout in "),
        (NEW_SIGNATURE, "takes (cache_permute_indices, w13_weight, w2_weight, "),
    ],
)
def test_vllm_it_cannot_call_is_one_line_naming_what_is_missing(fake_vllm, source, missing, capsys):
    assert fake_vllm("0.15.1", source) is None
    assert VLLM.strategy not in REGISTRY and missing in UNAVAILABLE[VLLM.strategy].needs
    args = ["measure", "--model", "qwen3-235b-a22b", "--tp", "4", "--device", "meta"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*args, "--strategy", VLLM.strategy])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "strategy 'vllm' cannot run here" in err and missing in err


def test_vllm_adapter_raises_when_vllm_does_not_import(fake_vllm, monkeypatch):
    """Installed but broken: the adapter raises with the cause and never falls back."""
    fake_vllm("0.33.0", IN_PLACE)
    _forget_vllm()
    real_import = importlib.import_module

    def broken(name, *args):
        if name.startswith("vllm"):
            raise ImportError(f"No module named 'xgrammar' (while importing {name})")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", broken)
    w13, w2 = random_weights((1, 256, 128), (1, 128, 128))
    before = w13.clone()
    with pytest.raises(ImportError, match="xgrammar"):
        convert(Layer(w13, w2), strategy=VLLM.strategy, gated=True)
    assert torch.equal(w13.view(torch.uint8), before.view(torch.uint8))  # nothing converted


def test_measure_json_stays_json_lines_whatever_vllm_prints(fake_vllm, capsys):
    fake_vllm("0.24.0", PREALLOCATED)
    args = ["measure", "--model", "qwen3-235b-a22b", "--tp", "4", "--device", "meta"]
    assert cli.main([*args, "--experts", "4", "--strategy", "vllm,preallocated", "--json"]) == 0
    out = capsys.readouterr()
    records = [json.loads(line) for line in out.out.splitlines()]
    assert [r["strategy"] for r in records] == ["vllm", "preallocated"]
    vllm, transcription = records
    for key in ("peak_transient_bytes", "traffic_bytes", "launches"):
        assert vllm[key] == transcription[key]
    assert "fake vllm logs to stdout per call" in out.err


def test_vllm_forms_are_oldest_first_and_exclusive():
    """Each fake's code matches exactly one form (the first match is the installed one)."""
    codes = {
        "per-expert": FunctionCode(("cache_permute_indices", "w13_weight", "w2_weight"), {}),
        "preallocated (#45589)": FunctionCode(
            ("cache_permute_indices", "w13_weight", "w2_weight", "is_gated_act_gemm"),
            {"empty": 3, "index_select": 4},
        ),
        "in place (#54699)": FunctionCode(
            ("cache_permute_indices", "w13_weight", "w2_weight", "is_gated_act_gemm"),
            {"empty": 3, "index_select": 4, "copy_": 1},
        ),
    }
    for name, code in codes.items():
        assert [form.name for form in VLLM_FORMS if form.matches(code)] == [name]


# vLLM's prepare_fp8_moe_layer_for_fi, faked: its signature, its three TRTLLM-gen branches told
# apart by the layer's weight_block_size, each done with this library's -legacy transcription.
PREPARE_FP8 = (
    IN_PLACE
    + """
from moe_convert.formats.layer import Layer
from moe_convert.formats.registry import REGISTRY

_FORMAT = {None: "fp8", (128, 128): "fp8block", (1, 32): "mxfp8"}


def prepare_fp8_moe_layer_for_fi(
    layer, w13, w2, w13_scale, w13_input_scale, w2_scale, w2_input_scale, is_trtllm=False
):
    print("INFO fake vllm logs to stdout per call")
    block = layer.weight_block_size
    fmt = _FORMAT[tuple(block) if block else None]
    if not is_trtllm:  # the branches' names, as vLLM's body calls them
        rotate_weights_for_fi_trtllm_fp8_per_tensor_moe(w13, w2, True)
        _shuffle_deepseek_fp8_moe_weights()
        _shuffle_mxfp8_moe_weights()
    given = Layer(w13, w2) if fmt == "fp8" else Layer(w13, w2, w13_scale, w2_scale)
    out = REGISTRY[fmt + "-legacy"].function(given, layer.moe_config.is_act_and_mul)
    return out.w13, out.w2, out.w13_scale, out.w2_scale
"""
)


@requires_flashinfer
def test_quantized_adapters_share_the_mechanism(fake_vllm, capsys):
    """FP8, block-FP8 and MXFP8 run vLLM's function on CPU (MXFP8's CUDA-only interleave stood
    in for) and give their -legacy bytes; NVFP4's and MXINT4's need their file: never registered
    where they cannot run, the reason said."""
    fake_vllm("0.33.0", PREPARE_FP8)
    engines = {engine.format: engine for engine in PREPARATIONS}
    for fmt in ("fp8", "fp8block", "mxfp8"):
        assert f"{fmt}-vllm" in strategies(fmt) and registered_form(engines[fmt]) is not None
        check = check_engine(engines[fmt])
        assert check.identical, check.detail
        assert "gated=False: w13 ok, w2 ok" in check.detail and f"{fmt}-legacy" in check.detail
    for fmt, module in (("nvfp4", "flashinfer_fp4_moe"), ("mxint4", "flashinfer_mxint4_moe")):
        assert f"{fmt}-vllm" not in REGISTRY and module in UNCALLABLE[f"{fmt}-vllm"]
    assert "fake vllm logs" not in capsys.readouterr().out
    assert cli.main(["engines"]) == 0
    out = capsys.readouterr().out
    assert (
        "fp8block-vllm     vllm 0.33.0" in out and "prepare_fp8_moe_layer_for_fi, _shuffle" in out
    )
    assert f"n/a: {UNCALLABLE['nvfp4-vllm']}" in out
    args = ["measure", "--model", "kimi-k2-nvfp4", "--tp", "8", "--device", "meta"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*args, "--strategy", "nvfp4-vllm"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert f"strategy 'nvfp4-vllm' cannot run here: {UNCALLABLE['nvfp4-vllm']}" in err


def test_quantized_adapter_of_a_branch_vllm_lacks_is_not_registered(fake_vllm):
    fake_vllm("0.20.0", PREPARE_FP8.replace("_shuffle_deepseek_fp8_moe_weights()", "pass"))
    assert "fp8-vllm" in strategies("fp8") and "fp8block-vllm" not in REGISTRY
    assert "no form the adapter knows" in UNCALLABLE["fp8block-vllm"]


def test_fp8_adapter_of_vllm_0_16_converts_gated_layers_only(fake_vllm):
    """vLLM 0.16.0 called its rotation without is_gated_activation: told by the call's arguments."""
    fake_vllm("0.16.0", PREPARE_FP8.replace("(w13, w2, True)", "(w13, w2)"))
    fp8 = next(engine for engine in PREPARATIONS if engine.format == "fp8")
    assert registered_form(fp8).releases == "0.16.0" and registered_form(fp8).gated_only
    shape = LayerShape("small", 1, 2, 64, 128, 1, gated=False, format="fp8")
    layer = layer_tensors(shape, "cpu")
    with pytest.raises(NotImplementedError, match="converts gated layers only"):
        convert(layer, strategy="fp8-vllm", gated=False)


# vLLM 0.34.0's per-tensor rotation: the w1/w3 swap's copy first (gated), then the result copied
# back into the weights the rotation is given (``gemm{1,2}_weights.copy_(torch.stack(...))``).
PREPARE_FP8_COPIED_BACK = (
    PREPARE_FP8.replace(
        "    given = Layer(w13, w2) if fmt",
        """    if fmt == "fp8":
        if not layer.activation.is_gated and w2.shape[-1] % 128:  # align_moe_weights_for_fi
            pad = 128 - w2.shape[-1] % 128  # new zeroed tensors, the rows and columns appended
            w13 = torch.cat([w13, w13.new_zeros(w13.shape[0], pad, w13.shape[2])], 1)
            w2 = torch.cat([w2, w2.new_zeros(*w2.shape[:2], pad)], 2)
        if layer.moe_config.is_act_and_mul:
            w13 = swap_w13_to_w31(w13)
        rotate_weights_for_fi_trtllm_fp8_per_tensor_moe(w13, w2, layer.activation.is_gated)
        return w13, w2, w13_scale, w2_scale
    given = Layer(w13, w2) if fmt""",
    )
    + """

def rotate_weights_for_fi_trtllm_fp8_per_tensor_moe(gemm1_weights, gemm2_weights, is_gated):
    checkpoint = swap_w13_to_w31(gemm1_weights) if is_gated else gemm1_weights  # [w1; w3]
    out = REGISTRY["fp8-legacy"].function(Layer(checkpoint, gemm2_weights.clone()), is_gated)
    gemm1_weights.copy_(out.w13)
    gemm2_weights.copy_(out.w2)
"""
)


@requires_flashinfer
def test_fp8_adapter_of_vllm_0_34_reads_the_copy_back_as_in_place(fake_vllm):
    """0.34.0's rotation copies its result back: told by the rotation's own body (``copy_``),
    registered in place, its result in w2's input storage and (not gated) w13's."""
    fake_vllm("0.34.0", PREPARE_FP8_COPIED_BACK)
    fp8 = next(engine for engine in PREPARATIONS if engine.format == "fp8")
    form = registered_form(fp8)
    assert form.releases == "0.34.0" and form.inplace and REGISTRY["fp8-vllm"].inplace
    assert "copied back" in REGISTRY["fp8-vllm"].origin
    check = check_engine(fp8)
    assert check.identical, check.detail
    for gated in (True, False):
        layer = layer_tensors(LayerShape("small", 1, 2, 64, 128, 1, gated, "fp8"), "cpu")
        got = convert(layer, strategy="fp8-vllm", gated=gated)
        assert got.w2.data_ptr() == layer.w2.data_ptr()
        assert (got.w13.data_ptr() == layer.w13.data_ptr()) == (not gated)  # gated: the swap's


@requires_flashinfer
def test_fp8_adapter_of_vllm_0_34_pads_new_tensors_without_a_breach(fake_vllm):
    """Not gated, vLLM pads I to a multiple of 128 before its rotation
    (``align_moe_weights_for_fi``), into new tensors, whatever the form: no breach of the
    copy-back one. (The real 0.34.0 at the reload check's E2 H64 I64 recorded one, and the engine
    suite failed FP8's time figures at the 0.34.0 commit.)"""
    fake_vllm("0.34.0", PREPARE_FP8_COPIED_BACK)
    layer = layer_tensors(LayerShape("small", 1, 2, 64, 64, 1, False, "fp8"), "cpu")
    with form_breaches() as breaches:
        got = convert(layer, strategy="fp8-vllm", gated=False)
    assert breaches == [] and got.w2.shape[-1] == 128


def test_fp8_forms_are_told_apart_by_the_rotations_body():
    fp8 = next(engine for engine in PREPARATIONS if engine.format == "fp8")
    parameters = ("layer", "w13", "w2", "w13_scale", "w13_input_scale", "w2_scale",
                  "w2_input_scale", "is_trtllm")  # fmt: skip
    rotate = "rotate_weights_for_fi_trtllm_fp8_per_tensor_moe"
    bodies = {
        "0.17.0 to 0.33.0": FunctionCode(("gemm1_weights",), {"stack": 1, "shuffle_matrix_a": 2}),
        "0.34.0": FunctionCode(("gemm1_weights",), {"stack": 1, "copy_": 1}),
    }
    for releases, body in bodies.items():
        code = FunctionCode(parameters, {rotate: 3}, {rotate: body})
        assert [form.releases for form in fp8.forms if form.matches(code)] == [releases]


@requires_flashinfer
def test_reload_class_follows_the_installed_form(fake_vllm):
    """What the engine suite's ``Refit`` records at each commit (``reload_safety`` of the
    adapter, vLLM's function run the direct way): vLLM's BF16 converter turns reload-safe with its
    in-place form (#54699, 0.31.0); FP8 per-tensor's 0.34.0 copy-back gives w2 its own storage
    back, but w13 of a gated layer is the w1/w3 swap's new tensor: still not reload-safe, for
    w13 alone."""
    fake_vllm("0.24.0", PREALLOCATED)
    assert reload_safety("vllm").startswith("not reload-safe: direct: w13, w2 in new storage")
    fake_vllm("0.33.0", PREPARE_FP8)
    assert reload_safety("vllm") == "reload-safe"
    assert reload_safety("fp8-vllm").startswith("not reload-safe: direct: w13, w2 in new storage")
    fake_vllm("0.34.0", PREPARE_FP8_COPIED_BACK)
    assert reload_safety("fp8-vllm").startswith("not reload-safe: direct: w13 in new storage")


@requires_flashinfer
def test_a_gated_only_form_is_classed_on_the_layers_it_converts(fake_vllm):
    """vLLM's per-expert BF16 form (0.16.0 to 0.23.0) and FP8's 0.16.0 rotation convert gated
    layers only: their reload and inverse classes are read on the gated check layer; the
    not-gated one is no layer they load (a ``NotImplementedError`` from it failed every figure
    of the engine suite's cell at those commits, and ``strategies``)."""
    fake_vllm("0.23.0", PER_EXPERT)  # the code of `legacy`, its transcription: its classes
    assert reload_safety("vllm") == reload_safety("legacy") != "reload-safe"
    assert reversibility("vllm") == reversibility("legacy")
    fake_vllm("0.16.0", PREPARE_FP8.replace("(w13, w2, True)", "(w13, w2)"))
    assert reload_safety("fp8-vllm") == reload_safety("fp8-legacy") != "reload-safe"
    assert reversibility("fp8-vllm") == reversibility("fp8-legacy")


def test_mxfp4_form_is_told_by_its_signature_and_branch():
    """Both signatures the gpt-oss preparation had (0.25.0 added input scales, which its caller
    does not pass) and its TRTLLM-gen branch's index cache; another signature is no form."""
    mxfp4 = next(engine for engine in PREPARATIONS if engine.format == "mxfp4")
    head = ("mxfp4_backend", "layer", "w13_weight", "w2_weight", "w13_weight_scale",
            "w2_weight_scale", "w13_bias", "w2_bias")  # fmt: skip
    branch = {"get_w2_permute_indices_with_cache": 4, "nvfp4_block_scale_interleave": 1}
    for parameters, matches in (
        ((*head, "_cache_permute_indices"), True),  # 0.20.0 to 0.24.0
        ((*head, "w13_input_scale", "w2_input_scale", "_cache_permute_indices"), True),
        ((*head,), False),
    ):
        assert mxfp4.forms[0].matches(FunctionCode(parameters, branch)) == matches
    assert not mxfp4.forms[0].matches(FunctionCode((*head, "_cache_permute_indices"), {}))


@requires_flashinfer
def test_mxfp4_adapter_calls_the_preparation_as_vllms_caller_does(fake_vllm):
    """tests/engine_repo.py's transcription of vLLM 0.33.0's gpt-oss MXFP4 preparation, called
    with the TRTLLM-gen backend and one permute cache a device kept across calls: the bytes of
    ``mxfp4-legacy`` and, at full size on meta, its figures (the measured call finds the
    indices, as a reload of the layer does in vLLM)."""
    fake_vllm("0.33.0", IN_PLACE, mxfp4=MXFP4_FORMS["mxfp4"])
    mxfp4 = next(engine for engine in PREPARATIONS if engine.format == "mxfp4")
    assert registered_form(mxfp4).releases == "0.20.0 to 0.34.0"
    check = check_engine(mxfp4)
    assert check.identical, check.detail
    assert "w13_bias ok, w2_bias ok" in check.detail and "mxfp4-legacy" in check.detail
    shape = layer_shape("gpt-oss-20b-mxfp4", 1)
    record = REGISTRY["mxfp4-vllm"]
    assert not record.inplace and "Peak transient: ``mxfp4-legacy``'s" in record.function.__doc__
    peak = strategy_memory(shape, "mxfp4-vllm", device="meta").peak_bytes
    traffic = strategy_traffic(shape, "mxfp4-vllm")
    assert (peak, traffic.traffic_bytes, traffic.launches) == tuple(
        formula.evaluate(shape) for formula in (record.peak, record.traffic, record.launches)
    )
