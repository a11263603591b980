"""The engines' own converters as installed: strategies that call vLLM's and SGLang's functions.

``vllm`` calls vLLM's ``convert_moe_weights_to_flashinfer_trtllm_block_layout``;
``sglang-installed`` calls SGLang's ``_apply_trtllm_bf16_block_layout``.
Each is registered only where its engine is installed (``importlib.util.find_spec``, as for
``flashinfer``) and imports the engine on its first call, so that importing ``moe_convert``
(once per asv benchmark process) does not pay vLLM's 10-13 s import. An adapter never falls
back to a transcription: an engine that is installed but does not import raises ``ImportError``
with the engine's own error. ``check_engine`` compares an adapter with FlashInfer's helpers on
a small layer; ``python -m moe_convert engines`` prints it for every engine. Each adapter's
figures are on its ``@register``; docs/engines.md has the engine releases read and how the
adapters were tested against real installs.

Both engines import FlashInfer inside the converted function: they need flashinfer-python too.
The transcriptions of the same code, which need neither, are ``inplace`` (vLLM 0.31.0 to 0.33.0:
the in-place form of vLLM #54699; ``preallocated`` for 0.29.0 and 0.30.0) and ``sglang`` in
``moe_convert.formats.bf16.strategies``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from ...formulas import Formula
from ..layout import block_layout_view, swap_w13_to_w31
from ..registry import STRATEGIES, convert, register
from .inputs import random_weights
from .reference import AVAILABLE as FLASHINFER_AVAILABLE
from .reference import flashinfer_reference

__all__ = [
    "CHECK_EXPERTS",
    "CHECK_HIDDEN",
    "CHECK_INTERMEDIATE",
    "ENGINES",
    "Engine",
    "EngineCheck",
    "check_engine",
]


@dataclass(frozen=True)
class Engine:
    """An installed engine's converter, registered as the strategy ``strategy``."""

    strategy: str  # registry name of the adapter
    distribution: str  # the engine's package (importlib.metadata name)
    module: str  # where the called function lives
    function: str  # what the adapter calls, qualified within ``module``
    transcription: str  # the strategy in ``formats.bf16.strategies`` that transcribes it
    import_first: str | None = None  # a module the engine needs imported before ``module``

    @property
    def installed(self) -> bool:
        """Whether the engine's package can be found (then the adapter is registered)."""
        return importlib.util.find_spec(self.distribution) is not None

    def resolve(self) -> tuple[Any, str]:
        """Import the engine and return ``(owner, name)``: the module or class holding the function.

        Raises the engine's own ``ImportError`` where it is installed but does not import.
        """
        if self.import_first:
            importlib.import_module(self.import_first)
        owner: Any = importlib.import_module(self.module)
        *path, name = self.function.split(".")
        for attribute in path:
            owner = getattr(owner, attribute)
        return owner, name

    @property
    def version(self) -> str:
        """The installed version, or ``"not installed"``."""
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"


VLLM = Engine(
    strategy="vllm",
    distribution="vllm",
    module="vllm.model_executor.layers.quantization.utils.flashinfer_utils",
    function="convert_moe_weights_to_flashinfer_trtllm_block_layout",
    transcription="inplace",
    # Importing flashinfer_utils first fails with a circular import of align_moe_weights_for_fi.
    import_first="vllm.model_executor.layers.fused_moe",
)
SGLANG = Engine(
    strategy="sglang-installed",
    distribution="sglang",
    module="sglang.srt.layers.quantization.unquant",
    function="UnquantizedFusedMoEMethod._apply_trtllm_bf16_block_layout",
    transcription="sglang",
)
#: Every engine with an adapter, installed here or not.
ENGINES = (VLLM, SGLANG)

# Both engines hand FlashInfer a dict cache keyed by shape but not device: one per device here, so
# that meta indices (memory measurement) never reach a CPU or CUDA call.
_PERMUTE_CACHES: dict[tuple[str, torch.device], dict] = {}


def _vllm_converts_in_place(version: str) -> bool:
    """vLLM 0.31.0 made the converter in place (#54699); 0.29.0 and 0.30.0 return new tensors
    (the #45589 form, transcribed as ``preallocated``). Both take w13 as ``[w1; w3]``."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= (0, 31)


# Where vLLM is not installed its record (documented, not registered) is the newest form read.
@register(
    VLLM.strategy,
    origin="vLLM as installed (figures of 0.33.0)",
    inplace=_vllm_converts_in_place(VLLM.version) if VLLM.installed else True,
    needs="vllm, flashinfer-python",
    available=VLLM.installed,
    peak=Formula("max(S13 + 2 X13, S2)", "max(S13, S2)"),
    traffic=Formula("4 (T13 + T2) + E (5 X13 + X2)", "4 (T13 + T2) + E (X13 + X2)"),
    launches=Formula("6 E", "4 E"),
    cpu_allocator_extra=Formula("S13 - X13", "S13"),
)
def _vllm(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``convert_moe_weights_to_flashinfer_trtllm_block_layout``, as installed.

    Takes w13 in checkpoint ``[w1; w3]`` order, as vLLM does (the swap is folded into its index).
    vLLM's caller (``fused_moe/oracle/unquantized.py::convert_to_unquantized_kernel_format``)
    passes a fresh permute cache per layer; here the cache is kept per device, so a measured
    call finds the indices cached, as for every strategy.

    In place from vLLM 0.31.0 on: returns vLLM's 4-D bf16 views of the inputs' storages
    (``data_ptr`` unchanged); 0.29.0 and 0.30.0 return new tensors (registered out of place
    there). Checked against 0.29.0 to 0.33.0; older releases were not read. Peak transient
    (vLLM 0.33.0): the one-expert scratch, and gated, per expert, the swap folded into a new
    index, ``(P + M/2) % M`` (two int64 temporaries), where the ``inplace`` transcription reads
    a cached folded index. On CPU the allocator also sees ``index_select``'s hidden expert copy.

    Traffic and launches (vLLM 0.33.0): ``inplace``'s (per expert an ``index_select`` into the
    scratch and a copy back), plus gated the per-expert ``add`` and ``remainder`` of the w13
    index (``4 E X13`` in ``2E``).
    """
    module, name = VLLM.resolve()
    cache = _PERMUTE_CACHES.setdefault((VLLM.strategy, w13.device), {})
    return getattr(module, name)(cache, w13, w2, is_gated_act_gemm=gated)


@register(
    SGLANG.strategy,
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


#: The small layer each engine is checked on, gated and not: E = 4, H = 256, I = 128.
CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE = 4, 256, 128


@dataclass(frozen=True)
class EngineCheck:
    """One engine here: its version and whether its adapter gives the reference's bytes."""

    engine: Engine
    version: str
    identical: bool | None  # byte-identical to the reference, gated and not; None: not installed
    detail: str  # what was compared and how it came out, or why it was not run


def check_engine(engine: Engine, *, device: torch.device | str = "cpu") -> EngineCheck:
    """Convert a small random layer with ``engine``'s adapter and compare with FlashInfer's helpers.

    Gated and non-gated, ``CHECK_*`` sizes, on clones of the same random weights as the
    reference; the result must also alias the input exactly when the adapter is registered in
    place. ``identical`` is ``None`` where the engine is not installed and ``False`` where
    it is installed but disagrees, cannot run (flashinfer-python missing: both engines import
    it) or raises (the error is in ``detail``): an installed engine is never skipped.
    """
    if not engine.installed:
        return EngineCheck(engine, engine.version, None, f"{engine.distribution} is not installed")
    if not FLASHINFER_AVAILABLE:
        return EngineCheck(
            engine,
            engine.version,
            False,
            "flashinfer-python is not installed, and the engine's converter imports it",
        )
    results = []
    for gated in (True, False):
        rows13 = 2 * CHECK_INTERMEDIATE if gated else CHECK_INTERMEDIATE
        w13, w2 = random_weights(
            (CHECK_EXPERTS, rows13, CHECK_HIDDEN),
            (CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE),
            device=device,
        )
        want = flashinfer_reference(w13, w2, gated=gated)
        try:
            in13, in2 = w13.clone(), w2.clone()
            got = convert(in13, in2, strategy=engine.strategy, gated=gated)
        except Exception as error:  # reported, with the engine's own message, as a failed check
            return EngineCheck(
                engine, engine.version, False, f"gated={gated}: {type(error).__name__}: {error}"
            )
        same = [
            torch.equal(g.view(torch.uint8), w.view(torch.uint8))
            for g, w in zip(got, want, strict=True)
        ]
        aliased = got[0].data_ptr() == in13.data_ptr() and got[1].data_ptr() == in2.data_ptr()
        results.append((gated, same, aliased == STRATEGIES[engine.strategy].inplace))
    detail = "; ".join(
        f"gated={gated}: w13 {'ok' if same[0] else 'MISMATCH'}, "
        f"w2 {'ok' if same[1] else 'MISMATCH'}"
        f"{'' if contract else ', in place or not AGAINST its registration'}"
        for gated, same, contract in results
    )
    identical = all(all(same) and contract for _, same, contract in results)
    return EngineCheck(
        engine, engine.version, identical, f"{detail} (against FlashInfer's helpers)"
    )
