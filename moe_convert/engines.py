"""The engines' own converters as installed: strategies that call vLLM's and SGLang's functions.

``vllm`` calls vLLM's ``convert_moe_weights_to_flashinfer_trtllm_block_layout``;
``sglang-installed`` calls SGLang's ``_apply_trtllm_bf16_block_layout``.
Each is registered only where its engine is installed (``importlib.util.find_spec``, as for
``flashinfer``) and imports the engine on its first call, so that importing ``moe_convert``
(once per asv benchmark process) does not pay vLLM's 10-13 s import. An adapter never falls
back to a transcription: an engine that is installed but does not import raises ``ImportError``
with the engine's own error. ``check_engine`` compares an adapter with FlashInfer's helpers on
a small layer; ``python -m moe_convert engines`` prints it for every engine. Each adapter's
figures are on its record; docs/engines.md has the engine releases read and how the
adapters were tested against real installs.

vLLM's function has had three forms (``VLLM_FORMS``), and a version number does not tell which
one a commit between tags carries: the adapter reads the installed function's source (its
parameters and the calls in its body, with ``ast``: no import) and registers the form it finds,
with that form's figures; every call then checks that the result aliases the input exactly when
the form says so. A function the adapter cannot call (absent, or a signature of no known form)
leaves ``vllm`` unregistered, its record in ``UNAVAILABLE`` naming what is missing.

The engines log on import and while converting, to stdout in vLLM 0.24.0 to 0.30.0: both run
with ``sys.stdout`` sent to stderr, so ``--json`` output stays JSON lines.

Both engines import FlashInfer inside the converted function: they need flashinfer-python too.
The transcriptions of the same code, which need neither, are ``legacy``, ``preallocated`` and
``inplace`` (vLLM's three forms) and ``sglang`` in ``moe_convert.strategies``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from . import strategies  # noqa: F401 (the transcriptions' records, whose figures forms reuse)
from .formulas import Formula
from .inputs import random_weights
from .layout import block_layout_view, swap_w13_to_w31
from .reference import AVAILABLE as FLASHINFER_AVAILABLE
from .reference import flashinfer_reference
from .registry import STRATEGIES, convert, register

__all__ = [
    "CHECK_EXPERTS",
    "CHECK_HIDDEN",
    "CHECK_INTERMEDIATE",
    "ENGINES",
    "VLLM_FORMS",
    "Engine",
    "EngineCheck",
    "Form",
    "FunctionCode",
    "check_engine",
    "read_function",
    "register_vllm",
    "registered_form",
]


@dataclass(frozen=True)
class FunctionCode:
    """What the adapter reads of an engine function's source: no import, just ``ast``."""

    parameters: tuple[str, ...]  # in order, positional and keyword
    calls: frozenset[str]  # names called in its body, nested functions included (``copy_``)


@dataclass(frozen=True)
class Engine:
    """An installed engine's converter, registered as the strategy ``strategy``."""

    strategy: str  # registry name of the adapter
    distribution: str  # the engine's package (importlib.metadata name)
    module: str  # where the called function lives
    function: str  # what the adapter calls, qualified within ``module``
    transcription: str  # the strategy in ``moe_convert.strategies`` that transcribes it
    import_first: str | None = None  # a module the engine needs imported before ``module``

    @property
    def installed(self) -> bool:
        """Whether the engine's package can be found (then the adapter is registered)."""
        return importlib.util.find_spec(self.distribution) is not None

    def resolve(self) -> tuple[Any, str]:
        """Import the engine and return ``(owner, name)``: the module or class holding the function.

        Raises the engine's own ``ImportError`` where it is installed but does not import, and
        ``ImportError`` naming what is missing where the module lacks the function. Whatever
        the engine prints meanwhile goes to stderr.
        """
        with contextlib.redirect_stdout(sys.stderr):
            if self.import_first:
                importlib.import_module(self.import_first)
            owner: Any = importlib.import_module(self.module)
        *path, name = self.function.split(".")
        for attribute in path:
            owner = getattr(owner, attribute)
        if not hasattr(owner, name):
            raise ImportError(
                f"{self.distribution} {self.version} has no {self.function} in {self.module}"
            )
        return owner, name

    @property
    def version(self) -> str:
        """The installed version, or ``"not installed"``."""
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"


def read_function(engine: Engine) -> FunctionCode | str:
    """The source of ``engine.function`` as installed, read without importing the engine; or a
    line saying why it cannot be read (no such file, no such top-level function)."""
    spec = importlib.util.find_spec(engine.distribution)
    if spec is None or not spec.submodule_search_locations:
        return f"{engine.distribution} is not installed"
    where = Path(next(iter(spec.submodule_search_locations)), *engine.module.split(".")[1:])
    path = where.with_suffix(".py") if where.with_suffix(".py").is_file() else where / "__init__.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError) as error:
        return f"{engine.distribution} {engine.version}: cannot read {engine.module}: {error}"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == engine.function:
            arguments = node.args
            names = [
                a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
            ]
            calls = {
                call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name))
            }
            return FunctionCode(tuple(names), frozenset(calls))
    return f"{engine.distribution} {engine.version} has no {engine.function} in {engine.module}"


@dataclass(frozen=True)
class Form:
    """One form an engine function has had across releases, told by its code (``matches``)."""

    name: str
    releases: str  # the releases read that have it
    transcription: str  # the strategy that transcribes it (its figures, unless given here)
    inplace: bool
    matches: Callable[[FunctionCode], bool]
    # The form's own figures where they differ from its transcription's: peak, traffic,
    # launches, cpu_allocator_extra (Formula each).
    figures: tuple[Formula, Formula, Formula, Formula] | None = None
    gated_only: str = ""  # why a non-gated w13 cannot be converted ("": it can)

    def record_figures(self) -> dict[str, Formula | None]:
        """The keyword arguments of ``register`` for this form's figures."""
        if self.figures is not None:
            peak, traffic, launches, extra = self.figures
        else:
            record = STRATEGIES[self.transcription]
            peak, traffic, launches = record.peak, record.traffic, record.launches
            extra = record.cpu_allocator_extra
        return {
            "peak": peak,
            "traffic": traffic,
            "launches": launches,
            "cpu_allocator_extra": extra,
        }


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

_VLLM_PARAMETERS = ("cache_permute_indices", "w13_weight", "w2_weight")
#: vLLM's converter in its releases, oldest first (docs/engines.md: every release read). The
#: first form whose ``matches`` holds is the installed one.
VLLM_FORMS = (
    Form(
        "per-expert",
        "0.16.0 to 0.23.0",
        "legacy",
        inplace=False,
        # Its caller swaps w13 to [w3; w1] first (a full copy), as ``legacy`` does.
        matches=lambda code: code.parameters == _VLLM_PARAMETERS,
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
    ),
    Form(
        "in place (#54699)",
        "0.31.0 to 0.33.0",
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
    ),
)


def vllm_form() -> Form | str:
    """The form of the installed vLLM's converter, read from its code; or why there is none."""
    code = read_function(VLLM)
    if isinstance(code, str):
        return code
    for form in VLLM_FORMS:
        if form.matches(code):
            return form
    known = "; ".join(f"{f.name} ({f.releases})" for f in VLLM_FORMS)
    return (
        f"vllm {VLLM.version}'s {VLLM.function} takes ({', '.join(code.parameters)}): "
        f"no form the adapter knows ({known})"
    )


# Both engines hand FlashInfer a dict cache keyed by shape but not device: one per device here, so
# that meta indices (memory measurement) never reach a CPU or CUDA call.
_PERMUTE_CACHES: dict[tuple[str, torch.device], dict] = {}
#: The form ``vllm`` is registered with (None: not registered).
_VLLM_FORM: list[Form | None] = [None]


def registered_form(engine: Engine) -> Form | None:
    """The form ``engine``'s adapter is registered with, where its engine has forms (vLLM)."""
    return _VLLM_FORM[0] if engine.strategy == VLLM.strategy else None


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` lives in ``b``'s storage (also on meta, where every address is 0)."""
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


def _vllm(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``convert_moe_weights_to_flashinfer_trtllm_block_layout``, as installed, called as
    vLLM's caller (``fused_moe/oracle/unquantized.py::convert_to_unquantized_kernel_format``)
    calls it in the form read from its code (``VLLM_FORMS``).

    Takes w13 in checkpoint ``[w1; w3]`` order. The per-expert form (0.16.0 to 0.23.0) is called
    after vLLM's own ``swap_w13_to_w31`` (a full copy, as its caller does) and converts gated
    layers only (``NotImplementedError`` otherwise, before anything is read); the later forms take
    ``is_gated_act_gemm`` and fold the swap into their index. vLLM's caller passes a fresh
    permute cache per layer; here the cache is kept per device, so a measured call finds the
    indices cached, as for every strategy.

    The preallocated (#45589, 0.24.0 to 0.30.0) and per-expert forms return new tensors; the
    in-place form (#54699, 0.31.0 on) returns vLLM's 4-D bf16 views of the inputs' storages
    (``data_ptr`` unchanged). A result that is not what the form says raises ``RuntimeError``.
    Figures: the form's transcription's (``legacy``, ``preallocated``); in place (vLLM 0.33.0):
    the one-expert scratch, and gated, per expert, the swap folded into a new index,
    ``(P + M/2) % M`` (two int64 temporaries), where the ``inplace`` transcription reads a
    cached folded index, so traffic and launches add ``4 E X13`` in ``2E``. On CPU the allocator
    also sees ``index_select``'s hidden expert copy.
    """
    form = _VLLM_FORM[0]
    assert form is not None, "vllm is called only when registered"
    if form.gated_only and not gated:
        raise NotImplementedError(
            f"vllm {VLLM.version} converts gated w13 only ({form.name} form): {form.gated_only}"
        )
    module, name = VLLM.resolve()
    cache = _PERMUTE_CACHES.setdefault((VLLM.strategy, w13.device), {})
    function = getattr(module, name)
    with contextlib.redirect_stdout(sys.stderr):
        if form.gated_only:
            got = function(cache, module.swap_w13_to_w31(w13), w2)
        else:
            got = function(cache, w13, w2, is_gated_act_gemm=gated)
    aliased = _same_storage(got[0], w13) and _same_storage(got[1], w2)
    if aliased != form.inplace:
        raise RuntimeError(
            f"vllm {VLLM.version}'s {VLLM.function} returned "
            f"{'views of its input' if aliased else 'new tensors'}, but its code read as the "
            f"{form.name} form: the adapter's reading of its code (VLLM_FORMS) is wrong"
        )
    return got


def register_vllm() -> Form | None:
    """Register ``vllm`` with the form of the installed vLLM's converter (read from its code).

    Where vLLM is not installed, or its function cannot be called, the record goes to
    ``UNAVAILABLE`` with what is missing (the newest form's figures where none was read).
    Called on import; again by the tests after they install a fake vLLM. Returns the form.
    """
    form = vllm_form() if VLLM.installed else None
    found = form if isinstance(form, Form) else None
    _VLLM_FORM[0] = found
    shown = found or VLLM_FORMS[-1]
    register(
        VLLM.strategy,
        origin=f"vLLM as installed (figures of its {shown.name} form, {shown.releases})",
        inplace=shown.inplace,
        needs="vllm, flashinfer-python" + (f" ({form})" if isinstance(form, str) else ""),
        available=found is not None,
        **shown.record_figures(),
    )(_vllm)
    return found


register_vllm()


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
    form = registered_form(engine)
    results = []
    for gated in (True, False) if form is None or not form.gated_only else (True,):
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
    if form is not None and form.gated_only:
        detail += f"; gated=False: n/a, {form.gated_only}"
    identical = all(all(same) and contract for _, same, contract in results)
    return EngineCheck(
        engine, engine.version, identical, f"{detail} (against FlashInfer's helpers)"
    )
