"""Stand-ins for vLLM's two CUDA-only steps, so that its NVFP4, MXFP8 and MXINT4 preparations
run on a CPU and on ``meta``: FlashInfer's ``block_scale_interleave`` (alias
``nvfp4_block_scale_interleave``, a CUDA op) and vLLM's MXINT4 sign step
``convert_packed_uint4b8_to_signed_int4_inplace`` (torch, but it asserts CUDA tensors).

Built from upstream torch definitions, never this library's own code (tests/test_standins.py
holds each, byte for byte, to a second upstream definition):

- ``block_scale_interleave``: FlashInfer's ``_swizzle_sf_128x4``, called as installed
  (flashinfer-python 0.7.2.post1 and 0.7.4, identical: ``flashinfer/diffusion_ops/
  minimax_h3_fc1_swiglu.py``), per expert; it writes uint8 only, so bf16 scales (MXINT4's) go
  through it as their two byte planes, each moved as a whole element is.
- ``signed_int4_inplace``: vLLM's ``unpack_quantized_values_into_int32`` and
  ``pack_quantized_values_into_int32`` (vllm 0.33.0 and 0.34.0, identical:
  ``vllm/model_executor/layers/quantization/utils/quant_utils.py``), transcribed (vLLM's module
  imports its distributed state, and vLLM is not installed where the tests run), with ``wtype``
  given as its only field read, ``size_bits``.

On ``meta`` each allocates and moves what the engine's own step does on CUDA, so that the
figures measured there are the engine's: the interleave one new flat tensor of ``E Mp Kp``
elements of the input's dtype (FlashInfer's ``block_scale_interleave_sm100``: ``torch.empty``,
then one kernel reading the input and writing it), the sign step the ops of vLLM's own loop
(``_vllm_sign_loop``). ``cpu_steps`` puts them
in place of the CUDA ones for the duration of one engine call; on CUDA the real ones run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

__all__ = ["block_scale_interleave", "cpu_steps", "signed_int4_inplace"]

#: The 128x4 tile of FlashInfer's scale layout: rows and columns a matrix is padded to.
_TILE_ROWS, _TILE_COLS = 128, 4


def block_scale_interleave(unswizzled_sf: torch.Tensor) -> torch.Tensor:
    """FlashInfer's ``block_scale_interleave`` off CUDA: uint8 or bf16 ``[M, K]`` or
    ``[E, M, K]`` -> a new flat ``[E Mp Kp]`` of the same dtype (Mp = M rounded up to 128, Kp = K
    to 4), each expert's 128x4-swizzled matrix after the other, padding zero. Its inverse is
    FlashInfer's ``_unswizzle_batched_sf_128x4`` (``flashinfer/trace/templates/gemm.py``).
    Memory on ``meta``: the output only, as the CUDA op (and its traffic: the input read, the
    output written, one launch); on CPU the torch definition's temporaries besides."""
    if unswizzled_sf.dtype not in (torch.uint8, torch.bfloat16):
        raise TypeError(
            f"block_scale_interleave: unswizzled_sf is {unswizzled_sf.dtype}; FlashInfer's op "
            "takes uint8 or bfloat16 scales"
        )
    rows, cols = unswizzled_sf.shape[-2:]
    experts = unswizzled_sf.shape[0] if unswizzled_sf.dim() == 3 else 1
    padded_rows = -(-rows // _TILE_ROWS) * _TILE_ROWS
    padded_cols = -(-cols // _TILE_COLS) * _TILE_COLS
    size = experts * padded_rows * padded_cols
    if unswizzled_sf.device.type == "meta":
        # The kernel's work in one op: reads the input once, writes the new padded output.
        padding = (0, padded_cols - cols, 0, padded_rows - rows)
        return F.pad(unswizzled_sf, padding).view(size)
    from flashinfer.diffusion_ops.minimax_h3_fc1_swiglu import _swizzle_sf_128x4

    experts_sf = unswizzled_sf.reshape(experts, rows, cols)
    if unswizzled_sf.dtype == torch.uint8:
        return torch.cat([_swizzle_sf_128x4(sf) for sf in experts_sf])
    planes = experts_sf.view(torch.uint8).view(experts, rows, cols, 2)  # a bf16 = two bytes
    swizzled = [
        torch.stack([_swizzle_sf_128x4(sf[..., byte]) for byte in (0, 1)], dim=-1) for sf in planes
    ]
    return torch.cat(swizzled).view(torch.bfloat16).view(size)


def _unpack_quantized_values_into_int32(w_q: torch.Tensor, size_bits: int, packed_dim: int = 0):
    """vLLM's ``unpack_quantized_values_into_int32(w_q, wtype, packed_dim)``, transcribed."""
    # move dim to pack to the end
    perm = (*[i for i in range(len(w_q.shape)) if i != packed_dim], packed_dim)
    inv_perm = tuple(perm.index(i) for i in range(len(perm)))
    w_q_perm = w_q.permute(perm)

    pack_factor = 32 // size_bits
    mask = (1 << size_bits) - 1

    new_shape_perm = list(w_q_perm.shape)
    new_shape_perm[-1] *= pack_factor

    res = torch.zeros(new_shape_perm, dtype=torch.int32, device=w_q.device)
    for i in range(pack_factor):
        res[..., i::pack_factor] = (w_q_perm >> size_bits * i) & mask

    return res.permute(inv_perm)


def _pack_quantized_values_into_int32(w_q: torch.Tensor, size_bits: int, packed_dim: int = 0):
    """vLLM's ``pack_quantized_values_into_int32(w_q, wtype, packed_dim)``, transcribed."""
    # move dim to pack to the end
    perm = (*[i for i in range(len(w_q.shape)) if i != packed_dim], packed_dim)
    inv_perm = tuple(perm.index(i) for i in range(len(perm)))
    w_q_perm = w_q.permute(perm)

    pack_factor = 32 // size_bits
    mask = (1 << size_bits) - 1

    new_shape_perm = list(w_q_perm.shape)
    assert w_q_perm.shape[-1] % pack_factor == 0
    new_shape_perm[-1] //= pack_factor

    res = torch.zeros(new_shape_perm, dtype=torch.int32, device=w_q.device)
    for i in range(pack_factor):
        res |= (w_q_perm[..., i::pack_factor] & mask) << size_bits * i

    return res.permute(inv_perm)


def _vllm_sign_loop(t: torch.Tensor) -> None:
    """The ops of vLLM 0.33.0/0.34.0's ``convert_packed_uint4b8_to_signed_int4_inplace`` loop,
    run on ``meta`` for their allocations and traffic (three tensors of ``t``'s size alive at
    once: the nibble and two temporaries)."""
    for i in range(8):
        shift = 4 * i
        nib = (t >> shift) & 0xF
        t &= ~(0xF << shift)
        t |= ((nib - 8) & 0xF) << shift


def signed_int4_inplace(t: torch.Tensor) -> torch.Tensor:
    """vLLM's ``convert_packed_uint4b8_to_signed_int4_inplace`` off CUDA: int32 ``t`` of eight
    uint4b8 nibbles a word (the value plus 8) -> the same words of signed int4 nibbles, in
    place; returns ``t``. Unpacked along the last dim, each nibble ``(n - 8) & 0xF``, packed
    back and copied over ``t``, one ``[..., M, K]`` matrix (an expert) at a time. Memory on
    ``meta``: vLLM's loop's; on CPU one matrix's unpacked int32 values (8 of its size) and their
    temporaries."""
    if t.dtype != torch.int32:
        raise TypeError(f"signed_int4_inplace: t is {t.dtype}; vLLM packs uint4b8 in int32")
    if t.device.type == "meta":
        _vllm_sign_loop(t)
        return t
    for matrix in t.view(-1, *t.shape[-2:]):
        values = _unpack_quantized_values_into_int32(matrix, 4, packed_dim=1)
        matrix.copy_(_pack_quantized_values_into_int32((values - 8) & 0xF, 4, packed_dim=1))
    return t


#: Where vLLM's functions import the CUDA-only steps from, at call time: (module, name) ->
#: the stand-in. FlashInfer's interleave under both its names, from the package (NVFP4, MXINT4)
#: and from its module (MXFP8); vLLM's sign step from ``quant_utils`` (MXINT4).
_STEPS = {
    **{
        (module, name): block_scale_interleave
        for module in (
            "flashinfer",
            "flashinfer.fp4_quantization",
            "flashinfer.quantization.fp4_quantization",
        )
        for name in ("block_scale_interleave", "nvfp4_block_scale_interleave")
    },
    (
        "vllm.model_executor.layers.quantization.utils.quant_utils",
        "convert_packed_uint4b8_to_signed_int4_inplace",
    ): signed_int4_inplace,
}


@contextlib.contextmanager
def cpu_steps(device: torch.device) -> Iterator[None]:
    """Within it, on any ``device`` but CUDA, FlashInfer's and vLLM's CUDA-only steps are the
    stand-ins (each where its module is imported, or imports: the engine's function imports
    them when called); on CUDA nothing changes. Put back on leaving, even on an error."""
    if device.type == "cuda":
        yield
        return
    replaced = []
    try:
        for (module_name, name), stand_in in _STEPS.items():
            module = sys.modules.get(module_name)
            if module is None and importlib.util.find_spec(module_name.partition(".")[0]):
                with contextlib.suppress(ImportError):  # absent in some releases: not called
                    module = importlib.import_module(module_name)
            if module is not None and hasattr(module, name):
                replaced.append((module, name, getattr(module, name)))
                setattr(module, name, stand_in)
        yield
    finally:
        for module, name, original in reversed(replaced):
            setattr(module, name, original)
