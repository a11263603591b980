"""The engines' own converters as installed, every format's: the adapter mechanism.

An adapter is a strategy that calls an installed engine's function (vLLM's, SGLang's), never a
transcription: an ``Engine`` record per (engine function, format) with the ``Form``s that
function has had across releases. A version number does not tell which form a commit between
tags carries: the adapter reads the installed function's source (its parameters and the calls
in its body, with ``ast``: no import, ``read_function``) and registers the form it finds, with
that form's figures (``register_engine``); every call then checks that the result aliases the
input exactly when the form says so (``check_form``): where it does not, the adapter misread the
code, which raises; or, under ``form_breaches`` (the engine suite measuring an engine's commit),
that commit's function no longer honours the form its code reads as, which is recorded and the
call's result returned, so that the commit's figures are still measured. A function the adapter
cannot call (absent, or a signature of no known form) leaves the adapter in ``UNAVAILABLE``, its
``needs`` naming what is missing (``UNCALLABLE`` says why, for the engines that have forms).

Each adapter is registered only where its engine is installed (``importlib.util.find_spec``)
and imports the engine on its first call, so that importing ``moe_convert`` (once per asv
benchmark process) does not pay vLLM's 10-13 s import. An engine that is installed but does
not import raises ``ImportError`` with the engine's own error. ``check_engine`` compares an
adapter with its format's reference (``table.reference_conversion``: FlashInfer's helpers for
BF16, the format's ``-legacy`` transcription otherwise) on a small layer; ``python -m
moe_convert engines`` prints it for every engine. docs/engines.md has the engine releases read
and how the adapters were tested against real installs.

The engines log on import and while converting, to stdout in vLLM 0.24.0 to 0.30.0: both run
with ``sys.stdout`` sent to stderr (``call_engine``), so ``--json`` output stays JSON lines.
BF16's adapters are in ``bf16.engines``, the quantized formats' in ``quant.engines``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..formulas import Formula
from .bf16.reference import AVAILABLE as FLASHINFER_AVAILABLE
from .layer import Layer
from .records import format_record
from .registry import REGISTRY, register, result_in_input
from .shape import LayerShape
from .table import convert, layer_tensors, reference_conversion

__all__ = [
    "CHECK_EXPERTS",
    "CHECK_HIDDEN",
    "CHECK_INTERMEDIATE",
    "UNCALLABLE",
    "Engine",
    "EngineCheck",
    "Form",
    "FunctionCode",
    "call_engine",
    "check_engine",
    "check_form",
    "engine_form",
    "figures_of",
    "form_breaches",
    "gated_only",
    "read_function",
    "register_engine",
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
    # The same, read, of each function of its module that its body calls (one level down):
    # what a form told by a helper's body reads (vLLM 0.34.0's FP8 per-tensor rotation).
    helpers: dict[str, FunctionCode] = field(default_factory=dict)


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
    record = REGISTRY[transcription]
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
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    if engine.function not in functions:
        return f"{engine.distribution} {engine.version} has no {engine.function} in {engine.module}"
    code = _function_code(functions[engine.function])
    helpers = {name: _function_code(functions[name]) for name in code.calls if name in functions}
    return FunctionCode(code.parameters, code.calls, helpers)


def _function_code(node: ast.FunctionDef) -> FunctionCode:
    """A function's parameters and the calls in its body (``FunctionCode``, no helpers)."""
    arguments = node.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    calls: dict[str, int] = {}
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
            calls[name] = max(calls.get(name, 0), len(call.args) + len(call.keywords))
    return FunctionCode(tuple(names), calls)


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


def gated_only(strategy: str) -> str:
    """Why ``strategy`` converts gated layers only, as its engine's installed form does (vLLM's
    per-expert BF16 form, 0.16.0 to 0.23.0; FP8's 0.16.0 rotation): "" for a strategy that
    converts both, or that no engine form registered (a format gated only says so itself,
    ``Format.gated_only``)."""
    form = _FORMS.get(strategy)
    return form.gated_only if form else ""


def register_engine(engine: Engine, adapter: Callable, *, needs: str) -> Form | None:
    """Register ``adapter`` (``(layer, gated) -> Layer``, or BF16's ``(w13, w2, gated)``) as
    ``engine.strategy`` with the form of the installed function.

    The form is read from the engine's code (``engine_form``); its figures and whether it works
    in place go on the record. Where the engine is not installed or its function cannot be
    called, the record goes to ``UNAVAILABLE``, ``needs`` saying what is missing (with the
    newest form's figures; ``UNCALLABLE`` says why too). Called on import, and again by the
    tests after they install a fake engine. Returns the form.
    """
    form = engine_form(engine) if engine.installed else None
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
    register(
        engine.strategy,
        format=engine.format,
        origin=origin,
        inplace=shown.inplace,
        needs=needs + (f" ({form})" if isinstance(form, str) else ""),
        available=found is not None,
        **shown.record_figures(),
    )(adapter_of_the_form)
    return found


def call_engine(engine: Engine, *args: Any, **kwargs: Any) -> Any:
    """Call ``engine``'s function as installed with these arguments, whatever it prints going to
    stderr (vLLM 0.24.0 to 0.30.0 log to stdout), so that ``--json`` output stays JSON lines."""
    owner, name = engine.resolve()
    with contextlib.redirect_stdout(sys.stderr):
        return getattr(owner, name)(*args, **kwargs)


#: Where ``check_form`` records a breach instead of raising it (``form_breaches``); None: raise.
_BREACHES: list[str] | None = None


@contextlib.contextmanager
def form_breaches() -> Iterator[list[str]]:
    """Within the block, a result that does not honour its form is the engine's breach of the
    contract, not the adapter's misreading: ``check_form`` appends its line to the list yielded
    (once each) and lets the call return its result, so the call is measured as it ran. The
    engine suite measures an engine's commits so (``engine_benchmarks``): at a PR head the
    function changed under its code's form. ``python -m moe_convert engines`` does not: there
    a result against the form raises, as the adapter's reading of the code is then wrong."""
    global _BREACHES
    outer, _BREACHES = _BREACHES, []
    try:
        yield _BREACHES
    finally:
        _BREACHES = outer


def check_form(engine: Engine, form: Form, aliased: bool) -> None:
    """Raise ``RuntimeError`` where a result aliases its input (``aliased``) and ``form`` says
    otherwise: the adapter's reading of the code is then wrong, and never believed silently.
    Under ``form_breaches`` the same finding is the engine's breach of its code's form: recorded,
    not raised."""
    if aliased == form.inplace:
        return
    returned = "views of its input" if aliased else "new tensors"
    called = f"{engine.distribution} {engine.version}'s {engine.function}"
    if _BREACHES is None:
        raise RuntimeError(
            f"{called} returned {returned}, but its code read as the {form.name} form: the "
            "adapter's reading of its code is wrong"
        )
    breach = (
        f"{called} no longer honours the {form.name} form its code reads as: it returned {returned}"
    )
    if breach not in _BREACHES:
        _BREACHES.append(breach)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` lives in ``b``'s storage (also on meta, where every address is 0)."""
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


#: The small layer each engine is checked on, gated and not: E = 4, H = 512, I = 256 (whole
#: 256-wide blocks, as MXINT4 and MXFP8 need).
CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE = 4, 512, 256


@dataclass(frozen=True)
class EngineCheck:
    """One engine here: its version and whether its adapter gives the reference's bytes."""

    engine: Engine
    version: str
    identical: bool | None  # byte-identical to the reference, gated and not; None: not installed
    detail: str  # what was compared and how it came out, or why it was not run


def _case(engine: Engine, gated: bool, device: torch.device | str) -> tuple[str, list, bool]:
    """``(reference, [(name, got, want)] per tensor, aliased)``: the adapter against its
    format's reference (``table.reference_conversion``) on clones of one random layer."""
    shape = LayerShape(
        "check",
        1,
        CHECK_EXPERTS,
        CHECK_HIDDEN,
        CHECK_INTERMEDIATE,
        1,
        gated=gated,
        format=engine.format,
    )
    layer = layer_tensors(shape, device)
    reference, reference_of = reference_conversion(shape)
    want = reference_of(layer)
    given = Layer(**{name: tensor.clone() for name, tensor in layer.items()})
    got = convert(given, strategy=engine.strategy, gated=gated)
    pairs = [(name, got[name], tensor) for name, tensor in want.items()]
    return reference, pairs, result_in_input(given, got)


def check_engine(engine: Engine, *, device: torch.device | str = "cpu") -> EngineCheck:
    """Convert a small random layer with ``engine``'s adapter and compare with the reference:
    FlashInfer's helpers (BF16) or the format's ``-legacy`` transcription (quantized).

    Gated and non-gated, ``CHECK_*`` sizes, on clones of the same random tensors as the
    reference; the result must also be written into the input's storage
    (``registry.result_in_input``) exactly when the adapter is registered in place.
    ``identical`` is ``None`` where the engine is not installed or its function cannot be
    called (absent, a signature of no known form: ``detail`` says which), and
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
    only = gated_only(engine.strategy)
    if format_record(engine.format).gated_only:
        only = only or "the format is gated only"
    results = []
    reference = ""
    for gated in (True, False) if not only else (True,):
        try:
            reference, pairs, aliased = _case(engine, gated, device)
        except Exception as error:  # reported, with the engine's own message, as a failed check
            return EngineCheck(
                engine, engine.version, False, f"gated={gated}: {type(error).__name__}: {error}"
            )
        same = [
            (name, g.shape == w.shape and torch.equal(g.view(torch.uint8), w.view(torch.uint8)))
            for name, g, w in pairs
        ]
        inplace = form.inplace if form else REGISTRY[engine.strategy].inplace
        results.append((gated, same, aliased == inplace))
    detail = "; ".join(
        f"gated={gated}: "
        + ", ".join(f"{name} {'ok' if ok else 'MISMATCH'}" for name, ok in same)
        + ("" if contract else ", in place or not AGAINST its registration")
        for gated, same, contract in results
    )
    if only:
        detail += f"; gated=False: n/a, {only}"
    identical = all(all(ok for _, ok in same) and contract for _, same, contract in results)
    return EngineCheck(engine, engine.version, identical, f"{detail} (against {reference})")
