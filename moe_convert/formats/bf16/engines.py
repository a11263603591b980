"""BF16's engine converters as installed, on ``formats.engines``' mechanism: ``vllm`` calls vLLM's
``convert_moe_weights_to_flashinfer_trtllm_block_layout``, ``sglang-installed`` SGLang's
``_apply_trtllm_bf16_block_layout``.

vLLM's function has had three forms (``VLLM_FORMS``), read from its code at registration
(``engines.register_engine``). Both engines import FlashInfer inside the converted function:
they need flashinfer-python too. The transcriptions of the same code, which need neither, are
``legacy``, ``preallocated`` and ``inplace`` (vLLM's three forms) and ``sglang`` in
``strategies``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ...formulas import Formula
from ..engines import (
    Engine,
    Form,
    call_engine,
    check_form,
    figures_of,
    register_engine,
    registered_form,
    same_storage,
)
from ..layout import block_layout_view, swap_w13_to_w31
from ..registry import register
from . import strategies  # noqa: F401 (the transcriptions' records, whose figures forms reuse)

__all__ = ["ENGINES", "SGLANG", "VLLM", "VLLM_FORMS", "register_vllm"]

_VLLM_PARAMETERS = ("cache_permute_indices", "w13_weight", "w2_weight")
#: vLLM's BF16 converter in its releases, oldest first (docs/engines.md: every release read).
#: The first form whose ``matches`` holds is the installed one.
VLLM_FORMS = (
    Form(
        "per-expert",
        "0.16.0 to 0.23.0",
        "legacy",
        inplace=False,
        # Its caller swaps w13 to [w3; w1] first (a full copy), as ``legacy`` does.
        matches=lambda code: code.parameters == _VLLM_PARAMETERS,
        figures=figures_of("legacy"),
        contract="Out of place: new tensors; the input is unchanged. Peak transient: "
        "``legacy``'s, the caller's swap copy, both lists and both stacked outputs.",
        gated_only="it has no is_gated_act_gemm: its w13 index is the gated one (vLLM's BF16 "
        "TRT-LLM kernels of those releases do not support non-gated MoE)",
    ),
    Form(
        "preallocated (#45589)",
        "0.24.0 to 0.30.0",
        "preallocated",
        inplace=False,
        matches=lambda code: (
            code.parameters == (*_VLLM_PARAMETERS, "is_gated_act_gemm")
            and "copy_" not in code.calls
        ),
        figures=figures_of("preallocated"),
        contract="Out of place: new tensors; the input is unchanged. Peak transient: "
        "``preallocated``'s, the outputs, and gated the two index temporaries; on CPU the "
        "allocator also sees ``index_select``'s hidden expert copy.",
    ),
    Form(
        "in place (#54699)",
        "0.31.0 to 0.34.0",
        "inplace",
        inplace=True,
        # It writes each relaid expert back over its own bytes.
        matches=lambda code: (
            code.parameters == (*_VLLM_PARAMETERS, "is_gated_act_gemm") and "copy_" in code.calls
        ),
        figures=(
            Formula("max(S13 + 2 X13, S2)", "max(S13, S2)"),
            Formula("4 (T13 + T2) + E (5 X13 + X2)", "4 (T13 + T2) + E (X13 + X2)"),
            Formula("6 E", "4 E"),
            Formula("S13 - X13", "S13"),
        ),
        contract="In place: returns vLLM's 4-D bf16 views of the inputs' storages "
        "(``data_ptr`` unchanged). Peak transient (vLLM 0.33.0): the one-expert scratch, and "
        "gated, per expert, the swap folded into a new index, ``(P + M/2) % M`` (two int64 "
        "temporaries), where the ``inplace`` transcription reads a cached folded index, so "
        "traffic and launches add ``4 E X13`` in ``2E``; on CPU the allocator also sees "
        "``index_select``'s hidden expert copy.",
    ),
)
VLLM = Engine(
    strategy="vllm",
    distribution="vllm",
    module="vllm.model_executor.layers.quantization.utils.flashinfer_utils",
    function="convert_moe_weights_to_flashinfer_trtllm_block_layout",
    transcription="inplace",
    # Importing flashinfer_utils first fails with a circular import of align_moe_weights_for_fi.
    import_first="vllm.model_executor.layers.fused_moe",
    forms=VLLM_FORMS,
)
SGLANG = Engine(
    strategy="sglang-installed",
    distribution="sglang",
    module="sglang.srt.layers.quantization.unquant",
    function="UnquantizedFusedMoEMethod._apply_trtllm_bf16_block_layout",
    transcription="sglang",
)
#: Every BF16 engine with an adapter, installed here or not (vLLM's quantized preparations:
#: ``quant.engines.PREPARATIONS``).
ENGINES = (VLLM, SGLANG)

# Both engines hand FlashInfer a dict cache keyed by shape but not device: one per device here, so
# that meta indices (memory measurement) never reach a CPU or CUDA call.
_PERMUTE_CACHES: dict[tuple[str, torch.device], dict] = {}


def _vllm(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``convert_moe_weights_to_flashinfer_trtllm_block_layout``, as installed, called as
    vLLM's caller (``fused_moe/oracle/unquantized.py::convert_to_unquantized_kernel_format``)
    calls it in the form read from its code (``VLLM_FORMS``).

    Takes w13 in checkpoint ``[w1; w3]`` order. The per-expert form (0.16.0 to 0.23.0) is called
    after vLLM's own ``swap_w13_to_w31`` (a full copy, as its caller does) and converts gated
    layers only (``NotImplementedError`` otherwise, before anything is read); the later forms
    take ``is_gated_act_gemm`` and fold the swap into their index. vLLM's caller passes a fresh
    permute cache per layer; here the cache is kept per device, so a measured call finds the
    indices cached, as for every strategy.

    What it returns and its figures are the registered form's (its contract ends this
    docstring as registered); a result that is not what the form says raises ``RuntimeError``.
    """
    form = registered_form(VLLM)
    assert form is not None, "vllm is called only when registered"
    if form.gated_only and not gated:
        raise NotImplementedError(
            f"vllm {VLLM.version} converts gated w13 only ({form.name} form): {form.gated_only}"
        )
    cache = _PERMUTE_CACHES.setdefault((VLLM.strategy, w13.device), {})
    if form.gated_only:
        module, _ = VLLM.resolve()
        got = call_engine(VLLM, cache, module.swap_w13_to_w31(w13), w2)
    else:
        got = call_engine(VLLM, cache, w13, w2, is_gated_act_gemm=gated)
    check_form(VLLM, form, same_storage(got[0], w13) and same_storage(got[1], w2))
    return got


def register_vllm() -> Form | None:
    """Register ``vllm`` (``register_engine``); called on import and by the tests."""
    return register_engine(VLLM, _vllm, needs="vllm, flashinfer-python")


register_vllm()


@register(
    SGLANG.strategy,
    format="bf16",
    inplace=True,
    origin="SGLang as installed",
    needs="sglang, flashinfer-python",
    available=SGLANG.installed,
    peak=Formula("max(T13, 3 max(S13, S2))", "3 max(S13, S2)"),
    traffic=Formula("12 T13 + 8 T2 + E (X13 + X2)", "8 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("8 E + 2", "8 E"),
)
def _sglang(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's ``UnquantizedFusedMoEMethod._apply_trtllm_bf16_block_layout``, as installed.

    Called for w13, then w2, as SGLang's ``_maybe_apply_flashinfer_trtllm_bf16_block_layout``
    calls it; that wrapper also clears the permute cache on every call, so SGLang recomputes the
    indices per layer: here the method's cache is kept per device instead, so a measured call
    finds them, as for every strategy. SGLang's loader stores w13 as ``[w3; w1]``: a gated w13
    is swapped in place first (one full copy, the load step SGLang's loader does for free). The
    method object is made without its ``__init__`` (which reads SGLang's server arguments): the
    conversion reads only its permute cache. The layer is a module holding the two parameters
    (sharing the inputs' storage), the expert count and ``moe_runner_config.is_gated``.

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: gated the swap copy, then the ``sglang`` transcription's; not gated that alone.
    Traffic and launches: the ``sglang`` transcription's, plus the swap gated (``4 T13`` in 2).
    """
    method_class, name = SGLANG.resolve()
    if gated:
        w13.copy_(swap_w13_to_w31(w13))
    method = object.__new__(method_class)
    method._cache_permute_indices = _PERMUTE_CACHES.setdefault((SGLANG.strategy, w13.device), {})
    layer = torch.nn.Module()
    layer.num_local_experts = w13.shape[0]
    layer.moe_runner_config = SimpleNamespace(is_gated=gated)
    for param_name, weight in (("w13_weight", w13), ("w2_weight", w2)):
        getattr(method, name)(layer, torch.nn.Parameter(weight, requires_grad=False), param_name)
    return block_layout_view(w13), block_layout_view(w2)
