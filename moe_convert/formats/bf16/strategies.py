"""Every way of converting one MoE layer to FlashInfer's BlockMajorK layout, each registered.

Legend: E experts; w13 bf16 ``[E, M13, H]`` with ``M13 = 2I`` (gated) or ``I``; w2 bf16
``[E, H, I]``; a weight's bytes are ``uint8 [E, M, Kb]`` with ``Kb = 2 cols``; the output of a
weight is the bf16 view ``[E, Kb/128, M, 64]`` of ``uint8 [E, Kb/128, M, 128]``.

Each function's ``@register(...)`` above it states its facts (``formats.registry``): in place
or not, where it comes from, and its figures as formulas in the letters of
``moe_convert.formulas`` (T13, T2 whole weights, S13, S2 one expert, X13, X2 one int64 row
index). Its docstring says why the figures are what they are. "Peak transient" is the peak,
during the call, of bytes allocated by the call and still alive, counted at the dispatch level
(new tensor storages; views, ``out=`` and in-place ops add nothing), with the row indices
already cached. Outputs that are new tensors count: they are alive when the call returns.
"Traffic" is bytes read plus written and "launches" the data-moving ops of one call, by
``measuring.traffic``'s counting rule (a ``copy_`` of T bytes moves 2T); the out-of-place
floor is ``2 (T13 + T2)``.

Every function takes ``(w13, w2, gated)`` already checked by ``check_weights`` and returns
``(w13_out, w2_out)``; ``formats.registry.register`` wraps each once, so that its record
(``REGISTRY[NAME]``) and ``convert(layer, strategy=NAME)`` take and return a ``Layer``.
The inverse of every strategy, in place, is ``placement.restore``.
"""

from __future__ import annotations

import torch

from ...formulas import Formula
from ...units import K_MIN_LARGE_ALLOC
from ..layout import (
    BLOCK_K,
    block_layout_copies,
    block_layout_shape,
    block_layout_view,
    swap_w13_to_w31,
    to_block_layout,
    w2_row_index,
    w13_row_index,
)
from ..registry import register
from ..words import as_words

__all__ = [
    "legacy",
    "preallocated",
    "inplace",
    "batched",
    "strided_copy",
    "strided_inplace",
    "sglang",
    "trtllm",
]


@register(
    "legacy",
    format="bf16",
    inplace=False,
    origin="vLLM before PR #45589 (0.16.0 to 0.23.0)",
    peak=Formula("3 T13 + 2 T2", "2 T13 + 2 T2"),
    traffic=Formula("10 T13 + 8 T2 + E (X13 + X2)", "8 T13 + 8 T2 + E (X13 + X2)"),
    launches=Formula("6 E + 3", "6 E + 2"),
)
def legacy(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM before PR #45589, temporaries and their order kept: the baseline.

    The caller's full swapped copy of w13 (gated only), then per expert: ``clone`` -> uint8
    view -> index rows -> ``.contiguous()``, for w13 then w2; block layout ``.contiguous()`` of
    each; append to two lists; finally ``torch.stack`` of each list, bf16 view, ``.contiguous()``.

    Out of place: new outputs; the input is unchanged. Peak transient: the swap copy (gated
    only), both lists and both stacked outputs, all alive at once. Traffic and launches: the
    swap (gated), per expert two clones and a gather per weight, two stacks.
    """
    experts, rows13, _ = w13.shape
    rows2 = w2.shape[1]
    if gated:
        w13 = swap_w13_to_w31(w13)
    index13 = w13_row_index(rows13, gated, w13.device, fold_swap=False)
    index2 = w2_row_index(rows2, w2.device)
    w13_list, w2_list = [], []
    for e in range(experts):
        tmp13 = w13[e].clone().view(torch.uint8)[index13].contiguous()
        tmp2 = w2[e].clone().view(torch.uint8)[index2].contiguous()
        tmp13 = to_block_layout(tmp13)
        tmp2 = to_block_layout(tmp2)
        w13_list.append(tmp13.view(torch.bfloat16))
        w2_list.append(tmp2.view(torch.bfloat16))
    return (
        torch.stack(w13_list).view(torch.bfloat16).contiguous(),
        torch.stack(w2_list).view(torch.bfloat16).contiguous(),
    )


def _index_select_expert(out: torch.Tensor, expert_u8: torch.Tensor, index: torch.Tensor) -> None:
    """Write one expert ``uint8 [M, Kb]`` into ``out`` ``uint8 [nb, M, 128]`` with its row index.

    vLLM's ``_copy_permuted_expert_to_block_layout``: ``index_select`` along dim 1 of the
    ``[nb, M, 128]`` block view, ``out=``. On CPU that kernel first makes the (non-contiguous)
    view contiguous: a hidden expert-sized copy that dispatch-level tracking cannot see.
    """
    blocks = expert_u8.view(expert_u8.shape[0], out.shape[0], BLOCK_K).permute(1, 0, 2)
    torch.index_select(blocks, 1, index, out=out)


@register(
    "preallocated",
    format="bf16",
    inplace=False,
    origin="vLLM PR #45589 (0.24.0 to 0.30.0)",
    peak=Formula("T13 + T2 + 2 X13", "T13 + T2"),
    traffic=Formula("2 (T13 + T2) + E (5 X13 + X2)", "2 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("4 E", "2 E"),
    cpu_allocator_extra=Formula("S13 - X13", "S13"),
)
def preallocated(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM PR #45589: both outputs allocated once, each expert gathered straight into them.

    Per expert: ``index_select`` along dim 1 of the block view with ``out=`` the expert's slot;
    the w3/w1 swap folded into the w13 index, recomputed per expert as ``(G[S] + M/2) % M``.

    Out of place: new outputs; the input is unchanged. Peak transient: the outputs, and gated
    the two index temporaries. On CPU the allocator also sees one hidden expert copy inside
    ``index_select`` (the record's ``cpu_allocator_extra``). Traffic and launches: per expert
    two gathers, and gated the index ``add`` and ``remainder``.
    """
    experts, rows13, _ = w13.shape
    rows2 = w2.shape[1]
    out13 = torch.empty(block_layout_shape(w13), dtype=torch.uint8, device=w13.device)
    out2 = torch.empty(block_layout_shape(w2), dtype=torch.uint8, device=w2.device)
    for e in range(experts):
        index = w13_row_index(rows13, gated, w13.device, fold_swap=False)
        if gated:
            index = (index + rows13 // 2) % rows13
        _index_select_expert(out13[e], w13[e].view(torch.uint8), index)
        index = w2_row_index(rows2, w2.device)
        _index_select_expert(out2[e], w2[e].view(torch.uint8), index)
    return out13.view(torch.bfloat16), out2.view(torch.bfloat16)


@register(
    "inplace",
    format="bf16",
    inplace=True,
    origin="vLLM PR #54699 (0.31.0 to 0.34.0)",
    peak=Formula("max(S13, S2)"),
    traffic=Formula("4 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("4 E"),
    cpu_allocator_extra=Formula("S13"),
)
def inplace(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM PR #54699: one expert-sized scratch; each expert relaid into it and copied back.

    Per expert: ``index_select`` (dim 1 of the block view, as in #45589) into the scratch, then
    ``copy_`` back over the expert's own bytes.

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged); the
    inputs' 3-D views then hold block-layout bytes, and a refit loads new checkpoint-layout
    weights into them and converts again. Peak transient: the scratch. On CPU the allocator
    also sees the hidden expert copy inside ``index_select``. Traffic and launches: per expert a
    gather into the scratch and a copy back, per weight.
    """
    experts, rows13, _ = w13.shape
    rows2 = w2.shape[1]
    scratch = torch.empty(max(w13[0].nbytes, w2[0].nbytes), dtype=torch.uint8, device=w13.device)
    for weight, index in (
        (w13, w13_row_index(rows13, gated, w13.device)),
        (w2, w2_row_index(rows2, w2.device)),
    ):
        expert_scratch = scratch[: weight[0].nbytes].view(block_layout_shape(weight)[1:])
        for e in range(experts):
            expert_u8 = weight[e].view(torch.uint8)
            _index_select_expert(expert_scratch, expert_u8, index)
            expert_u8.view(-1).copy_(expert_scratch.view(-1))
    return block_layout_view(w13), block_layout_view(w2)


@register(
    "batched",
    format="bf16",
    inplace=True,
    origin="NeMo-RL PR #3296",
    peak=Formula("T13"),
    traffic=Formula("4 (T13 + T2) + X13 + X2"),
    launches=Formula("4"),
)
def batched(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo-RL PR #3296: one gather per weight over all experts, then one copy back.

    Per weight: ``index_select`` along the row dim of the ``[E, nb, M, 128]`` block view of all
    experts into a weight-sized scratch, then ``copy_`` into the 4-D alias of the parameter.
    (NeMo-RL keeps the scratch between refits; here it is made per call so it shows.)

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: the w13 scratch (it is freed before the w2 one is made). Traffic and launches: a
    gather and a copy back per weight.
    """
    rows13, rows2 = w13.shape[1], w2.shape[1]
    for weight, index in (
        (w13, w13_row_index(rows13, gated, w13.device)),
        (w2, w2_row_index(rows2, w2.device)),
    ):
        experts, rows, cols = weight.shape
        blocks = weight.view(torch.uint8).view(experts, rows, 2 * cols // BLOCK_K, BLOCK_K)
        scratch = torch.empty(block_layout_shape(weight), dtype=torch.uint8, device=weight.device)
        torch.index_select(blocks.permute(0, 2, 1, 3), 2, index, out=scratch)
        weight.view(torch.uint8).view(-1).copy_(scratch.view(-1))
        del scratch
    return block_layout_view(w13), block_layout_view(w2)


def _strided_copy_into(rows: torch.Tensor, blocks_u8: torch.Tensor, interleave: bool) -> None:
    for dst, src in block_layout_copies(rows.view(torch.uint8), blocks_u8, interleave=interleave):
        # In words, not bytes (a weight off an 8-byte boundary, a view into a shared buffer,
        # in narrower ones): the same bytes in up to 16x fewer CUDA elements.
        dst, src = as_words(dst, src)
        dst.copy_(src)


@register(
    "strided_copy",
    format="bf16",
    inplace=False,
    origin="ours",
    peak=Formula("T13 + T2"),
    traffic=Formula("2 (T13 + T2)"),
    launches=Formula("3", "2"),
)
def strided_copy(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours, out of place: the permutation and the block layout as strided ``copy_`` of views.

    The shuffle, interleave and swap are strided views (``layout.block_layout_copies``), so each
    weight is converted by one ``copy_`` (two for a gated w13, one per half) from its bytes into
    the new output: no index tensor, no per-expert loop, no hidden copy, every byte read and
    written once.

    Out of place: new outputs; the input is unchanged. Peak transient: the outputs, nothing
    else. Traffic: the out-of-place floor, in one launch per weight (two for a gated w13).
    """
    out13 = torch.empty(block_layout_shape(w13), dtype=torch.uint8, device=w13.device)
    out2 = torch.empty(block_layout_shape(w2), dtype=torch.uint8, device=w2.device)
    _strided_copy_into(w13, out13, gated)
    _strided_copy_into(w2, out2, False)
    return out13.view(torch.bfloat16), out2.view(torch.bfloat16)


# Scratch sizes: the CUDA caching allocator gives every request of 1-10 MiB a slice of a shared
# 20 MiB segment; once free, that segment is "oversize" under vLLM's max_split_size_mb=20 and
# never serves a smaller request again, so a per-layer 6 MiB scratch strands 20 MiB per layer in
# sleep mode (see load.replay). A request of >= 10 MiB (units.K_MIN_LARGE_ALLOC) gets
# its own segment, rounded to 2 MiB, which the next layer's scratch of the same size reuses, and
# it reserves less than 20 MiB.
@register(
    "strided_inplace",
    format="bf16",
    inplace=True,
    origin="ours",
    peak=Formula("max(S13, S2, 10 MiB)"),
    traffic=Formula("4 (T13 + T2)"),
    launches=Formula("5 E", "4 E"),
)
def strided_inplace(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours, in place: per expert, a plain copy into one scratch, then a strided ``copy_`` back.

    Like ``inplace`` but with the index-free strided views of ``strided_copy``, and the other
    way round: the expert is first copied as it is into the scratch (sequential reads), then
    relaid from the scratch into its own bytes, so the scattered 128-byte reads hit the
    just-written, cache-resident scratch rather than memory (measured on 2 CPU cores: 12-20 %
    faster than relaying into the scratch and copying back). Nothing is allocated but the
    scratch, which holds one expert. The scratch is at least 10 MiB, so that
    on CUDA it gets a segment of its own that later layers reuse rather than a slice of a 20 MiB
    segment that ``max_split_size_mb=20`` strands after every layer: it reserves
    ``max(S13, S2, 10 MiB)`` rounded to 2 MiB, where a smaller scratch would reserve 20 MiB per
    layer.

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: the scratch, no index tensors. Traffic and launches: per expert one copy into
    the scratch and one back per half of a gated w13 (one when not gated), then the same for w2.
    """
    expert_bytes = max(w13[0].nbytes, w2[0].nbytes)
    scratch = torch.empty(
        max(expert_bytes, K_MIN_LARGE_ALLOC), dtype=torch.uint8, device=w13.device
    )
    for weight, interleave in ((w13, gated), (w2, False)):
        _, rows, cols = weight.shape
        expert_scratch = scratch[: weight[0].nbytes]
        scratch_rows = expert_scratch.view(rows, 2 * cols)
        for expert in weight:
            expert_u8 = expert.view(torch.uint8)
            expert_scratch.copy_(expert_u8.view(-1))
            _strided_copy_into(
                scratch_rows, expert_u8.view(block_layout_shape(weight)[1:]), interleave
            )
    return block_layout_view(w13), block_layout_view(w2)


# The engines' own converters, transcribed (the installed ones: ``formats.bf16.engines``).


def _sglang_block_layout(param: torch.Tensor, index: torch.Tensor) -> None:
    """SGLang's ``_apply_trtllm_bf16_block_layout`` for one weight ``[E, M, cols]``, in place.

    A function of its own, as in SGLang, so that the last ``tile`` dies when it returns.
    """
    expert_shape = param[0].shape
    for i in range(param.shape[0]):
        tile = param[i].clone().view(torch.uint8)[index].contiguous()
        tile = to_block_layout(tile)
        param[i] = tile.view(torch.bfloat16).contiguous().reshape(expert_shape)


@register(
    "sglang",
    format="bf16",
    inplace=True,
    origin="SGLang 0.5.23, transcribed",
    peak=Formula("3 max(S13, S2)"),  # two or more experts (one: 2 max(S13, S2))
    traffic=Formula("8 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("8 E"),
)
def sglang(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang 0.5.23, temporaries, their order and their lifetimes kept.

    Transcribes ``sglang/srt/layers/quantization/unquant.py``,
    ``UnquantizedFusedMoEMethod._apply_trtllm_bf16_block_layout`` (called for w13, then w2, by
    ``_maybe_apply_flashinfer_trtllm_bf16_block_layout``). Per expert: ``clone`` -> uint8 view
    -> index rows -> ``.contiguous()``; ``convert_to_block_layout`` (``.contiguous()`` of the
    ``[nb, M, 128]`` view); written back over the expert (``param.data[i] = ...``, a
    ``copy_``); then the parameter is viewed 4-D. The previous expert's ``tile`` is still bound
    while the next one is made (a Python rebinding), which the peak below counts.

    SGLang's loader stores w13 as ``[w3; w1]``; this strategy takes this library's ``[w1; w3]``
    and folds the swap into the row index, ``(G[S] + M/2) % M``: the same gather over the same
    bytes as SGLang's ``G[S]`` over its swapped rows, so the work is the engine's after its own
    load step. SGLang clears its permute cache at the start of every call and recomputes the
    two indices (O(M) work); here, as for every strategy, the indices come from ``layout``'s
    cache. Its inverse for refit, ``_restore_trtllm_bf16_canonical_layout``, is
    ``placement.restore`` here (every format's, in place too).

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: three expert-sized tiles with two or more experts (the previous tile, the clone
    and the gathered rows; one expert: two).

    Traffic and launches: per expert a clone, a gather (its int64 index read too), a
    block-layout copy and a copy back (a weight with one 128-byte block per row skips the
    block-layout copy: ``2 T`` and ``E`` launches fewer).
    """
    for weight, index in (
        (w13, w13_row_index(w13.shape[1], gated, w13.device)),
        (w2, w2_row_index(w2.shape[1], w2.device)),
    ):
        _sglang_block_layout(weight, index)
    return block_layout_view(w13), block_layout_view(w2)


def _trtllm_prepare_expert(expert: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """TRT-LLM's ``_prepare_bf16_weight_for_trtllm_gen``: gather bf16 rows, then BlockMajorK.

    TRT-LLM makes the block layout on the bf16 view with ``block_k = 64`` elements: the same
    128-byte blocks, one ``.contiguous()`` copy, as ``to_block_layout`` on the bytes.
    """
    shuffled = expert[index].contiguous()
    return to_block_layout(shuffled.view(torch.uint8)).view(torch.bfloat16)


@register(
    "trtllm",
    format="bf16",
    inplace=False,
    origin="TensorRT-LLM (main, a98a9061d72f), transcribed",
    peak=Formula("T13 + max(T13, 2 T2)"),
    traffic=Formula("6 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("4 E + 2"),
)
def trtllm(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """TensorRT-LLM (main at commit a98a9061d72f), temporaries, order and lifetimes kept.

    Transcribes ``tensorrt_llm/_torch/modules/fused_moe/quantization.py``,
    ``BF16TRTLLMGenFusedMoEMethod.process_weights_after_loading``: the row indices read once
    (from expert 0, through TRT-LLM's own permute cache keyed ``(shape, "w31", num_elts_per_sf)``);
    then per weight a list, per expert, of a gather of the bf16 rows, ``.contiguous()`` and a
    BlockMajorK ``.contiguous()`` copy; ``torch.stack`` of the list (a full second copy, TRT-LLM
    #13689) becomes the new parameter. w13's stack is alive while w2's list is built.

    TRT-LLM's loader stores ``w3_w1_weight`` as ``[w3; w1]``; this strategy takes this
    library's ``[w1; w3]`` and folds the swap into the row index, ``(G[S] + M/2) % M``: the
    same gather over the same bytes, so the work is the engine's after its own load step.

    Out of place: new outputs; the input is unchanged. Peak transient: w13's list and stack;
    then w13's stack with w2's list and stack.

    Traffic and launches: per expert a gather (its int64 index read too) and a block-layout
    copy, then one stack per weight (a weight with one 128-byte block per row skips the
    block-layout copy: ``2 T`` and ``E`` launches fewer).
    """
    index13 = w13_row_index(w13.shape[1], gated, w13.device)
    index2 = w2_row_index(w2.shape[1], w2.device)
    out13 = torch.stack([_trtllm_prepare_expert(expert, index13) for expert in w13])
    out2 = torch.stack([_trtllm_prepare_expert(expert, index2) for expert in w2])
    return out13, out2
