"""The installed engines' adapters (``moe_convert.formats.bf16.engines``) and
``python -m moe_convert engines``.

Where vLLM (or SGLang) is installed, its adapter is also covered by every per-strategy test in
test_strategies.py and test_memory.py (they read ``STRATEGIES``); here: registration follows the
installation, the adapter calls the installed function itself and never falls back, and the
``engines`` command reports and fails as it should. CI does not install the engines: their tests
skip there, saying why (docs/engines.md: how the vLLM adapter was tested against vLLM 0.33.0).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import STRATEGIES, convert, register
from moe_convert.cli import commands as cli
from moe_convert.formats.bf16 import engines
from moe_convert.formats.bf16.engines import ENGINES, SGLANG, VLLM, Engine, check_engine
from moe_convert.formats.bf16.inputs import random_weights
from moe_convert.formats.bf16.reference import flashinfer_reference


def requires_engine(engine: Engine) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not engine.installed,
        reason=f"{engine.distribution} is not installed "
        "(CI does not install the engines; see docs/engines.md)",
    )


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.strategy)
def test_adapter_registered_exactly_where_its_engine_is_installed(engine):
    assert (engine.strategy in STRATEGIES) == engine.installed
    assert engine.transcription in STRATEGIES and engine.transcription != engine.strategy
    assert (
        engine.version != "not installed" if engine.installed else engine.version == "not installed"
    )


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize(
    "engine", [pytest.param(e, marks=requires_engine(e)) for e in ENGINES], ids=lambda e: e.strategy
)
def test_adapter_calls_the_installed_function_and_matches_flashinfer(engine, gated, monkeypatch):
    owner, name = engine.resolve()
    original, calls = getattr(owner, name), []

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    w13, w2 = random_weights((3, 256 if gated else 128, 512), (3, 512, 128), seed=5)
    in13, in2 = w13.clone(), w2.clone()
    got = convert(in13, in2, strategy=engine.strategy, gated=gated)
    assert calls, f"{engine.function} never ran"  # once (vLLM) or per weight (SGLang)
    aliased = (got[0].data_ptr(), got[1].data_ptr()) == (in13.data_ptr(), in2.data_ptr())
    assert aliased == STRATEGIES[engine.strategy].inplace
    for g, w in zip(got, flashinfer_reference(w13, w2, gated=gated), strict=True):
        assert g.shape == w.shape and torch.equal(g.view(torch.uint8), w.view(torch.uint8))


def test_vllm_adapter_raises_when_vllm_does_not_import(monkeypatch):
    """Installed but broken: the adapter raises with the cause and never falls back."""
    real_import = importlib.import_module

    def broken(name, *args):
        if name.startswith("vllm"):
            raise ImportError(f"No module named 'xgrammar' (while importing {name})")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", broken)
    w13, w2 = random_weights((1, 128, 128), (1, 128, 64))
    before = w13.clone()
    with pytest.raises(ImportError, match="xgrammar"):
        engines._vllm(w13, w2, True)
    assert torch.equal(w13.view(torch.uint8), before.view(torch.uint8))  # nothing converted


def test_vllm_is_in_place_from_0_31_on():
    assert [
        engines._vllm_converts_in_place(v)
        for v in ("0.29.0", "0.30.0", "0.31.0", "0.33.1.dev4+gabc", "1.0.0")
    ] == [False, False, True, True, True]


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

    register("_wrong", inplace=True, origin="test probe")(wrong)
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
    STRATEGIES.pop("_wrong")


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
