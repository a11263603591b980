"""The layout is only right if the kernel agrees: on an SM100 GPU (B200/GB200), every strategy's
output is fed to FlashInfer's ``trtllm_bf16_moe`` and compared with a plain float32 torch MoE
computed on the checkpoint-layout weights. Also every strategy byte for byte on CUDA.

Skipped elsewhere (no CUDA, not SM100, FlashInfer or its kernels unavailable), saying why.
Legend: T tokens, E experts, H hidden, I intermediate, K top-k.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import requires_cuda, requires_flashinfer, requires_sm100

from moe_convert import Layer, convert, strategies
from moe_convert.formats.bf16.inputs import random_weights
from moe_convert.formats.bf16.reference import flashinfer_reference
from moe_convert.formats.layout import to_block_layout

TOKENS, EXPERTS, HIDDEN, INTER, TOP_K = 64, 8, 1024, 512, 2
# Small weights keep activations O(1): |w13 x| ~ 0.02 sqrt(H) ~ 0.6.
WEIGHT_SCALE = 0.02
# bf16 inputs, fp32 accumulation, a bf16 intermediate activation and bf16 output: relative L2
# error ~ 2^-8 against an fp32 reference; a wrong row order gives ~1.
REL_L2_TOLERANCE = 2e-2
ACTIVATIONS = {"swiglu": True, "relu2": False}  # name -> gated


@pytest.fixture(scope="module")
def moe_kernel():
    """FlashInfer's ``trtllm_bf16_moe`` and its enums, loaded once (JIT build or cache)."""
    from flashinfer.fused_moe import (
        ActivationType,
        RoutingMethodType,
        WeightLayout,
        trtllm_bf16_moe,
    )
    from flashinfer.fused_moe.core import get_trtllm_moe_sm100_module

    try:
        get_trtllm_moe_sm100_module()
    except (RuntimeError, OSError) as exc:  # MissingJITCacheError, a failed JIT build, no cubins
        pytest.skip(
            f"FlashInfer's TRTLLM MoE kernels cannot be loaded: {type(exc).__name__}: {exc}"
        )
    return trtllm_bf16_moe, ActivationType, RoutingMethodType, WeightLayout


def make_inputs(gated: bool, seed: int = 0):
    """Checkpoint-layout weights ``w13 [E, 2I or I, H]``, ``w2 [E, H, I]``, tokens ``x [T, H]``
    and routing logits ``[T, E]``, all bf16 on CUDA."""
    gen = torch.Generator().manual_seed(seed)
    rows = 2 * INTER if gated else INTER

    def normal(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * scale).to(torch.bfloat16).cuda()

    w13 = normal(EXPERTS, rows, HIDDEN, scale=WEIGHT_SCALE)
    w2 = normal(EXPERTS, HIDDEN, INTER, scale=WEIGHT_SCALE)
    x = normal(TOKENS, HIDDEN)
    # Distinct small integers per token: exact in bf16, so the top-k choice has no ties.
    ranks = torch.stack([torch.randperm(EXPERTS, generator=gen) for _ in range(TOKENS)])
    logits = (ranks - EXPERTS // 2).to(torch.bfloat16).cuda()
    return w13, w2, x, logits


def torch_moe(x, logits, w13, w2, *, gated: bool) -> torch.Tensor:
    """Plain float32 MoE ``[T, H]`` on checkpoint-layout weights (rows ``[w1; w3]``).

    Routing as FlashInfer's Renormalize: the top-k logits, then softmax over those k. Expert:
    SwiGLU ``silu(w1 x) * (w3 x)`` (ReLU2 ``relu(w13 x)^2`` when not gated), then ``w2``.
    """
    top_logits, top_experts = logits.float().topk(TOP_K, dim=-1)
    gate = torch.zeros(logits.shape, device=x.device).scatter(
        -1, top_experts, top_logits.softmax(-1)
    )
    h = torch.einsum("th,emh->tem", x.float(), w13.float())  # [T, E, 2I or I]
    if gated:
        w1x, w3x = h.chunk(2, dim=-1)
        act = F.silu(w1x) * w3x
    else:
        act = F.relu(h).square()
    y = torch.einsum("tei,ehi->teh", act, w2.float())  # [T, E, H]
    return torch.einsum("te,teh->th", gate, y)


def run_kernel(moe_kernel, x, logits, gemm1, gemm2, *, gated: bool) -> torch.Tensor:
    trtllm_bf16_moe, ActivationType, RoutingMethodType, WeightLayout = moe_kernel
    activation = ActivationType.Swiglu if gated else ActivationType.Relu2
    out = trtllm_bf16_moe(
        routing_logits=logits,
        routing_bias=None,
        hidden_states=x,
        gemm1_weights=gemm1,
        gemm2_weights=gemm2,
        num_experts=EXPERTS,
        top_k=TOP_K,
        n_group=None,
        topk_group=None,
        intermediate_size=INTER,
        local_expert_offset=0,
        local_num_experts=EXPERTS,
        routed_scaling_factor=None,
        routing_method_type=int(RoutingMethodType.Renormalize),
        use_shuffled_weight=True,
        weight_layout=int(WeightLayout.BlockMajorK),
        activation_type=int(activation),
    )
    torch.cuda.synchronize()
    # FlashInfer 0.7 returns the tensor; from 0.8 on, [output].
    return out[0] if isinstance(out, (list, tuple)) else out


def relative_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want).norm() / want.norm()).item()


@requires_sm100
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("name", sorted(strategies("bf16")))
def test_kernel_agrees_with_torch_moe(moe_kernel, name, activation):
    gated = ACTIVATIONS[activation]
    w13, w2, x, logits = make_inputs(gated)
    assert (
        logits.topk(TOP_K, dim=-1).indices.unique().numel() == EXPERTS
    )  # every expert gets tokens
    want = torch_moe(x, logits, w13, w2, gated=gated)
    gemm1, gemm2 = convert(Layer(w13.clone(), w2.clone()), strategy=name, gated=gated).values()
    got = run_kernel(moe_kernel, x, logits, gemm1, gemm2, gated=gated)
    assert got.shape == (TOKENS, HIDDEN) and torch.isfinite(got).all()
    error = relative_l2(got, want)
    assert error < REL_L2_TOLERANCE, f"{name}/{activation}: relative L2 error {error:.4f}"


@requires_sm100
def test_kernel_rejects_unshuffled_layout(moe_kernel):
    """Negative control: block layout without the row permutation must not pass the comparison."""
    w13, w2, x, logits = make_inputs(gated=True)
    want = torch_moe(x, logits, w13, w2, gated=True)
    gemm1 = to_block_layout(w13.view(torch.uint8)).view(torch.bfloat16)
    gemm2 = to_block_layout(w2.view(torch.uint8)).view(torch.bfloat16)
    got = run_kernel(moe_kernel, x, logits, gemm1, gemm2, gated=True)
    assert relative_l2(got, want) > 10 * REL_L2_TOLERANCE


@requires_cuda
@requires_flashinfer
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "not-gated"])
@pytest.mark.parametrize("name", sorted(strategies("bf16")))
def test_byte_exact_on_cuda(name, gated):
    experts, inter, hidden = 4, 384, 4096  # Qwen3-235B TP4 geometry, few experts
    w13, w2 = random_weights(
        (experts, 2 * inter if gated else inter, hidden),
        (experts, hidden, inter),
        seed=11,
        device="cuda",
    )
    want13, want2 = flashinfer_reference(w13, w2, gated=gated)
    got13, got2 = convert(Layer(w13.clone(), w2.clone()), strategy=name, gated=gated).values()
    assert got13.device.type == got2.device.type == "cuda"
    assert torch.equal(got13.view(torch.uint8), want13.view(torch.uint8))
    assert torch.equal(got2.view(torch.uint8), want2.view(torch.uint8))
