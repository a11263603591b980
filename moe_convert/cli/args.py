"""The arguments of ``python -m moe_convert`` (``cli.commands``): their types, the rules across
them, and the shape they name.

An argument type raises ``ArgumentTypeError``, which argparse reports as ``argument --X:
MESSAGE`` (exit 2); a rule across arguments raises ``UsageError``, which ``cli.main`` hands to
the subcommand's ``parser.error``. Every message is one line: what was wrong, the value, what
is accepted.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import torch

from ..formats.catalog import CATALOG, MAX_SIZE, ModelSpec, spec_from_hf_config
from ..formats.engines import UNCALLABLE
from ..formats.records import FORMATS
from ..formats.registry import REGISTRY, UNAVAILABLE, strategies
from ..formats.shape import LayerShape
from ..units import format_bytes as _bytes

__all__ = [
    "Parser",
    "UsageError",
    "add_command",
    "add_work_args",
    "bounded_int",
    "check_fits",
    "device_choice",
    "ep_size",
    "format_name",
    "gib_amount",
    "max_split_list",
    "resolve_shape",
    "resolve_shapes",
    "resolve_strategies",
    "strategy_list",
]


class UsageError(Exception):
    """Arguments that cannot work together; ``main`` prints it as a usage error (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse with every usage error on one line, ``PROG: error: MESSAGE`` (exit 2); the
    usage block it would print first is what ``--help`` shows. ``moe_bench.argparsing`` has
    its own for ``moe-bench``, which starts without torch (any ``moe_convert`` import loads it)
    and must not depend on this library's command line. No abbreviations, as there: a flag has
    one spelling (``--exp`` is not ``--experts``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# Argument types: argparse reports their ArgumentTypeError as "argument --X: MESSAGE", exit 2.


def bounded_int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            accepted = (
                f"an integer >= {minimum}"
                if maximum is None
                else f"an integer from {minimum} to {maximum}"
            )
            raise argparse.ArgumentTypeError(f"{text!r} is not {accepted}")
        return value

    return parse


def gib_amount(*, zero_ok: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a finite number of GiB {'>= 0' if zero_ok else '> 0'} "
                "(e.g. 139.5)"
            )
        return value

    return parse


def strategy_list(text: str) -> list[str] | None:
    """``all`` (``None``: every strategy of the shape's format, ``resolve_strategies``) or
    ``NAME[,NAME...]`` of strategies registered here, of any format."""
    if text == "all":
        return None
    names = text.split(",")
    uncallable = [name for name in names if name in UNCALLABLE]
    if uncallable:  # an installed engine's function that cannot run here (quantized adapters)
        name = uncallable[0]
        raise argparse.ArgumentTypeError(f"strategy {name!r} cannot run here: {UNCALLABLE[name]}")
    absent = [UNAVAILABLE[name] for name in names if name in UNAVAILABLE]
    if absent:  # known, but what it needs is missing here: say what
        raise argparse.ArgumentTypeError(
            f"strategy {absent[0].name!r} cannot run here: it needs {absent[0].needs}"
        )
    unknown = [name for name in names if name not in REGISTRY]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown strategy {', '.join(map(repr, unknown))}; valid: all, or a comma-separated "
            f"list of {', '.join(sorted(REGISTRY))}"
        )
    return names


def ep_size(text: str) -> int | str:
    """``--ep`` where several shapes can run (``refit``): an integer, checked against the model
    by ``resolve_shape``, or ``all`` (``resolve_shapes``)."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or all") from None


def format_name(text: str) -> str:
    """A key of ``FORMATS``: the format of an explicit or config.json shape."""
    if text not in FORMATS:
        raise argparse.ArgumentTypeError(f"unknown format {text!r}; formats: {', '.join(FORMATS)}")
    return text


def device_choice(*kinds: str) -> Callable[[str], str]:
    """A torch device string of one of ``kinds`` that this machine has."""

    def parse(text: str) -> str:
        try:
            device = torch.device(text)
        except RuntimeError:
            device = None
        if device is None or device.type not in kinds:
            raise argparse.ArgumentTypeError(f"{text!r}: give one of {', '.join(kinds)}")
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                f"(torch {torch.__version__}, built with {build})"
            )
        return text

    return parse


def max_split_list(text: str) -> list[int | None]:
    """``20,25,none`` -> ``[20, 25, None]`` (None: unlimited, PyTorch's default)."""
    values: list[int | None] = []
    for item in text.split(","):
        if item.strip().lower() == "none":
            values.append(None)
        elif item.strip().isdigit() and int(item) >= 20:
            values.append(int(item))
        else:
            raise argparse.ArgumentTypeError(
                f"{item!r} is neither an integer >= 20 (PyTorch's smallest max_split_size_mb) "
                "nor 'none'; e.g. 20,25,32,64,128,none"
            )
    return values


# Rules across arguments: raise UsageError.


def _model_spec(model: str, fmt: str | None) -> ModelSpec:
    """The catalog entry named ``model`` (``fmt``, if given, must be its format), or the geometry
    of the config.json at that path in format ``fmt`` (default BF16)."""
    if model in CATALOG:
        spec = CATALOG[model]
        if fmt is not None and fmt != spec.format:
            raise UsageError(
                f"argument --format: {fmt}: --model {model} is a {spec.format} catalog entry; "
                f"give --format {spec.format} or leave --format out"
            )
        return spec
    if Path(model).exists():
        try:
            return spec_from_hf_config(model, fmt or "bf16")
        except ValueError as error:
            raise UsageError(f"argument --model: {error}") from None
    # Match Hugging Face ids too: "Qwen/Qwen3-30B-A3B" suggests qwen3-30b-a3b.
    known = {
        **{spec.hf_id.lower(): name for name, spec in CATALOG.items()},
        **{name: name for name in CATALOG},
    }
    close = dict.fromkeys(
        known[key] for key in difflib.get_close_matches(model.lower(), known, n=3, cutoff=0.6)
    )
    names = (
        f"closest catalog names: {', '.join(close)}"
        if close
        else f"catalog names: {', '.join(CATALOG)}"
    )
    raise UsageError(
        f"argument --model: {model!r} is no catalog name and no existing file or "
        f"folder; {names}, or a path to a Hugging Face config.json"
    )


def resolve_shape(args: argparse.Namespace) -> LayerShape:
    """The layer shape named by ``--model``/``--tp`` (catalog name or config.json path), a rank's
    share of its experts with ``--ep`` (``ModelSpec.shape``), or explicit ``--experts --hidden
    --intermediate``, with ``--experts`` limiting a model's (or a rank's) experts.
    ``--format`` (default BF16) is the format of an explicit or config.json shape; a catalog
    name has its own, which ``--format`` may only repeat.

    An explicit shape is per rank already, so ``--tp`` and ``--ep`` are rejected with it (rather
    than dividing ``--intermediate`` or ``--experts``, which would make the same numbers mean two
    shapes), and it is not padded: the format's check decides whether it converts. Raises
    ``UsageError`` for any combination that does not describe one shape that can be converted.
    """
    explicit = [
        f"--{name}" for name in ("hidden", "intermediate") if getattr(args, name) is not None
    ]
    explicit += [] if args.gated else ["--no-gated"]
    if args.model is not None:
        if explicit:
            raise UsageError(
                f"{', '.join(explicit)}: for an explicit shape only; --model "
                f"{args.model} has its own sizes: give one or the other"
            )
        spec = _model_spec(args.model, args.format)
        if not spec.valid_tp_sizes:
            raise UsageError(f"argument --model: {args.model}: {spec.tp_sizes_text}")
        try:
            shape = spec.shape(1 if args.tp is None else args.tp)
        except ValueError as error:
            raise UsageError(f"argument --tp: {error}") from None
        blame, fix = f"argument --tp: tp {shape.tp}: ", f" For {args.model}, {spec.tp_sizes_text}."
        if args.ep is not None:
            try:
                shape = spec.shape(shape.tp, args.ep)
            except ValueError as error:
                raise UsageError(f"argument --ep: {error}") from None
            blame = f"argument --ep: ep {shape.ep}: " if shape.ep > 1 else blame
        if args.experts is not None and not 1 <= args.experts <= shape.experts:
            share = f", {shape.experts} on rank 0 at ep {shape.ep}" if shape.ep > 1 else ""
            raise UsageError(
                f"argument --experts: {args.experts}: give 1 to {shape.experts} "
                f"({spec.name} has {spec.experts} experts{share})"
            )
    else:
        instead = {"tp": "per-rank --intermediate (I / TP)", "ep": "rank's --experts (E / EP)"}
        for flag in instead:
            if getattr(args, flag) is not None:
                raise UsageError(
                    f"argument --{flag}: --{flag} {getattr(args, flag)} applies to --model "
                    f"only; with an explicit shape, give the {instead[flag]} instead"
                )
        missing = [
            f"--{name}"
            for name in ("experts", "hidden", "intermediate")
            if getattr(args, name) is None
        ]
        if missing:
            raise UsageError(
                f"give --model NAME [--tp N], or all of --experts, --hidden, "
                f"--intermediate (missing: {', '.join(missing)})"
            )
        if not 1 <= args.experts <= MAX_SIZE:
            raise UsageError(f"argument --experts: {args.experts}: give 1 to {MAX_SIZE}")
        shape = LayerShape(
            "explicit",
            1,
            args.experts,
            args.hidden,
            args.intermediate,
            1,
            args.gated,
            format=args.format or "bf16",
        )
        blame, fix = "", ""
    if args.experts is not None:
        shape = shape.with_experts(args.experts)
    error = shape.conversion_error
    if error is not None:
        raise UsageError(
            f"{blame}{shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)} "
            f"cannot be converted: {error}{fix}"
        )
    return shape


def resolve_shapes(args: argparse.Namespace) -> list[LayerShape]:
    """``[resolve_shape(args)]``, or with ``--ep all`` the model's shape at EP 1 and at each of
    its ``ModelSpec.ep_sizes`` (those of 2 to 64 that divide E), in that order."""
    if args.ep != "all":
        return [resolve_shape(args)]
    if args.model is None or args.tp is not None:
        raise UsageError(
            "argument --ep: all: the EPs of a --model, each rank holding whole experts: give "
            "--model NAME and no --tp (nor explicit sizes)"
        )
    eps = (1, *_model_spec(args.model, args.format).ep_sizes)
    return [resolve_shape(argparse.Namespace(**{**vars(args), "ep": ep})) for ep in eps]


def resolve_strategies(shape: LayerShape, names: list[str] | None) -> list[str]:
    """The strategies ``--strategy`` names for ``shape`` (``strategy_list``'s; ``None``: every
    one of its format's); ``UsageError`` for a strategy of another format."""
    valid = sorted(strategies(shape.format))
    if names is None:
        return valid
    other = [name for name in names if name not in valid]
    if other:
        raise UsageError(
            f"argument --strategy: {', '.join(map(repr, other))} cannot convert {shape.label} "
            f"(format {shape.fmt.title}); its strategies: all, or a comma-separated list of "
            f"{', '.join(valid)}"
        )
    return names


def check_fits(shape: LayerShape, device: str, layers: int) -> None:
    """``UsageError`` unless ``layers`` copies of the layer fit in ``device``'s total memory: a
    lower bound (strategies' transients come on top), so that a shape that can never run fails
    now rather than out of memory after minutes. Nothing to check on meta."""
    kind = torch.device(device).type
    if kind == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    elif kind == "cuda":
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    else:
        return
    need = layers * shape.layer_bytes
    if need > total:
        fits = shape.experts * total // need
        raise UsageError(
            f"{shape.label} with {shape.experts} experts needs at least {_bytes(need)} on {device} "
            f"({layers} copies of the {_bytes(shape.layer_bytes)} layer), "
            f"which has {_bytes(total)}: "
            + (f"give --experts {fits} or fewer" if fits else "give a smaller shape")
            + (", or a larger --tp" if shape.model != "explicit" else "")
        )


def add_command(
    sub: argparse._SubParsersAction,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help: str,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:  # noqa: A002
    parser = sub.add_parser(name, help=help, description=help, aliases=list(aliases))
    parser.set_defaults(func=handler, parser=parser)
    return parser


def add_work_args(parser: argparse.ArgumentParser, *, ep_all: bool = False) -> None:
    """The shape, the strategies and --quiet: what every command that converts takes;
    ``ep_all``: ``--ep all`` too, for a command that runs several shapes (``resolve_shapes``)."""
    parser.add_argument(
        "--model",
        help=f"catalog name ({', '.join(CATALOG)}) or a config.json path",
    )
    parser.add_argument("--tp", type=int, help="tensor-parallel size, with --model (default 1)")
    parser.add_argument(
        "--ep",
        type=ep_size if ep_all else int,
        help="expert-parallel size, with --model and no --tp: one rank's share of the experts, "
        "each whole" + (" (all: EP 1 and each of 2 to 64 that divides E)" if ep_all else ""),
    )
    parser.add_argument(
        "--experts", type=int, help="number of experts (1 to the model's E, to limit a model's)"
    )
    parser.add_argument(
        "--hidden", type=bounded_int(1, MAX_SIZE), help="hidden size H (explicit shape)"
    )
    parser.add_argument(
        "--intermediate",
        type=bounded_int(1, MAX_SIZE),
        help="intermediate size I per rank (explicit shape; no --tp)",
    )
    parser.add_argument(
        "--no-gated",
        dest="gated",
        action="store_false",
        help="non-gated activation (ReLU2), explicit shape: w13 is [E, I, H]",
    )
    parser.add_argument(
        "--format",
        type=format_name,
        help=f"the format of an explicit or config.json shape ({', '.join(FORMATS)}; default "
        "bf16); a catalog name has its own",
    )
    parser.add_argument(
        "--strategy", type=strategy_list, default="all", help="NAME[,NAME...] or all (default)"
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (there is none either when stderr is not a terminal)",
    )
