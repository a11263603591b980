"""A tiny engine repository for the tests: a git history of a package with vLLM's module path and
function name, ``vllm/model_executor/layers/quantization/utils/flashinfer_utils.py::
convert_moe_weights_to_flashinfer_trtllm_block_layout``, in the forms vLLM's releases had
(transcribed from vLLM 0.23.0, 0.24.0 and 0.31.0; the FlashInfer helpers they import are the
installed flashinfer-python's):

- ``legacy``: per expert clone, gather, block layout, a list and ``torch.stack``; no
  ``is_gated_act_gemm`` argument (vLLM 0.16.0 - 0.23.0: the caller swaps w13 to ``[w3; w1]``);
- ``preallocated``: vLLM #45589, new outputs filled by ``index_select(out=)`` per expert, the swap
  folded into the index (0.24.0 - 0.30.0);
- ``inplace``: vLLM #54699, in place through a one-expert scratch (0.31.0 - 0.33.0);
- ``per_expert``: the per-expert clone/list/stack brought back behind today's signature: the
  regression a pull request could make (what the PR command and ``find`` must catch);
- ``broken``: a commit whose package does not import (a failing commit inside a bisected range);
- pull requests on ``inplace``: ``inplace_doc``, a docstring edit; ``inplace_clone``, a copy of
  w13 first (``w13_weight = w13_weight.clone()``: no longer in place, its code still reads so);
  ``inplace_slow``, a sleep per expert (time only).

Beside it, every commit has vLLM's FP8 per-tensor preparation,
``prepare_fp8_moe_layer_for_fi`` (the parameters ``moe_convert.formats.preparations``' adapter
calls; its per-tensor branch only, transcribed from vLLM 0.33.0: the w1/w3 swap, then
``rotate_weights_for_fi_trtllm_fp8_per_tensor_moe``, rebinding ``.data``), in the rotation form
``FP8_FORMS`` names: ``fp8`` as released, or ``fp8_copy`` with the extra full copy of w13 a pull
request could add (``gemm1_src = gemm1_weights.detach().clone()``, issue 37); and gpt-oss's MXFP4
preparation, ``fused_moe/oracle/mxfp4.py::convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``
(its TRTLLM-gen branch, transcribed from vLLM 0.33.0, byte-identical to ``mxfp4-legacy``), in the
form ``MXFP4_FORMS`` names: ``mxfp4``, or ``mxfp4_copy`` with an extra full copy of w13 kept to
the end (``w13_weight.detach().clone()``).

``make_engine_repo`` writes the history the tests drive: it builds without CUDA as vLLM's
``empty`` target does (``VLLM_TARGET_DEVICE=empty pip wheel --no-deps --no-build-isolation``: the
tiny ``setup.py`` needs only setuptools) and needs no network.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

MODULE = "vllm/model_executor/layers/quantization/utils/flashinfer_utils.py"

_HEAD = '''"""A stand-in for vLLM's flashinfer_utils (tests/engine_repo.py)."""

import time

import torch

EPILOGUE_TILE_M = 128
BLOCK_K = 128


def _check(w13_weight, w2_weight):
    if w13_weight.dtype != torch.bfloat16 or w2_weight.dtype != torch.bfloat16:
        raise ValueError("Unquantized Moe Backend FlashInfer TRTLLM requires bfloat16 weights")


def swap_w13_to_w31(x):
    return x.reshape(-1, 2, x.shape[-2] // 2, x.shape[-1]).flip(dims=[1]).reshape(x.shape)


def prepare_fp8_moe_layer_for_fi(
    layer, w13, w2, w13_scale, w13_input_scale, w2_scale, w2_input_scale, is_trtllm=False
):
    """vLLM 0.33.0's, its FP8 per-tensor TRT-LLM branch only."""
    assert layer.weight_block_size is None, "the stand-in engine has FP8 per-tensor only"
    if layer.moe_config.is_act_and_mul:
        w13 = swap_w13_to_w31(w13)
    if is_trtllm:
        rotate_weights_for_fi_trtllm_fp8_per_tensor_moe(w13, w2, layer.activation.is_gated)
    return w13, w2, w13_scale, w2_scale
'''

_ROTATE = '''
def rotate_weights_for_fi_trtllm_fp8_per_tensor_moe(
    gemm1_weights, gemm2_weights, is_gated_activation
):
    """vLLM 0.33.0's rotation: per expert, rows reordered (gated), shuffled; .data rebound."""
    from flashinfer import reorder_rows_for_gated_act_gemm, shuffle_matrix_a

    experts = range(gemm1_weights.shape[0])
    {source}
    reorder = reorder_rows_for_gated_act_gemm if is_gated_activation else lambda rows: rows
    interleaved = torch.stack([reorder(gemm1_src[i]) for i in experts])
    gemm1 = [shuffle_matrix_a(interleaved[i].view(torch.uint8), EPILOGUE_TILE_M) for i in experts]
    gemm2 = [shuffle_matrix_a(gemm2_weights[i].view(torch.uint8), EPILOGUE_TILE_M) for i in experts]
    gemm1_weights.data = torch.stack(gemm1).view(torch.float8_e4m3fn)
    gemm2_weights.data = torch.stack(gemm2).view(torch.float8_e4m3fn)
'''
#: The FP8 per-tensor rotation's forms: as vLLM 0.33.0 has it, and with an extra full copy of w13.
FP8_FORMS = {
    "fp8": _ROTATE.format(source="gemm1_src = gemm1_weights"),
    "fp8_copy": _ROTATE.format(source="gemm1_src = gemm1_weights.detach().clone()"),
}

MXFP4_MODULE = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"
_MXFP4 = '''"""A stand-in for vLLM's fused_moe/oracle/mxfp4.py (tests/engine_repo.py)."""

from enum import Enum

import torch


class Mxfp4MoeBackend(Enum):
    FLASHINFER_TRTLLM_MXFP4_BF16 = "FLASHINFER_TRTLLM_MXFP4_BF16"
    FLASHINFER_TRTLLM_MXFP4_MXFP8 = "FLASHINFER_TRTLLM_MXFP4_MXFP8"


TRTLLM_BACKENDS = tuple(Mxfp4MoeBackend)


def swap_every_two_rows(x, axis):
    shape = list(x.shape)
    new_shape = shape[:axis] + [shape[axis] // 2, 2] + shape[axis + 1 :]
    return x.reshape(*new_shape).flip(axis + 1).reshape(*shape)


def convert_gpt_oss_weight_to_mxfp4_moe_kernel_format(
    mxfp4_backend, layer, w13_weight, w2_weight, w13_weight_scale, w2_weight_scale,
    w13_bias=None, w2_bias=None, w13_input_scale=None, w2_input_scale=None,
    _cache_permute_indices=None,
):
    """vLLM 0.33.0's, its TRTLLM-gen branch only: per expert, rows gathered by FlashInfer's
    cached index (scales interleaved, each bias cloned twice), six lists, six stacks."""
    assert mxfp4_backend in TRTLLM_BACKENDS, "the stand-in engine has the TRTLLM-gen branch only"
    from flashinfer.fp4_quantization import nvfp4_block_scale_interleave
    from flashinfer.fused_moe.core import get_w2_permute_indices_with_cache

    def index(rows, **sf):
        found = get_w2_permute_indices_with_cache(_cache_permute_indices, rows, 128, **sf)
        return found.to(rows.device)

    num_experts = w13_weight.shape[0]
    intermediate_size, hidden_size = w13_weight.shape[1] // 2, w13_weight.shape[2] * 2
    {source}
    w2_weight, w2_weight_scale = w2_weight.data, w2_weight_scale.data
    w13_bias, w2_bias = w13_bias.data.to(torch.float32), w2_bias.data.to(torch.float32)
    w13_weight_scale = swap_every_two_rows(w13_weight_scale.data, 1)
    w13_weight = swap_every_two_rows(w13_src, 1)
    w13_bias = swap_every_two_rows(w13_bias, 1)
    g1w, g1s, g1b, g2w, g2s, g2b = [], [], [], [], [], []
    for i in range(num_experts):
        for weight, scale, bias, lists in (
            (w13_weight, w13_weight_scale, w13_bias, (g1w, g1s, g1b)),
            (w2_weight, w2_weight_scale, w2_bias, (g2w, g2s, g2b)),
        ):
            rows = weight[i].view(torch.uint8)
            lists[0].append(rows[index(rows)].contiguous())
            rows = scale[i].view(torch.uint8)
            lists[1].append(
                nvfp4_block_scale_interleave(rows[index(rows, num_elts_per_sf=16)].contiguous())
            )
            bias_index = index(bias[i].clone().reshape(-1, 1))  # keyed by a clone, as vLLM's
            lists[2].append(bias[i].clone().reshape(-1, 1)[bias_index].contiguous())
    fp8 = torch.float8_e4m3fn
    w13_weight = torch.stack(g1w)
    w13_weight_scale = torch.stack(g1s).reshape(num_experts, 2 * intermediate_size, -1).view(fp8)
    w2_weight = torch.stack(g2w)
    w2_weight_scale = torch.stack(g2s).reshape(num_experts, hidden_size, -1).view(fp8)
    w13_bias = torch.stack(g1b).reshape(num_experts, -1)
    w2_bias = torch.stack(g2b).reshape(num_experts, -1)
    return w13_weight, w2_weight, w13_weight_scale, w2_weight_scale, w13_bias, w2_bias
'''
#: gpt-oss's MXFP4 preparation's forms: as vLLM 0.33.0 has it, and with an extra full copy of w13.
MXFP4_FORMS = {
    "mxfp4": _MXFP4.replace("{source}", "w13_src = w13_weight.data"),
    "mxfp4_copy": _MXFP4.replace("{source}", "w13_src = w13_weight.detach().clone()"),
}

_LEGACY_LOOP = """
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        convert_to_block_layout,
        get_w2_permute_indices_with_cache,
    )

    w13_shuffled, w2_shuffled = [], []
    for i in range(w13_weight.shape[0]):
        index = _maybe_get_cached_w3_w1_permute_indices(
            cache_permute_indices, w13_weight[i].view(torch.uint8), EPILOGUE_TILE_M{gated_arg}
        )
        {fold}
        tmp1 = w13_weight[i].clone().view(torch.uint8)[index.to(w13_weight.device)].contiguous()
        index = get_w2_permute_indices_with_cache(
            cache_permute_indices, w2_weight[i].view(torch.uint8), EPILOGUE_TILE_M
        )
        tmp2 = w2_weight[i].clone().view(torch.uint8)[index.to(w2_weight.device)].contiguous()
        w13_shuffled.append(convert_to_block_layout(tmp1, BLOCK_K).view(torch.bfloat16))
        w2_shuffled.append(convert_to_block_layout(tmp2, BLOCK_K).view(torch.bfloat16))
    return (
        torch.stack(w13_shuffled).view(torch.bfloat16).contiguous(),
        torch.stack(w2_shuffled).view(torch.bfloat16).contiguous(),
    )
"""

_FORMS = {
    "legacy": '''
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight
):
    """vLLM 0.23.0's form: w13 arrives as [w3; w1] (the caller swapped it)."""
    _check(w13_weight, w2_weight)
'''
    + _LEGACY_LOOP.format(gated_arg="", fold="pass"),
    "per_expert": '''
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight, is_gated_act_gemm=True
):
    """The per-expert form back behind today's signature (w13 as [w1; w3])."""
    _check(w13_weight, w2_weight)
'''
    + _LEGACY_LOOP.format(
        gated_arg=", is_gated_act_gemm=is_gated_act_gemm",
        fold="if is_gated_act_gemm:\n"
        "            index = (index + w13_weight.shape[1] // 2) % w13_weight.shape[1]",
    ),
    "preallocated": '''
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight, is_gated_act_gemm=True
):
    """vLLM #45589 (0.24.0): new outputs, index_select(out=) per expert."""
    _check(w13_weight, w2_weight)
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        get_w2_permute_indices_with_cache,
    )

    outs = []
    for weight, is_w13 in ((w13_weight, True), (w2_weight, False)):
        rows, cols = weight[0].view(torch.uint8).shape
        out = torch.empty(
            (weight.shape[0], cols // BLOCK_K, rows, BLOCK_K), dtype=torch.uint8,
            device=weight.device,
        )
        for i in range(weight.shape[0]):
            expert = weight[i].view(torch.uint8)
            if is_w13:
                index = _maybe_get_cached_w3_w1_permute_indices(
                    cache_permute_indices, expert, EPILOGUE_TILE_M,
                    is_gated_act_gemm=is_gated_act_gemm,
                )
                if is_gated_act_gemm:
                    index = (index + rows // 2) % rows
            else:
                index = get_w2_permute_indices_with_cache(
                    cache_permute_indices, expert, EPILOGUE_TILE_M
                )
            blocks = expert.view(rows, cols // BLOCK_K, BLOCK_K).permute(1, 0, 2)
            torch.index_select(blocks, 1, index.to(expert.device), out=out[i])
        outs.append(out.view(torch.bfloat16))
    return outs[0], outs[1]
''',
    "inplace": '''
def convert_moe_weights_to_flashinfer_trtllm_block_layout(
    cache_permute_indices, w13_weight, w2_weight, is_gated_act_gemm=True
):
    """vLLM #54699 (0.31.0): in place through a one-expert scratch; views of the inputs."""
    _check(w13_weight, w2_weight)
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        get_w2_permute_indices_with_cache,
    )

    outs = []
    for weight, is_w13 in ((w13_weight, True), (w2_weight, False)):
        rows, cols = weight[0].view(torch.uint8).shape
        shape = (weight.shape[0], cols // BLOCK_K, rows, BLOCK_K)
        scratch = torch.empty(shape[1:], dtype=torch.uint8, device=weight.device)
        for i in range(weight.shape[0]):
            expert = weight[i].view(torch.uint8)
            if is_w13:
                index = _maybe_get_cached_w3_w1_permute_indices(
                    cache_permute_indices, expert, EPILOGUE_TILE_M,
                    is_gated_act_gemm=is_gated_act_gemm,
                )
                if is_gated_act_gemm:
                    index = (index + rows // 2) % rows
            else:
                index = get_w2_permute_indices_with_cache(
                    cache_permute_indices, expert, EPILOGUE_TILE_M
                )
            blocks = expert.view(rows, cols // BLOCK_K, BLOCK_K).permute(1, 0, 2)
            torch.index_select(blocks, 1, index.to(expert.device), out=scratch)
            expert.view(-1).copy_(scratch.view(-1))
        outs.append(weight.view(torch.uint8).view(shape).view(torch.bfloat16))
    return outs[0], outs[1]
''',
    "broken": """
raise ImportError("this commit of the stand-in engine is broken on purpose")
""",
}
# Pull requests on the in-place form: a docstring edit (nothing changes); a copy of w13 first,
# so that its result is no view of its input (the in-place contract broken, issue 37); a sleep
# per expert (time only: no byte or launch changes).
_INPLACE_DOC = (
    '"""vLLM #54699 (0.31.0): in place through a one-expert scratch; views of the inputs."""'
)
assert _INPLACE_DOC in _FORMS["inplace"]
_FORMS["inplace_doc"] = _FORMS["inplace"].replace(
    _INPLACE_DOC, '"""Converts in place (vLLM #54699), one expert at a time through a scratch."""'
)
_FORMS["inplace_clone"] = _FORMS["inplace"].replace(
    "    _check(w13_weight, w2_weight)\n",
    "    _check(w13_weight, w2_weight)\n    w13_weight = w13_weight.clone()\n",
)
_FORMS["inplace_slow"] = _FORMS["inplace"].replace(
    "            expert.view(-1).copy_(scratch.view(-1))\n",
    "            expert.view(-1).copy_(scratch.view(-1))\n            time.sleep(0.005)\n",
)
FORMS = tuple(_FORMS)

_SETUP = """from setuptools import find_packages, setup

setup(name="vllm", version="{version}", packages=find_packages())
"""


@dataclass(frozen=True)
class Commit:
    """One commit of the history: the BF16 converter's form, the package version, the subject,
    the FP8 per-tensor rotation's form (``FP8_FORMS``), the flashinfer-python release its
    ``requirements/cuda.txt`` pins, as vLLM's does ("": no such file), and the MXFP4
    preparation's form (``MXFP4_FORMS``)."""

    form: str
    version: str
    subject: str
    fp8: str = "fp8"
    flashinfer: str = ""
    mxfp4: str = "mxfp4"


def _git(repo: Path, *args: str, date: str = "") -> str:
    env = {
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
    }
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def commit(repo: Path, change: Commit, *, date: int) -> str:
    """Write ``change``'s tree (its form, its version) and commit it; return the hash.

    ``date`` (seconds since the epoch) orders the commits for asv, which graphs by date.
    """
    (repo / MODULE).write_text(_HEAD + _FORMS[change.form] + FP8_FORMS[change.fp8])
    (repo / MXFP4_MODULE).write_text(MXFP4_FORMS[change.mxfp4])
    (repo / "setup.py").write_text(_SETUP.format(version=change.version))
    (repo / "NOTES").write_text(f"{change.subject}\n")
    pins = repo / "requirements" / "cuda.txt"
    pins.unlink(missing_ok=True)
    if change.flashinfer:
        pins.parent.mkdir(exist_ok=True)
        pins.write_text(f"flashinfer-python=={change.flashinfer}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", change.subject, date=f"{date} +0000")
    return _git(repo, "rev-parse", "HEAD")


def make_engine_repo(root: Path, history: list[Commit], *, start: int = 1_700_000_000) -> list[str]:
    """A git repository at ``root`` (branch ``main``) with one commit per entry of ``history``,
    an hour apart; returns the hashes, oldest first."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    for package in (
        "vllm",
        "vllm/model_executor",
        "vllm/model_executor/layers",
        "vllm/model_executor/layers/fused_moe",
        "vllm/model_executor/layers/fused_moe/oracle",
        "vllm/model_executor/layers/quantization",
        "vllm/model_executor/layers/quantization/utils",
    ):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    return [commit(root, change, date=start + 3600 * i) for i, change in enumerate(history)]


def checkout(repo: Path, branch: str, start: str) -> None:
    """Start ``branch`` at ``start`` and check it out (the next ``commit`` goes on it)."""
    _git(repo, "checkout", "-q", "-b", branch, start)
