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

The mechanism serves every format: an ``Engine`` record per (engine function, format) with its
``Form``s, ``register_engine`` (the BF16 registry or ``QUANT_STRATEGIES``), ``call_engine``,
``check_engine`` (against FlashInfer's helpers or the format's ``-legacy``);
``moe_convert.formats.quant.engines`` registers vLLM's quantized preparations on it.

The engines log on import and while converting, to stdout in vLLM 0.24.0 to 0.30.0: both run
with ``sys.stdout`` sent to stderr (``call_engine``), so ``--json`` output stays JSON lines.

Both engines import FlashInfer inside the converted function: they need flashinfer-python too.
The transcriptions of the same code, which need neither, are ``legacy``, ``preallocated`` and
``inplace`` (vLLM's three forms) and ``sglang`` in ``moe_convert.formats.bf16.strategies``.
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

from ...formulas import Formula
from ..layout import block_layout_view, swap_w13_to_w31
from ..records import format_record
from ..registry import STRATEGIES, convert, register
from ..shape import LayerShape
from . import strategies  # noqa: F401 (the transcriptions' records, whose figures forms reuse)
from .inputs import random_weights
from .reference import AVAILABLE as FLASHINFER_AVAILABLE
from .reference import flashinfer_reference

__all__ = [
    "CHECK_EXPERTS",
    "CHECK_HIDDEN",
    "CHECK_INTERMEDIATE",
    "ENGINES",
    "UNCALLABLE",
    "VLLM_FORMS",
    "Engine",
    "EngineCheck",
    "Form",
    "FunctionCode",
    "call_engine",
    "check_engine",
    "check_form",
    "engine_form",
    "figures_of",
    "read_function",
    "register_engine",
    "register_vllm",
    "registered_form",
    "same_storage",
]


@dataclass(frozen=True)
class FunctionCode:
    """What the adapter reads of an engine function's source: no import, just ``ast``."""

    parameters: tuple[str, ...]  # in order, positional and keyword
    # Each name called in its body (nested functions included: ``copy_``) -> the most arguments
    # one of those calls passes.
    calls: dict[str, int]


@dataclass(frozen=True)
class Form:
    """One form an engine function has had across releases, told by its code (``matches``)."""

    name: str
    releases: str  # the releases read that have it
    transcription: str  # the strategy that transcribes it
    inplace: bool
    matches: Callable[[FunctionCode], bool]
    # Its figures (peak, traffic, launches, cpu_allocator_extra), as registered; None: not
    # stated (measured only).
    figures: tuple[Formula, Formula, Formula, Formula] | None = None
    gated_only: str = ""  # why a non-gated w13 cannot be converted ("": it can)
    # Its memory contract, as a strategy's docstring states one ("In place: ..." or "Out of
    # place: ...", then "Peak transient: ..."): the registered adapter's docstring ends with it.
    contract: str = ""

    def record_figures(self) -> dict[str, Formula | None]:
        """The keyword arguments of ``register`` for this form's figures."""
        peak, traffic, launches, extra = self.figures or (None, None, None, None)
        figures = dict(peak=peak, traffic=traffic, launches=launches)
        return figures if extra is None else {**figures, "cpu_allocator_extra": extra}


def figures_of(transcription: str) -> tuple[Formula, Formula, Formula, Formula]:
    """The figures of the registered strategy ``transcription``: a form that runs its code."""
    record = STRATEGIES[transcription]
    return record.peak, record.traffic, record.launches, record.cpu_allocator_extra


@dataclass(frozen=True)
class Engine:
    """An installed engine's converter, registered as the strategy ``strategy``."""

    strategy: str  # registry name of the adapter
    distribution: str  # the engine's package (importlib.metadata name)
    module: str  # where the called function lives
    function: str  # what the adapter calls, qualified within ``module``
    transcription: str  # the strategy that transcribes it (its newest form)
    import_first: str | None = None  # a module the engine needs imported before ``module``
    format: str = "bf16"  # the weights it converts: a key of records.FORMATS
    # The forms its function has had, oldest first, told by its code (``Form.matches``); none:
    # the adapter is registered where the engine is installed, without reading its code.
    forms: tuple[Form, ...] = ()
    cuda_only: str = ""  # why its function runs on CUDA only ("": it runs anywhere)

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
            calls: dict[str, int] = {}
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name)):
                    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
                    calls[name] = max(calls.get(name, 0), len(call.args) + len(call.keywords))
            return FunctionCode(tuple(names), calls)
    return f"{engine.distribution} {engine.version} has no {engine.function} in {engine.module}"


def engine_form(engine: Engine) -> Form | str:
    """The form of ``engine``'s function as installed, read from its code; or a line saying why
    the adapter cannot call it (absent, or a signature of no form it knows)."""
    code = read_function(engine)
    if isinstance(code, str):
        return code
    for form in engine.forms:
        if form.matches(code):
            return form
    known = "; ".join(f"{f.name} ({f.releases})" for f in engine.forms)
    return (
        f"{engine.distribution} {engine.version}'s {engine.function} takes "
        f"({', '.join(code.parameters)}): no form the adapter knows ({known})"
    )


#: strategy -> the form its adapter is registered with (read from the installed engine's code).
_FORMS: dict[str, Form] = {}
#: strategy -> why the installed engine's function cannot be called (a quantized adapter's; a
#: BF16 one's is its ``UNAVAILABLE`` record's ``needs``).
UNCALLABLE: dict[str, str] = {}


def registered_form(engine: Engine) -> Form | None:
    """The form ``engine``'s adapter is registered with; None where it is not registered or its
    engine has no forms."""
    return _FORMS.get(engine.strategy)


def register_engine(engine: Engine, adapter: Callable, *, needs: str) -> Form | None:
    """Register ``adapter`` as ``engine.strategy`` with the form of the installed function.

    The form is read from the engine's code (``engine_form``); its figures and whether it works
    in place go on the record. Where the engine is not installed or its function cannot be
    called, the record goes to ``UNAVAILABLE`` (a quantized one's to ``QUANT_UNAVAILABLE``),
    ``needs`` saying what is missing (with the newest form's figures; a quantized engine's
    ``UNCALLABLE`` says why too). Called on import, and again by the tests after they install
    a fake engine. Returns the form.
    """
    from ..quant.registry import register_quant

    form = engine_form(engine) if engine.installed else None
    if isinstance(form, Form) and engine.cuda_only and not torch.cuda.is_available():
        form = f"needs CUDA: {engine.cuda_only}"
    found = form if isinstance(form, Form) else None
    _FORMS.pop(engine.strategy, None)
    UNCALLABLE.pop(engine.strategy, None)
    if found:
        _FORMS[engine.strategy] = found
    elif isinstance(form, str):
        UNCALLABLE[engine.strategy] = form
    shown = found or engine.forms[-1]
    origin = f"{engine.distribution} as installed ({shown.name} form, {shown.releases})"

    def adapter_of_the_form(*args):
        return adapter(*args)

    doc = getattr(adapter, "func", adapter).__doc__  # a partial's: its function's
    adapter_of_the_form.__doc__ = f"{doc}\n\nAs registered, {shown.name}: {shown.contract}"
    if engine.format == "bf16":
        register(
            engine.strategy,
            origin=origin,
            inplace=shown.inplace,
            needs=needs + (f" ({form})" if isinstance(form, str) else ""),
            available=found is not None,
            **shown.record_figures(),
        )(adapter_of_the_form)
    else:
        figures = shown.record_figures()
        figures.pop("cpu_allocator_extra", None)
        register_quant(
            engine.strategy,
            inplace=shown.inplace,
            origin=origin,
            needs=needs + (f" ({form})" if isinstance(form, str) else ""),
            available=found is not None,
            **figures,
        )(adapter_of_the_form)
    return found


def call_engine(engine: Engine, *args: Any, **kwargs: Any) -> Any:
    """Call ``engine``'s function as installed with these arguments, whatever it prints going to
    stderr (vLLM 0.24.0 to 0.30.0 log to stdout), so that ``--json`` output stays JSON lines."""
    owner, name = engine.resolve()
    with contextlib.redirect_stdout(sys.stderr):
        return getattr(owner, name)(*args, **kwargs)


def check_form(engine: Engine, form: Form, aliased: bool) -> None:
    """Raise ``RuntimeError`` where a result aliases its input (``aliased``) and ``form`` says
    otherwise: the adapter's reading of the code is then wrong, and never believed silently."""
    if aliased != form.inplace:
        raise RuntimeError(
            f"{engine.distribution} {engine.version}'s {engine.function} returned "
            f"{'views of its input' if aliased else 'new tensors'}, but its code read as the "
            f"{form.name} form: the adapter's reading of its code is wrong"
        )


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` lives in ``b``'s storage (also on meta, where every address is 0)."""
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


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
#: Every BF16 engine with an adapter, installed here or not (the quantized ones:
#: ``moe_convert.formats.quant.engines.QUANT_ENGINES``).
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


def _bf16_case(engine: Engine, gated: bool, device: torch.device | str) -> tuple[list, bool]:
    """``([(name, got, want)] per weight, aliased)``: the adapter against FlashInfer's helpers."""
    rows13 = 2 * CHECK_INTERMEDIATE if gated else CHECK_INTERMEDIATE
    w13, w2 = random_weights(
        (CHECK_EXPERTS, rows13, CHECK_HIDDEN),
        (CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE),
        device=device,
    )
    want = flashinfer_reference(w13, w2, gated=gated)
    in13, in2 = w13.clone(), w2.clone()
    got = convert(in13, in2, strategy=engine.strategy, gated=gated)
    aliased = got[0].data_ptr() == in13.data_ptr() and got[1].data_ptr() == in2.data_ptr()
    return list(zip(("w13", "w2"), got, want, strict=True)), aliased


def _quant_case(engine: Engine, gated: bool, device: torch.device | str) -> tuple[list, bool]:
    """``([(name, got, want)] per tensor, aliased)``: the adapter against its format's
    ``-legacy``."""
    from ..quant.layer import quant_layer_tensors
    from ..table import convert_quant

    # Twice the BF16 check's H and I: whole 256-wide blocks, as MXINT4 and MXFP8 need.
    shape = LayerShape(
        "check",
        1,
        CHECK_EXPERTS,
        2 * CHECK_HIDDEN,
        2 * CHECK_INTERMEDIATE,
        1,
        gated=gated,
        format=engine.format,
    )
    layer = quant_layer_tensors(shape, device)
    copies = [type(layer)(**{k: t.clone() for k, t in layer.tensors().items()}) for _ in "ab"]
    want = convert_quant(copies[0], strategy=f"{engine.format}-legacy", gated=gated)
    got = convert_quant(copies[1], strategy=engine.strategy, gated=gated)
    pairs = [(name, got.tensors()[name], tensor) for name, tensor in want.tensors().items()]
    return pairs, got.w13.data_ptr() == copies[1].w13.data_ptr()


def check_engine(engine: Engine, *, device: torch.device | str = "cpu") -> EngineCheck:
    """Convert a small random layer with ``engine``'s adapter and compare with the reference:
    FlashInfer's helpers (BF16) or the format's ``-legacy`` transcription (quantized).

    Gated and non-gated, ``CHECK_*`` sizes, on clones of the same random tensors as the
    reference; the result must also alias the input exactly when the adapter is registered in
    place. ``identical`` is ``None`` where the engine is not installed or its function cannot
    run here (a CUDA-only path on CPU, an absent function: ``detail`` says which), and
    ``False`` where it is installed but disagrees, cannot run (flashinfer-python missing: the
    engines import it) or raises (the error is in ``detail``): an installed engine is never
    skipped. A gated-only form is checked gated.
    """
    if not engine.installed:
        return EngineCheck(engine, engine.version, None, f"{engine.distribution} is not installed")
    if engine.strategy in UNCALLABLE:
        return EngineCheck(engine, engine.version, None, f"n/a: {UNCALLABLE[engine.strategy]}")
    if not FLASHINFER_AVAILABLE:
        return EngineCheck(
            engine,
            engine.version,
            False,
            "flashinfer-python is not installed, and the engine's converter imports it",
        )
    form = registered_form(engine)
    case = _bf16_case if engine.format == "bf16" else _quant_case
    gated_only = form.gated_only if form else ""
    if format_record(engine.format).gated_only:
        gated_only = gated_only or "the format is gated only"
    results = []
    for gated in (True, False) if not gated_only else (True,):
        try:
            pairs, aliased = case(engine, gated, device)
        except Exception as error:  # reported, with the engine's own message, as a failed check
            return EngineCheck(
                engine, engine.version, False, f"gated={gated}: {type(error).__name__}: {error}"
            )
        same = [
            (name, g.shape == w.shape and torch.equal(g.view(torch.uint8), w.view(torch.uint8)))
            for name, g, w in pairs
        ]
        inplace = form.inplace if form else STRATEGIES[engine.strategy].inplace
        results.append((gated, same, aliased == inplace))
    detail = "; ".join(
        f"gated={gated}: "
        + ", ".join(f"{name} {'ok' if ok else 'MISMATCH'}" for name, ok in same)
        + ("" if contract else ", in place or not AGAINST its registration")
        for gated, same, contract in results
    )
    if gated_only:
        detail += f"; gated=False: n/a, {gated_only}"
    identical = all(all(ok for _, ok in same) and contract for _, same, contract in results)
    reference = "FlashInfer's helpers" if engine.format == "bf16" else f"{engine.format}-legacy"
    return EngineCheck(engine, engine.version, identical, f"{detail} (against {reference})")
