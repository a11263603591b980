"""Every registered strategy, byte for byte against FlashInfer's helpers and against ``legacy``;
refit cycles, ``data_ptr`` stability and alias write-through; the docstring contract.

Strategies are read from ``moe_convert.strategies("bf16")`` at collection, so a newly registered
one is tested without editing this file. Large shapes use one or two experts to keep the file fast.
"""

from __future__ import annotations

import functools

import pytest
import torch

from moe_convert import REGISTRY, Layer, convert, register, strategies
from moe_convert.formats.bf16.inputs import random_weights
from moe_convert.formats.bf16.reference import AVAILABLE as FLASHINFER_AVAILABLE
from moe_convert.formats.bf16.reference import flashinfer_reference

# name -> (E experts, I intermediate per rank, H hidden, gated); w13 [E, 2I or I, H], w2 [E, H, I]
CASES = {
    "qwen3-235b-tp4": (2, 384, 4096, True),  # w13 [E, 768, 4096], w2 [E, 4096, 384]
    "qwen3-235b-tp4-relu2": (2, 384, 4096, False),
    "deepseek-v3-tp2": (1, 1024, 7168, True),  # w13 [E, 2048, 7168], w2 [E, 7168, 1024]
    "deepseek-v3-tp4": (1, 512, 7168, True),  # w13 [E, 1024, 7168], w2 [E, 7168, 512]
    "nemo-rl-4-768-2048": (4, 768, 2048, True),  # NeMo-RL #3296's bit-equality cases
    "nemo-rl-3-128-512": (3, 128, 512, True),
    "nemo-rl-relu2-3-256-512": (3, 256, 512, False),
    "one-expert": (1, 64, 256, True),
    "one-expert-relu2-one-k-block": (1, 64, 128, False),  # w2 rows of 128 bytes: nb = 1
    "hidden-192": (2, 64, 192, True),  # w2 has 6 shuffle blocks of 32 rows, not a power of two
}
# BF16's registered strategies, read at collection (the old ``STRATEGIES``).
BF16_STRATEGIES = strategies("bf16")
NAMES = sorted(BF16_STRATEGIES)
IN_PLACE = [name for name in NAMES if BF16_STRATEGIES[name].inplace]
OUT_OF_PLACE = [name for name in NAMES if not BF16_STRATEGIES[name].inplace]
# Small shapes for the multi-cycle tests.
REFIT_CASES = ["nemo-rl-3-128-512", "nemo-rl-relu2-3-256-512"]


def shapes(case: str) -> tuple[tuple[int, int, int], tuple[int, int, int], bool]:
    experts, inter, hidden, gated = CASES[case]
    return (experts, 2 * inter if gated else inter, hidden), (experts, hidden, inter), gated


@functools.cache
def weights(case: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random-bit checkpoint-layout weights; shared, so callers convert clones."""
    w13_shape, w2_shape, _ = shapes(case)
    return random_weights(w13_shape, w2_shape, seed=seed)


def as_bytes(pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(t.view(torch.uint8) for t in pair)


def convert_pair(
    w13: torch.Tensor, w2: torch.Tensor, *, strategy: str, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``convert`` of the BF16 layer ``(w13, w2)``: its converted ``(w13, w2)``, nothing else."""
    out = convert(Layer(w13, w2), strategy=strategy, gated=gated)
    assert isinstance(out, Layer) and list(out) == ["w13", "w2"]
    return out.w13, out.w2


@functools.cache
def expected(case: str, oracle: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 block layout of ``weights(case, seed)`` from ``oracle`` ("flashinfer" or "legacy")."""
    w13, w2 = weights(case, seed)
    gated = shapes(case)[2]
    if oracle == "flashinfer":
        return as_bytes(flashinfer_reference(w13, w2, gated=gated))
    return as_bytes(convert_pair(w13.clone(), w2.clone(), strategy="legacy", gated=gated))


def best_oracle() -> str:
    """FlashInfer's helpers where installed (CI), else ``legacy`` (itself checked against them)."""
    return "flashinfer" if FLASHINFER_AVAILABLE else "legacy"


def run(name: str, case: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    w13, w2 = weights(case, seed)
    return convert_pair(w13.clone(), w2.clone(), strategy=name, gated=shapes(case)[2])


def assert_bytes_equal(
    got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]
):
    for label, g, w in zip(("w13", "w2"), as_bytes(got), want, strict=True):
        assert g.shape == w.shape, f"{label}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        if not torch.equal(g, w):
            diff = (g != w).nonzero()
            raise AssertionError(
                f"{label}: {diff.shape[0]} of {g.numel()} bytes differ, first at {diff[0].tolist()}"
            )


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", NAMES)
def test_matches_flashinfer_helpers_and_so_legacy(name, case):
    """Byte for byte against FlashInfer's helpers where installed (CI): ``legacy`` is one of the
    names, so every strategy equals ``legacy`` too; without FlashInfer, against ``legacy``."""
    got = run(name, case)
    w13_shape, w2_shape, _ = shapes(case)
    for out, (experts, rows, cols) in zip(got, (w13_shape, w2_shape), strict=True):
        # bf16 [E, Kb/128, M, 64] with Kb = 2 cols bytes per row, contiguous for the kernel
        assert out.dtype == torch.bfloat16
        assert out.shape == (experts, 2 * cols // 128, rows, 64)
        assert out.is_contiguous()
    assert_bytes_equal(got, expected(case, best_oracle()))


def test_flashinfer_strategy_registered_where_installed():
    assert ("flashinfer" in BF16_STRATEGIES) == FLASHINFER_AVAILABLE
    assert "flashinfer" not in IN_PLACE


def test_anchor_and_own_strategies_registered():
    anchors = {"legacy", "preallocated", "inplace", "batched"}
    assert anchors <= set(BF16_STRATEGIES)
    assert {"inplace", "batched", "sglang"} <= set(IN_PLACE)
    assert {"legacy", "preallocated", "trtllm"} <= set(OUT_OF_PLACE)
    engines = {"sglang", "trtllm", "flashinfer", "vllm", "sglang-installed"}
    own = set(BF16_STRATEGIES) - anchors - engines
    assert own & set(IN_PLACE) and own & set(OUT_OF_PLACE), (
        f"want our own in-place and out-of-place ones: {own}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_docstring_states_memory_contract(name):
    record = BF16_STRATEGIES[name]
    doc = " ".join((record.function.__doc__ or "").split())  # a line break may split a phrase
    assert "Peak transient" in doc, f"{name}'s docstring must say what makes its peak transient"
    # "In place" / "Out of place" must agree with the registry.
    assert ("In place" in doc) == record.inplace, f"{name}: 'In place' in docstring vs its record"
    assert ("Out of place" in doc) == (not record.inplace), f"{name}: 'Out of place' vs its record"


@pytest.mark.parametrize("case", REFIT_CASES)
@pytest.mark.parametrize("name", NAMES)
def test_refit_cycles(name, case):
    """RL refit: load new weights into the checkpoint-layout parameters, convert; three times."""
    w13_shape, w2_shape, gated = shapes(case)
    # as vLLM holds them: frozen parameters in checkpoint layout
    param13 = torch.nn.Parameter(torch.empty(w13_shape, dtype=torch.bfloat16), requires_grad=False)
    param2 = torch.nn.Parameter(torch.empty(w2_shape, dtype=torch.bfloat16), requires_grad=False)
    pointers = (param13.data_ptr(), param2.data_ptr())
    for seed in (1, 2, 3):
        new13, new2 = weights(case, seed)
        param13.copy_(new13)
        param2.copy_(new2)
        got = convert_pair(param13, param2, strategy=name, gated=gated)
        assert_bytes_equal(got, expected(case, best_oracle(), seed))
        if BF16_STRATEGIES[name].inplace:  # the result is the parameters' own storage, every cycle
            assert (got[0].data_ptr(), got[1].data_ptr()) == pointers
        else:  # new tensors; the parameters still hold what was loaded
            assert got[0].data_ptr() not in pointers and got[1].data_ptr() not in pointers
            assert torch.equal(param13.view(torch.uint8), new13.view(torch.uint8))
            assert torch.equal(param2.view(torch.uint8), new2.view(torch.uint8))
        assert (param13.data_ptr(), param2.data_ptr()) == pointers


@pytest.mark.parametrize("name", IN_PLACE)
def test_inplace_result_aliases_parameter(name):
    """Writes through the returned 4-D view reach the 3-D parameter's bytes, and back."""
    case = "nemo-rl-3-128-512"
    w13, w2 = weights(case, 0)
    param13, param2 = w13.clone(), w2.clone()
    got = convert_pair(param13, param2, strategy=name, gated=True)
    gen = torch.Generator().manual_seed(7)
    for param, out in ((param13, got[0]), (param2, got[1])):
        assert out.untyped_storage().data_ptr() == param.untyped_storage().data_ptr()
        assert out.numel() == param.numel()
        through_view = torch.randint(0, 256, (out.nbytes,), dtype=torch.uint8, generator=gen)
        out.view(torch.uint8).view(-1).copy_(through_view)
        assert torch.equal(param.view(torch.uint8).view(-1), through_view)
        through_param = torch.randint(0, 256, (param.nbytes,), dtype=torch.uint8, generator=gen)
        param.view(torch.uint8).view(-1).copy_(through_param)
        assert torch.equal(out.view(torch.uint8).reshape(-1), through_param)


@pytest.mark.parametrize("name", OUT_OF_PLACE)
def test_out_of_place_leaves_input_unchanged(name):
    case = "nemo-rl-3-128-512"
    w13, w2 = weights(case, 0)
    in13, in2 = w13.clone(), w2.clone()
    got = convert_pair(in13, in2, strategy=name, gated=True)
    assert torch.equal(in13.view(torch.uint8), w13.view(torch.uint8))
    assert torch.equal(in2.view(torch.uint8), w2.view(torch.uint8))
    for out, param in zip(got, (in13, in2), strict=True):
        assert out.untyped_storage().data_ptr() != param.untyped_storage().data_ptr()


def test_convert_looks_strategy_up_at_call_time():
    calls = []

    def probe(w13, w2, gated):
        """Test probe. Out of place. Peak transient: 0."""
        calls.append(gated)
        return REGISTRY["strided_copy"].function(Layer(w13, w2), gated)

    try:
        assert register("_probe", format="bf16", inplace=True, origin="test probe")(probe) is probe
        # the record's function is probe, wrapped once to take a Layer
        assert REGISTRY["_probe"].inplace and REGISTRY["_probe"].function.__wrapped__ is probe
        # a new record replaces it
        register("_probe", format="bf16", inplace=False, origin="test probe")(probe)
        assert not REGISTRY["_probe"].inplace
        case = "one-expert"
        assert_bytes_equal(run("_probe", case), expected(case, "legacy"))
        assert calls == [True]
    finally:
        REGISTRY.pop("_probe", None)


@pytest.mark.parametrize("name", sorted(BF16_STRATEGIES))
def test_meta_call_first_does_not_poison_index_caches(name):
    """Index caches are per device: a meta call (as memory measurement makes) must not hand its
    meta indices to a later CPU call of the same shape (FlashInfer's own cache ignores device)."""
    w13_shape, w2_shape, gated = shapes("nemo-rl-3-128-512")
    convert_pair(
        torch.empty(w13_shape, dtype=torch.bfloat16, device="meta"),
        torch.empty(w2_shape, dtype=torch.bfloat16, device="meta"),
        strategy=name,
        gated=gated,
    )
    assert_bytes_equal(run(name, "nemo-rl-3-128-512"), expected("nemo-rl-3-128-512", best_oracle()))


@pytest.mark.parametrize("name", NAMES)
def test_weights_off_an_8_byte_boundary_convert_byte_exact(name):
    # Views into one shared bf16 buffer, each starting one element (2 bytes) past a word boundary.
    case = "nemo-rl-3-128-512"
    w13, w2 = weights(case, 0)
    buffer = torch.empty(1 + w13.numel() + w2.numel(), dtype=torch.bfloat16)
    shifted13 = buffer[1 : 1 + w13.numel()].view(w13.shape)
    shifted2 = buffer[1 + w13.numel() :].view(w2.shape)
    shifted13.copy_(w13)
    shifted2.copy_(w2)
    assert shifted13.storage_offset() * 2 % 8 == 2
    got = convert_pair(shifted13, shifted2, strategy=name, gated=shapes(case)[2])
    assert_bytes_equal(got, expected(case, best_oracle()))
