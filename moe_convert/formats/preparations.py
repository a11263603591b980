"""vLLM's quantized preparations as installed: ``<format>-vllm``, on ``engines``' mechanism.

One ``Engine`` record per (vLLM function, format), each read from vLLM's code like the BF16
``vllm`` (``engines.register_engine``): registered where vLLM is installed and its function has
the signature and branch the adapter calls, into ``REGISTRY``; otherwise
``engines.UNCALLABLE`` says what is missing. Each adapter calls the function as vLLM's caller
does (named on it), never a transcription; its result must be byte-identical to the format's
``-legacy`` transcription (``engines.check_engine``).

- ``prepare_fp8_moe_layer_for_fi`` (``quantization/utils/flashinfer_utils.py``, called by
  ``fused_moe/oracle/fp8.py::convert_to_fp8_moe_kernel_format`` with ``is_trtllm=True``): FP8
  per-tensor (``fp8-vllm``), DeepSeek block-FP8 (``fp8block-vllm``) and MXFP8 (``mxfp8-vllm``),
  told apart by the layer it is given, as in vLLM.
- ``prepare_static_weights_for_trtllm_fp4_moe`` (``quantization/utils/flashinfer_fp4_moe.py``)
  after ``reorder_w1w3_to_w3w1``, as ``prepare_nvfp4_moe_layer_for_fi_or_cutlass`` calls them
  (``nvfp4-vllm``).
- ``prepare_static_weights_for_trtllm_mxint4_moe`` (``quantization/utils/flashinfer_mxint4_moe.py``,
  called by ``fused_moe/oracle/int_wna16.py``; ``mxint4-vllm``).
- ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`` (``fused_moe/oracle/mxfp4.py``), its
  TRTLLM-gen branch, as ``quantization/mxfp4.py::GptOssMxfp4MoEMethod`` calls it on SM100
  (``mxfp4-vllm``).

MXFP8's, NVFP4's, MXFP4's and MXINT4's paths call FlashInfer's CUDA scale interleave (MXINT4's
sign step also asserts CUDA tensors): off CUDA, ``standins.cpu_steps`` puts upstream torch
definitions in their place for the call, allocating on ``meta`` what the CUDA steps allocate.
Their figures are not stated (``None``): vLLM builds FlashInfer's row indices per call, which the
transcriptions cache; ``measure`` gives them. MXFP4's caller keeps them (``_mxfp4``): its
figures are ``mxfp4-legacy``'s, which transcribes its code.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from .engines import (
    Engine,
    Form,
    FunctionCode,
    call_engine,
    check_form,
    figures_of,
    register_engine,
    registered_form,
)
from .engines import same_storage as _same_storage
from .layer import Layer
from .standins import cpu_steps

__all__ = ["PREPARATIONS", "register_preparations"]

_FP8_MODULE = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"
_FP8_PARAMETERS = (
    "layer",
    "w13",
    "w2",
    "w13_scale",
    "w13_input_scale",
    "w2_scale",
    "w2_input_scale",
    "is_trtllm",
)
_NVFP4_PARAMETERS = (
    "gemm1_weights",
    "gemm2_weights",
    "gemm1_scales_linear_fp4_bytes",
    "gemm2_scales_linear_fp4_bytes",
    "hidden_size",
    "intermediate_size",
    "num_experts",
    "is_gated_activation",
)


def _fp8_form(
    fmt: str, branch: str, releases: str, arguments: int = 0, gated_only="", copies_back=False
) -> Form:
    """``prepare_fp8_moe_layer_for_fi`` with the branch (a call in its body) for ``fmt``, called
    with ``arguments`` arguments where given, the branch's body calling ``copy_`` exactly when
    ``copies_back`` (its result copied into the weights it is given: in place); ``releases``:
    those read that have it (docs/engines.md: every sdist from 0.16.0 read)."""

    def matches(code: FunctionCode) -> bool:
        called = code.calls.get(branch)
        called_so = called is not None and arguments in (0, called)
        helper = code.helpers.get(branch)
        copies = helper is not None and "copy_" in helper.calls
        return code.parameters == _FP8_PARAMETERS and called_so and copies == copies_back

    name = f"prepare_fp8_moe_layer_for_fi, {branch}" + (" copied back" if copies_back else "")
    contract = _COPIED_BACK if copies_back else _CONTRACT
    return Form(
        name, releases, f"{fmt}-legacy", copies_back, matches, gated_only=gated_only,
        contract=contract,
    )  # fmt: skip


_ROTATE = "rotate_weights_for_fi_trtllm_fp8_per_tensor_moe"
#: Every quantized adapter's memory contract (its docstring ends with it as registered).
_CONTRACT = (
    "Out of place: new tensors, as the format's ``-legacy`` (which says what the input is left "
    "as). Peak transient: measured, not stated (vLLM builds FlashInfer's row indices per call, "
    "which the transcriptions cache)."
)
#: vLLM 0.34.0's FP8 per-tensor rotation: ``gemm{1,2}_weights.copy_(torch.stack(...))``.
_COPIED_BACK = (
    "In place: the stacked result copied back into the weights vLLM's rotation is given, w2's "
    "input and, not gated, w13's (gated, w13 is the w1/w3 swap's new tensor): one more full "
    "copy than the 0.17.0 to 0.33.0 form, whose ``.data =`` rebinds. Peak transient: measured, "
    "not stated."
)


def _vllm_engine(fmt: str, module: str, function: str, *forms: Form) -> Engine:
    return Engine(
        strategy=f"{fmt}-vllm",
        distribution="vllm",
        module=module,
        function=function,
        transcription=f"{fmt}-legacy",
        import_first="vllm.model_executor.layers.fused_moe",  # as for the BF16 ``vllm``
        format=fmt,
        forms=forms,
    )


_MXINT4_PARAMETERS = ("gemm1_weights", "gemm1_scales", "gemm2_weights", "gemm2_scales")
#: What ``_mxfp4`` passes, by keyword; then vLLM 0.25.0 added ``w13_input_scale`` and
#: ``w2_input_scale`` (gpt-oss's caller passes neither), last ``_cache_permute_indices``.
_MXFP4_ARGUMENTS = (
    "mxfp4_backend",
    "layer",
    "w13_weight",
    "w2_weight",
    "w13_weight_scale",
    "w2_weight_scale",
    "w13_bias",
    "w2_bias",
)
_MXFP4_PARAMETERS = (
    (*_MXFP4_ARGUMENTS, "_cache_permute_indices"),  # 0.20.0 to 0.24.0
    (*_MXFP4_ARGUMENTS, "w13_input_scale", "w2_input_scale", "_cache_permute_indices"),
)
#: Every quantized engine function with an adapter, installed here or not.
PREPARATIONS = (
    _vllm_engine(
        "fp8",
        _FP8_MODULE,
        "prepare_fp8_moe_layer_for_fi",
        _fp8_form(
            "fp8",
            _ROTATE,
            "0.16.0",
            arguments=2,
            gated_only=f"its {_ROTATE} has no is_gated_activation: it reorders rows as gated",
        ),
        _fp8_form("fp8", _ROTATE, "0.17.0 to 0.33.0", arguments=3),
        _fp8_form("fp8", _ROTATE, "0.34.0", arguments=3, copies_back=True),
    ),
    _vllm_engine(
        "fp8block",
        _FP8_MODULE,
        "prepare_fp8_moe_layer_for_fi",
        _fp8_form("fp8block", "_shuffle_deepseek_fp8_moe_weights", "0.20.0 to 0.34.0"),
    ),
    _vllm_engine(
        "mxfp8",
        _FP8_MODULE,
        "prepare_fp8_moe_layer_for_fi",
        _fp8_form("mxfp8", "_shuffle_mxfp8_moe_weights", "0.19.0 to 0.34.0"),
    ),
    _vllm_engine(
        "nvfp4",
        "vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe",
        "prepare_static_weights_for_trtllm_fp4_moe",
        Form(
            "prepare_static_weights_for_trtllm_fp4_moe after reorder_w1w3_to_w3w1",
            "0.17.0 to 0.34.0",
            "nvfp4-legacy",
            False,
            lambda code: code.parameters == _NVFP4_PARAMETERS,
            contract=_CONTRACT,
        ),
    ),
    _vllm_engine(
        "mxint4",
        "vllm.model_executor.layers.quantization.utils.flashinfer_mxint4_moe",
        "prepare_static_weights_for_trtllm_mxint4_moe",
        Form(
            "prepare_static_weights_for_trtllm_mxint4_moe",
            "0.16.0 to 0.34.0",
            "mxint4-legacy",
            False,
            lambda code: code.parameters == _MXINT4_PARAMETERS,
            contract=_CONTRACT,
        ),
    ),
    _vllm_engine(
        "mxfp4",
        "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
        "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format",
        Form(
            "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format, TRTLLM-gen branch",
            "0.20.0 to 0.34.0",
            "mxfp4-legacy",
            False,
            # The branch's per-expert loop: the only caller of FlashInfer's row-index cache.
            lambda code: (
                code.parameters in _MXFP4_PARAMETERS
                and "get_w2_permute_indices_with_cache" in code.calls
            ),
            figures=figures_of("mxfp4-legacy"),
            contract=(
                "Out of place: new tensors, the input left as it is, as ``mxfp4-legacy``. Peak "
                "transient: ``mxfp4-legacy``'s, whose code it is (FlashInfer's row indices "
                "cached as vLLM's caller caches them)."
            ),
        ),
    ),
)

#: vLLM's ``weight_block_size`` per FP8 format: what tells its branches apart.
_BLOCK_SIZE = {"fp8": None, "fp8block": [128, 128], "mxfp8": [1, 32]}


def _call(engine: Engine, device: torch.device, *args, **kwargs):
    """``call_engine``, FlashInfer's and vLLM's CUDA-only steps stood in for off CUDA
    (``standins.cpu_steps``; the engine imported first, as its modules need)."""
    engine.resolve()
    with cpu_steps(device):
        return call_engine(engine, *args, **kwargs)


def _form(engine: Engine, gated: bool) -> Form:
    """The form ``engine`` is registered with; ``NotImplementedError`` for a non-gated layer
    where it converts gated ones only."""
    form = registered_form(engine)
    assert form is not None, f"{engine.strategy} is called only when registered"
    if form.gated_only and not gated:
        raise NotImplementedError(
            f"{engine.strategy}: vllm {engine.version} converts gated layers only ({form.name}, "
            f"{form.releases}): {form.gated_only}"
        )
    return form


def _layer_stand_in(layer: Layer, gated: bool) -> SimpleNamespace:
    """vLLM's layer as its preparations read it: ``moe_config.is_act_and_mul``,
    ``intermediate_size_per_partition`` and ``hidden_dim`` (the weights' own, already padded:
    w13's rows, w2's rows, whatever a byte packs), ``activation.is_gated``."""
    rows13 = layer.w13.shape[1]
    return SimpleNamespace(
        moe_config=SimpleNamespace(
            is_act_and_mul=gated,
            intermediate_size_per_partition=rows13 // 2 if gated else rows13,
            hidden_dim=layer.w2.shape[1],
        ),
        activation=SimpleNamespace(is_gated=gated),
    )


def _fp8_family(engine: Engine, layer: Layer, gated: bool) -> Layer:
    """``prepare_fp8_moe_layer_for_fi(layer=..., w13=..., ..., is_trtllm=True)`` as
    ``convert_to_fp8_moe_kernel_format`` calls it for FlashInfer TRTLLM-gen.

    vLLM's layer is a stand-in with what the function reads: ``moe_config.is_act_and_mul``,
    ``activation.is_gated``, ``weight_block_size`` (``None`` per-tensor, ``[128, 128]``
    block-FP8, ``[1, 32]`` MXFP8); it writes back the (padded) sizes there. Per-tensor FP8 has
    per-expert float32 scales and input scales in vLLM, which that path only passes through:
    ones here. The weights go in as new tensor objects over the inputs' storage, since vLLM
    rebinds their ``.data`` (per-tensor: ``gemm2_weights.data = ...``) where the input's own
    must stay as they are: out of place, as the ``-legacy`` transcriptions (block-FP8 clamps
    the scales it returns in place, as its transcription does).
    """
    fmt, form = engine.format, _form(engine, gated)
    stand_in = _layer_stand_in(layer, gated)
    stand_in.weight_block_size = _BLOCK_SIZE[fmt]
    ones = torch.ones(layer.w13.shape[0], dtype=torch.float32, device=layer.w13.device)
    scales = (ones, ones) if fmt == "fp8" else (layer.w13_scale, layer.w2_scale)
    # vLLM 0.16.0 to 0.18.1 return (w13, w2, w13_scale): per-tensor only, scales passed through.
    w13, w2, *converted_scales = _call(
        engine,
        layer.w13.device,
        layer=stand_in,
        w13=layer.w13.detach(),
        w2=layer.w2.detach(),
        w13_scale=scales[0],
        w13_input_scale=ones,
        w2_scale=scales[1],
        w2_input_scale=ones,
        is_trtllm=True,
    )
    in_input = _same_storage(w13, layer.w13) or _same_storage(w2, layer.w2)
    if (w13.shape, w2.shape) == (layer.w13.shape, layer.w2.shape):  # padded: new in any form
        check_form(engine, form, in_input)  # 0.34.0's per-tensor form: w2's, at least
    if fmt == "fp8":
        return Layer(w13, w2)
    return Layer(w13, w2, *converted_scales)


def _nvfp4(engine: Engine, layer: Layer, gated: bool) -> Layer:
    """``reorder_w1w3_to_w3w1(w13, w13_scale)`` (gated; in place), then
    ``prepare_static_weights_for_trtllm_fp4_moe``, as ``prepare_nvfp4_moe_layer_for_fi_or_cutlass``
    calls them for FlashInfer TRTLLM-gen (the hidden and intermediate padding before it is not
    called: the inputs are the padded shapes). Leaves a gated input reordered, as vLLM does and
    as ``nvfp4-legacy``.
    """
    form = _form(engine, gated)
    w13, w2, w13_scale, w2_scale = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        module, _ = engine.resolve()
        w13, w13_scale = module.reorder_w1w3_to_w3w1(w13, w13_scale)
    out = _call(
        engine,
        w13.device,
        w13,
        w2,
        w13_scale,
        w2_scale,
        hidden_size=w2.size(-2),
        intermediate_size=w13.size(-2) // 2 if gated else w13.size(-2),
        num_experts=w13.size(0),
        is_gated_activation=gated,
    )
    check_form(engine, form, _same_storage(out[0], layer.w13))
    return Layer(out[0], out[2], out[1], out[3])


def _mxint4(engine: Engine, layer: Layer, gated: bool) -> Layer:
    """``prepare_static_weights_for_trtllm_mxint4_moe(w13, w13_scale, w2, w2_scale)``, as
    ``fused_moe/oracle/int_wna16.py`` calls it; its dict's four tensors. Like ``mxint4-legacy``
    it leaves the input signed and ``[w3; w1]`` (vLLM's in-place steps). Gated only, as vLLM's.
    """
    form = _form(engine, gated)
    out = _call(engine, layer.w13.device, layer.w13, layer.w13_scale, layer.w2, layer.w2_scale)
    check_form(engine, form, _same_storage(out["gemm1_weights"], layer.w13))
    return Layer(
        out["gemm1_weights"], out["gemm2_weights"], out["gemm1_scales"], out["gemm2_scales"]
    )


#: FlashInfer's row-index cache of ``_mxfp4``, per device: its key is a shape, not a device.
_PERMUTE_CACHES: dict[torch.device, dict] = {}


def _mxfp4(engine: Engine, layer: Layer, gated: bool) -> Layer:
    """``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format(mxfp4_backend=..., layer=...,
    w13_weight=..., ..., w2_bias=..., _cache_permute_indices=...)`` as
    ``quantization/mxfp4.py::GptOssMxfp4MoEMethod.process_weights_after_loading`` calls it on
    SM100: ``Mxfp4MoeBackend.FLASHINFER_TRTLLM_MXFP4_BF16``, the first of vLLM's gpt-oss
    priority list (``_get_priority_backends_for_gpt_oss``; its MXFP8-activation twin takes the
    same branch, ``TRTLLM_BACKENDS``). Its six tensors; gated only, as the format.

    The TRTLLM-gen branch reads nothing of vLLM's layer (0.20.0 to 0.34.0): the stand-in is
    the FP8 adapters' (``_layer_stand_in``). vLLM's quant method, one per layer, keeps its
    ``_cache_permute_indices`` dict for the layer's life and never clears it: here one dict per
    device (FlashInfer keys it by shape), kept across calls, so that a measured call finds the
    indices, as a reload of the layer does and as ``mxfp4-legacy`` reads them.
    """
    form = _form(engine, gated)
    module, _ = engine.resolve()
    out = _call(
        engine,
        layer.w13.device,
        mxfp4_backend=module.Mxfp4MoeBackend.FLASHINFER_TRTLLM_MXFP4_BF16,
        layer=_layer_stand_in(layer, gated),
        w13_weight=layer.w13,
        w2_weight=layer.w2,
        w13_weight_scale=layer.w13_scale,
        w2_weight_scale=layer.w2_scale,
        w13_bias=layer.w13_bias,
        w2_bias=layer.w2_bias,
        _cache_permute_indices=_PERMUTE_CACHES.setdefault(layer.w13.device, {}),
    )
    check_form(engine, form, _same_storage(out[0], layer.w13))
    return Layer(*out)


# The others: prepare_fp8_moe_layer_for_fi (``_fp8_family``).
_ADAPTERS = {"nvfp4": _nvfp4, "mxint4": _mxint4, "mxfp4": _mxfp4}


def register_preparations() -> None:
    """Register every quantized adapter where it can run (``engines.register_engine``)."""
    for engine in PREPARATIONS:
        adapter = _ADAPTERS.get(engine.format, _fp8_family)
        register_engine(engine, functools.partial(adapter, engine), needs="vllm, flashinfer-python")


register_preparations()
