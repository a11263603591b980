"""``python -m moe_convert``: the catalog, verification against FlashInfer, measurement, replay."""

from __future__ import annotations

import argparse
import sys

import torch

from . import reference
from .shapes import CATALOG, LayerShape, catalog_shapes, layer_shape, shape_from_hf_config
from .strategies import INPLACE, STRATEGIES, convert

__all__ = ["main", "resolve_shape"]

MiB = 2**20


def resolve_shape(args: argparse.Namespace) -> LayerShape:
    """The layer shape named by ``--model``/``--tp`` (catalog name or config.json path) or by
    explicit ``--experts --hidden --intermediate``, with ``--experts`` limiting a model's experts."""
    if args.model is None:
        if None in (args.experts, args.hidden, args.intermediate):
            raise SystemExit("give --model NAME [--tp N], or all of --experts, --hidden, --intermediate")
        return LayerShape("explicit", 1, args.experts, args.hidden, args.intermediate, 1, args.gated)
    if args.model in CATALOG:
        shape = layer_shape(args.model, args.tp)
    else:
        shape = shape_from_hf_config(args.model, args.tp)
    return shape.with_experts(args.experts) if args.experts else shape


def _add_shape_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help=f"catalog name ({', '.join(CATALOG)}) or a config.json path")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--experts", type=int, help="number of experts (limits a catalog model's)")
    parser.add_argument("--hidden", type=int, help="hidden size H (explicit shape)")
    parser.add_argument("--intermediate", type=int, help="intermediate size I per rank (explicit shape)")
    parser.add_argument("--no-gated", dest="gated", action="store_false",
                        help="non-gated activation (ReLU2): w13 is [E, I, H]")


def _strategies(names: str) -> list[str]:
    if names == "all":
        return sorted(STRATEGIES)
    chosen = names.split(",")
    unknown = [n for n in chosen if n not in STRATEGIES]
    if unknown:
        raise SystemExit(f"unknown strategy {', '.join(unknown)}; valid: all, {', '.join(sorted(STRATEGIES))}")
    return chosen


def cmd_shapes(args: argparse.Namespace) -> int:
    print(f"{'model':<18} {'tp':>2}  {'w13 per rank':<20} {'w2 per rank':<20} {'MiB/layer':>9} "
          f"{'layers':>6} {'GiB/rank':>8}  valid")
    for shape in catalog_shapes():
        status = "yes" if shape.valid else f"no: {shape.invalid_reason}"
        print(f"{shape.model:<18} {shape.tp:>2}  {str(list(shape.w13_shape)):<20} "
              f"{str(list(shape.w2_shape)):<20} {shape.layer_bytes / MiB:>9.1f} "
              f"{shape.moe_layers:>6} {shape.model_bytes / 2**30:>8.2f}  {status}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    shape = resolve_shape(args)
    if reference.AVAILABLE:
        oracle_name = "FlashInfer's helpers"
        oracle = lambda w13, w2: reference.flashinfer_reference(w13, w2, gated=shape.gated)  # noqa: E731
    else:
        oracle_name = "legacy (flashinfer-python is not installed)"
        oracle = lambda w13, w2: convert(w13.clone(), w2.clone(), strategy="legacy", gated=shape.gated)  # noqa: E731
    print(f"verify {shape.label}: w13 {list(shape.w13_shape)}, w2 {list(shape.w2_shape)}, "
          f"gated={shape.gated}, device {args.device}; against {oracle_name}")
    w13, w2 = reference.random_weights(shape.w13_shape, shape.w2_shape, seed=args.seed, device=args.device)
    want13, want2 = oracle(w13, w2)
    failed = 0
    for name in _strategies(args.strategy):
        in13, in2 = w13.clone(), w2.clone()
        got13, got2 = convert(in13, in2, strategy=name, gated=shape.gated)
        same = [torch.equal(got.view(torch.uint8), want.view(torch.uint8))
                for got, want in ((got13, want13), (got2, want2))]
        aliased = got13.data_ptr() == in13.data_ptr() and got2.data_ptr() == in2.data_ptr()
        alias_ok = aliased == (name in INPLACE)
        ok = all(same) and alias_ok
        failed += not ok
        print(f"  {name:<16} w13 {'ok' if same[0] else 'MISMATCH'}  w2 {'ok' if same[1] else 'MISMATCH'}"
              f"  {'in place' if aliased else 'new tensors'}{'' if alias_ok else ' (WRONG: contract says otherwise)'}")
    print("all byte-identical" if not failed else f"{failed} strategies FAILED")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m moe_convert", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("shapes", help="print the model-shape catalog")
    p.set_defaults(func=cmd_shapes)

    p = sub.add_parser("verify", help="check every strategy byte for byte against FlashInfer's helpers")
    _add_shape_args(p)
    p.add_argument("--strategy", default="all", help="NAME[,NAME...] or all (default)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_verify)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
