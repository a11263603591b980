"""FlashInfer's own weight-preparation helpers (``flashinfer.fused_moe.prepare``, 0.7.4) as
strategies of their formats, ``<format>-flashinfer``: called as installed, never a fallback.

Each helper takes canonical BF16 weights and quantizes them itself (it cannot be handed a
checkpoint's quantized layer: it checks for bf16 and quantizes what it is given), so each
strategy takes a BF16 layer (``Strategy.takes``): w13 ``[E, M13, H]`` in the checkpoint's
``[w1; w3]`` order, w2 ``[E, H, I]``, of the format's geometry. A gated w13 is swapped to
FlashInfer's ``[up, gate]`` = ``[w3; w1]`` first (a full copy, part of the figures, as BF16's
``flashinfer``); the helper quantizes, shuffles per expert into lists and stacks them; the
strategy returns the format's converted layer (``Layer``), the helper's other outputs (the
kernel's scale scalars, activation parameters) dropped. Byte identity: the record's ``stored``
is what the helper's own quantizer makes of the BF16 layer, stored as the checkpoint stores it,
and the format's ``-legacy`` of that is the strategy's output
(``formats.table.reference_conversion``).

Registered: FP8 per-tensor (``prepare_trtllm_fp8_per_tensor_weights``: torch throughout, runs
on CPU), MXINT4 (``prepare_trtllm_mxint4_weights``: its scales through ``block_scale_interleave``,
a CUDA op), NVFP4 (``prepare_trtllm_fp4_weights``: ``fp4_quantize`` and the interleave, CUDA
ops) and MXFP8 (``prepare_trtllm_fp8_block_weights`` with the MXFP8 pair: ``mxfp8_quantize`` and
the interleave). The CUDA ones are registered where FlashInfer and CUDA are, documented as
unavailable elsewhere. Not registered (their layout is not ``-legacy``'s; docs/formats.md):
DeepSeek block-FP8 (the same helper's other pair leaves the weights MajorK, unshuffled, and its
quantizer clamps at 1e-12) and MXFP4 (``prepare_trtllm_fp4_weights``' MXFP4 pairs quantize
without gpt-oss's row-interleaved w13 and biases).

FP8's runs on ``meta`` at full size (its host reads answered as for finite weights:
``_FiniteOnMeta``), so the suite counts its figures as every other strategy's; the others call
CUDA ops and cannot (``Strategy.not_on_meta``): their figures are their records' formulas, from
the code, MXINT4's checked on CPU with its interleave as an output-only stand-in
(tests/test_flashinfer_prepare.py), NVFP4's and MXFP8's unchecked until gpu-check runs. Letters:
the format's shape's (``moe_convert.formulas``): FP8's T13 is the fp8 w13, so the BF16 input is
``2 T13``; MXINT4's T13 the packed int4 one, so ``4 T13``, its F13 the bf16 scales.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..formulas import Formula
from .layer import Layer
from .layout import swap_w13_to_w31
from .mxint4 import RELAID2, RELAID13
from .registry import register

__all__ = ["AVAILABLE", "CUDA_AVAILABLE"]

#: whether ``flashinfer-python`` is installed (FP8's helper then registered).
AVAILABLE = importlib.util.find_spec("flashinfer") is not None
#: whether the helpers that call FlashInfer's CUDA ops can run here.
CUDA_AVAILABLE = AVAILABLE and torch.cuda.is_available()

_NEEDS = "flashinfer-python"
_INTERLEAVE = "its scales go through block_scale_interleave, a CUDA op"
_NEEDS_CUDA = f"{_NEEDS}, on a CUDA GPU ({_INTERLEAVE})"

# FlashInfer keys its permute-index caches by shape, not device, and keeps the indices on the
# device of the first call: one cache per device, as BF16's ``flashinfer`` keeps, so that meta
# indices never reach a CPU or CUDA call (nor CPU ones a CUDA call, copied in every time). MXINT4's
# and NVFP4's helpers take one; FP8's uses its module's own, swapped for the call (``_fp8_cache``).
_PERMUTE_CACHES: dict[torch.device, dict] = {}
_FP8_CACHES: dict[torch.device, dict] = {}


@contextlib.contextmanager
def _fp8_cache(prepare, device: torch.device) -> Iterator[None]:
    """``prepare._TRTLLM_FP8_PER_TENSOR_PERMUTE_CACHE`` (read by name at each call) set to
    ``device``'s own cache for the duration of a call, then put back."""
    name = "_TRTLLM_FP8_PER_TENSOR_PERMUTE_CACHE"
    before = getattr(prepare, name)
    setattr(prepare, name, _FP8_CACHES.setdefault(device, {}))
    try:
        yield
    finally:
        setattr(prepare, name, before)


class _FiniteOnMeta(TorchDispatchMode):
    """On ``meta``, a host read (``bool(t)``, ``t.item()``) answers as for a finite checkpoint and
    a positive calibration scale: ``True``, ``1.0``. FP8's helper reads back whether every
    expert's amax is finite and whether each scale is positive, which a meta tensor cannot
    answer; with this the helper as installed runs on meta at full size, every allocation and
    copy counted as on a device (a host read allocates nothing there). Other devices: untouched."""

    _READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self._READS and args[0].device.type == "meta":
            return True if args[0].dtype == torch.bool else 1.0
        return func(*args, **(kwargs or {}))


def _layer(prepared: dict[str, torch.Tensor]) -> Layer:
    """The format's layer of a helper's outputs: its weights and, where it returns them, their
    scales (the kernel's scale scalars and activation parameters are not part of the layer)."""
    return Layer(
        prepared["gemm1_weights"],
        prepared["gemm2_weights"],
        prepared.get("gemm1_weights_scale"),
        prepared.get("gemm2_weights_scale"),
    )


def _activation(gated: bool):
    from flashinfer.fused_moe.api import ReLU2, SwiGLU

    return SwiGLU() if gated else ReLU2()


def _gemm1(w13: torch.Tensor, gated: bool) -> torch.Tensor:
    """The helpers' gemm1: ``[up, gate]`` = ``[w3; w1]``, a full copy when gated."""
    return swap_w13_to_w31(w13) if gated else w13


def _stored_layer(quantize, w13: torch.Tensor, w2: torch.Tensor) -> Layer:
    """The layer of ``quantize(weight) -> (weights, scales)`` of w13 and of w2, each as the
    checkpoint stores it."""
    (q13, s13), (q2, s2) = quantize(w13), quantize(w2)
    return Layer(q13, q2, s13, s2)


def _fp8_stored(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """FP8's ``_quantize_fp8_per_expert`` of each weight: its fp8 weights (one scale per whole
    expert, so the same bytes in either row order)."""
    from flashinfer.fused_moe.prepare import _quantize_fp8_per_expert

    return Layer(_quantize_fp8_per_expert(w13)[0], _quantize_fp8_per_expert(w2)[0])


@register(
    "fp8-flashinfer",
    format="fp8",
    inplace=False,
    origin="FlashInfer's `prepare_trtllm_fp8_per_tensor_weights`",
    needs=_NEEDS,
    available=AVAILABLE,
    takes="bf16",
    stored=_fp8_stored,
    peak=Formula("14 T13 + 8 E", "T13 + 12 T2 + 12 E"),
    traffic=Formula(
        "47 T13 + 43 T2 + E (X13 + X2) + 216 E + 72", "43 (T13 + T2) + E (X13 + X2) + 216 E + 68"
    ),
    launches=Formula("2 E + 53", "2 E + 52"),
)
def fp8_flashinfer(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """``flashinfer.fused_moe.prepare.prepare_trtllm_fp8_per_tensor_weights``, FlashInfer's own
    helper, with calibration scales 1.0 (the kernel's scale scalars it also returns are not part
    of this library's FP8 layer: dropped).

    Takes a BF16 layer; a gated w13 is swapped to ``[w3; w1]`` first (a full copy). The helper
    quantizes each weight whole (``_quantize_fp8_per_expert``: float32 copy, abs, scale, clamp,
    fp8), then per expert gathers its rows into a list, and stacks.

    Out of place: new fp8 tensors; the input is unchanged. Peak transient: gated, the swap copy
    (``2 T13``) and the quantizer's three float32 copies of w13 (``12 T13``: the input's, the
    scaled, the clamped) with its per-expert amax and scales (``8 E``); not gated, w2's three
    (``12 T2``) with w13's fp8 weights and scales beside them. Traffic and launches: the swap,
    twelve passes of each quantizer, per expert a row gather per weight, two stacks, and the
    scalars (measured on CPU to the byte: the ``E`` and constant terms). On ``meta`` its host
    reads answer as for finite weights (``_FiniteOnMeta``): the suite's full-size figures.
    """
    from flashinfer.fused_moe import prepare

    experts, _, hidden = w13.shape
    on_meta = _FiniteOnMeta() if w13.device.type == "meta" else contextlib.nullcontext()
    with _fp8_cache(prepare, w13.device), on_meta:
        prepared = prepare.prepare_trtllm_fp8_per_tensor_weights(
            _gemm1(w13, gated),
            w2,
            hidden_states_scale_global=1.0,
            intermediate_scale_global=1.0,
            num_local_experts=experts,
            hidden_size=hidden,
            intermediate_size=w2.shape[2],
            activation=_activation(gated),
        )
    return _layer(prepared)


def _mxint4_stored(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """MXINT4's ``_mxint4_quantize`` of each weight (per 32 elements of a row, so the same bytes
    in either row order), stored as Kimi-K2-Thinking's checkpoint: uint4b8 nibbles (signed ones
    XOR 8) in int32 words, bf16 scales ``[E, rows, K/32]``."""
    from flashinfer.fused_moe.prepare import _mxint4_quantize

    def stored(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed, scales = _mxint4_quantize(weight)
        return (packed ^ 0x88).view(torch.int32), scales.reshape(*weight.shape[:2], -1)

    return _stored_layer(stored, w13, w2)


@register(
    "mxint4-flashinfer",
    format="mxint4",
    inplace=False,
    origin="FlashInfer's `prepare_trtllm_mxint4_weights`",
    needs=_NEEDS_CUDA,
    available=CUDA_AVAILABLE,
    takes="bf16",
    stored=_mxint4_stored,
    not_on_meta="block_scale_interleave is a CUDA op",
    peak=Formula("21 T13"),
    traffic=Formula(
        f"87 T13 + 79 T2 + 63 (F13 + F2) + 2 E (X13 + X2) + 2 T13 {RELAID13} + 2 T2 {RELAID2}"
    ),
    launches=Formula(f"51 + E (6 + {RELAID13} + {RELAID2})"),
)
def mxint4_flashinfer(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """``flashinfer.fused_moe.prepare.prepare_trtllm_mxint4_weights``, FlashInfer's own helper.

    Takes a BF16 layer (gated only, as the format); w13 is swapped to ``[w3; w1]`` first (a full
    copy). The helper quantizes each weight whole (``_mxint4_quantize``: per 32-element block,
    float32 scales, signed nibbles packed), then per expert gathers the rows of its weights and
    scales, lays the weights out in blocks and interleaves the scales (CUDA), into lists, and
    stacks.

    Out of place: new tensors; the input is unchanged. Peak transient: the swap copy (``4 T13``),
    two float32 copies of w13's elements at once (``16 T13``: scaled then rounded, rounded then
    clamped) and its float32 block maxima and scales (``T13``). Traffic: the swap, the
    quantizer's passes, per expert the four row gathers (each reads its index), the block
    layouts (``RELAID``: a copy where a row is over one 128-byte block) and two interleaves,
    four stacks. Measured on CPU with the interleave as an output-only stand-in (its CUDA op
    allocates its output only).
    """
    from flashinfer.fused_moe.prepare import prepare_trtllm_mxint4_weights

    experts, _, hidden = w13.shape
    prepared = prepare_trtllm_mxint4_weights(
        _gemm1(w13, gated),
        w2,
        num_local_experts=experts,
        hidden_size=hidden,
        intermediate_size=w2.shape[2],
        activation=_activation(gated),
        permute_cache=_PERMUTE_CACHES.setdefault(w13.device, {}),
    )
    return _layer(prepared)


def _nvfp4_stored(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """NVFP4's ``fp4_quantize`` of each weight as the helper calls it (global scale 1.0, 16
    elements per e4m3 scale, linear scales; per row, so the same bytes in either row order):
    packed uint8 ``[E, rows, K/2]``, float8_e4m3fn scales ``[E, rows, K/16]``."""
    from flashinfer.fp4_quantization import fp4_quantize

    def stored(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        experts, rows, cols = weight.shape
        packed, scales = fp4_quantize(
            weight.reshape(experts * rows, cols),
            global_scale=torch.ones(1, dtype=torch.float32, device=weight.device),
            sf_vec_size=16,
            sf_use_ue8m0=False,
            is_sf_swizzled_layout=False,
        )
        return (
            packed.view(torch.uint8).reshape(experts, rows, cols // 2),
            scales.view(torch.float8_e4m3fn).reshape(experts, rows, cols // 16),
        )

    return _stored_layer(stored, w13, w2)


@register(
    "nvfp4-flashinfer",
    format="nvfp4",
    inplace=False,
    origin="FlashInfer's `prepare_trtllm_fp4_weights` (NVFP4 x NVFP4)",
    needs=f"{_NEEDS}, on a CUDA GPU (fp4_quantize is a CUDA op; {_INTERLEAVE})",
    available=CUDA_AVAILABLE,
    takes="bf16",
    stored=_nvfp4_stored,
    not_on_meta="fp4_quantize is a CUDA op",
    peak=Formula("7 T13 + 3 (T2 + F13 + F2) + 4 E + 8", "3 (T13 + T2 + F13 + F2) + 4 E + 8"),
    traffic=Formula(
        "17 T13 + 9 T2 + 7 (F13 + F2) + 2 E (X13 + X2) + 4 E",
        "9 (T13 + T2) + 7 (F13 + F2) + 2 E (X13 + X2) + 4 E",
    ),
    launches=Formula("6 E + 10", "6 E + 9"),
)
def nvfp4_flashinfer(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """``flashinfer.fused_moe.prepare.prepare_trtllm_fp4_weights`` with the NVFP4 x NVFP4 pair,
    FlashInfer's own helper.

    Takes a BF16 layer; a gated w13 is swapped to ``[w3; w1]`` first (a full copy). The helper
    quantizes each weight whole (``fp4_quantize``, CUDA: its outputs only), then per expert
    gathers the rows of its weights and scales and interleaves the scales (CUDA), into lists,
    and stacks.

    Out of place: new tensors; the input is unchanged. Peak transient: the swap copy
    (``4 T13``), both quantized weights and scales, the lists and the stacked outputs, the
    global scales and ``ones`` (from the code; unchecked until gpu-check runs).
    """
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat
    from flashinfer.fused_moe.prepare import prepare_trtllm_fp4_weights

    experts, _, hidden = w13.shape
    prepared = prepare_trtllm_fp4_weights(
        _gemm1(w13, gated),
        w2,
        quant=QuantConfig(weight=QuantFormat.NVFP4, activation=QuantFormat.NVFP4),
        num_local_experts=experts,
        hidden_size=hidden,
        intermediate_size=w2.shape[2],
        activation=_activation(gated),
        permute_cache=_PERMUTE_CACHES.setdefault(w13.device, {}),
    )
    return _layer(prepared)


def _mxfp8_stored(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """MXFP8's ``mxfp8_quantize`` of each expert of each weight as the helper calls it (linear
    uint8 e8m0 scales per 32 elements of a row, so the same bytes in either row order): fp8
    ``[E, rows, K]``, uint8 scales ``[E, rows, K/32]``."""
    from flashinfer.quantization.fp8_quantization import mxfp8_quantize

    def stored(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        quantized = [mxfp8_quantize(expert, is_sf_swizzled_layout=False) for expert in weight]
        rows, cols = weight.shape[1:]
        return (
            torch.stack([q for q, _ in quantized]),
            torch.stack([sf.view(torch.uint8).reshape(rows, cols // 32) for _, sf in quantized]),
        )

    return _stored_layer(stored, w13, w2)


@register(
    "mxfp8-flashinfer",
    format="mxfp8",
    inplace=False,
    origin="FlashInfer's `prepare_trtllm_fp8_block_weights` (MXFP8 x MXFP8)",
    needs=f"{_NEEDS}, on a CUDA GPU (mxfp8_quantize is a CUDA op; {_INTERLEAVE})",
    available=CUDA_AVAILABLE,
    takes="bf16",
    stored=_mxfp8_stored,
    not_on_meta="mxfp8_quantize is a CUDA op",
    peak=Formula(
        "4 T13 + T2 + 2 F13 + F2",
        "max(2 T13 + T2 + 2 F13 + F2, T13 + 2 T2 + F13 + 2 F2)",
    ),
    traffic=Formula(
        "11 T13 + 7 T2 + 7 (F13 + F2) + 2 E (X13 + X2)",
        "7 (T13 + T2) + 7 (F13 + F2) + 2 E (X13 + X2)",
    ),
    launches=Formula("8 E + 5", "8 E + 4"),
)
def mxfp8_flashinfer(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
    """``flashinfer.fused_moe.prepare.prepare_trtllm_fp8_block_weights`` with the MXFP8 x MXFP8
    pair, FlashInfer's own helper.

    Takes a BF16 layer; a gated w13 is swapped to ``[w3; w1]`` first (a full copy). Per expert
    the helper quantizes (``mxfp8_quantize``, CUDA), gathers the weight's rows and the scales'
    rows and interleaves the scales (CUDA), into lists; then stacks.

    Out of place: new tensors; the input is unchanged. Peak transient: the swap copy
    (``2 T13``) and, while w13's lists are stacked, both of them with w2's lists (from the code;
    unchecked until gpu-check runs).
    """
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat
    from flashinfer.fused_moe.prepare import prepare_trtllm_fp8_block_weights

    experts, _, hidden = w13.shape
    prepared = prepare_trtllm_fp8_block_weights(
        _gemm1(w13, gated),
        w2,
        quant=QuantConfig(weight=QuantFormat.MXFP8, activation=QuantFormat.MXFP8),
        num_local_experts=experts,
        hidden_size=hidden,
        intermediate_size=w2.shape[2],
        activation=_activation(gated),
    )
    return _layer(prepared)
