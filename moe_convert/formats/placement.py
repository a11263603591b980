"""Where each checkpoint byte lands in the converted layout, for every format: the moves
(``moves``), a streaming placement of one expert at a time into a preallocated converted
layer (``place_expert``; the registered whole-layer ``streaming`` strategies), and the
in-place inverse (``restore``).

Legend: E experts, M rows of one expert matrix, C one expert's checkpoint bytes of a tensor;
P a row order's index (``rows.row_index``: ``out[r] = in[P[r]]``), Q its inverse (``Q[P[r]] = r``:
where checkpoint row ``i`` lands, ``placement_index``).

Every format's conversion is, per tensor and per expert, one move (``Move``), derived from the
format's record (``format.Format``) by ``moves``: a row order (or none); the layout of the
relaid rows (``rows``: as they are; ``blocks``: BlockMajorK ``[K/128, M, 128]`` bytes;
``swizzle``: the 128x4 scale swizzle, with the row order one permutation of the expert's
elements, ``rows.scale_index``); and an element step: MXINT4's weight bytes XOR 0x88 (its own
inverse), a bf16 bias widened to float32 (its bits become the float32's high half, as
``.to(torch.float32)`` makes them; the inverse reads that half back), block-FP8's scales
clamped (lossy: the inverse leaves them clamped). Each move is thus a permutation of one
expert's elements, Q, and both directions follow from it:

- ``place_expert``: one expert's checkpoint slices as a loader delivers them (``w1`` and ``w3``,
  or ``w13``; ``w2``; scales, biases) copied straight into their places in a converted layer
  (Q's strided copies, ``strided.strided_copies``: one ``copy_`` per slice, two for a whole
  swapped w13): no other expert touched, no scratch but MXINT4's (its slice XOR-ed).
- ``restore``: each expert's converted bytes copied into a scratch of one expert (rows first),
  then copied back by the same strided copies, reversed, into the same storage in checkpoint
  layout: checkpoint-layout views of the converted tensors' own storage, as SGLang 0.5.23's
  ``_restore_trtllm_bf16_canonical_layout`` does for BF16.

Both are exact for every strategy's output of a format, since every strategy of a format
returns the same bytes; ``restore`` needs the checkpoint's bytes to fit the converted
tensors' storage (``view_problem``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..formulas import Formula
from .format import Format
from .layer import Layer
from .layout import BLOCK_K, SHUFFLE_BLOCK_TILE64
from .registry import register
from .rows import block_major_k, row_index, scale_index
from .shape import LayerShape
from .strided import StridedCopy, copy_strided, strided_copies

__all__ = [
    "Move",
    "checkpoint_views",
    "empty_converted",
    "moves",
    "place_expert",
    "place_layer",
    "placement_index",
    "register_streaming",
    "restore",
    "restore_figures",
    "specs_of",
    "streaming",
    "view_problem",
]

# A float32's high 16 bits, a widened bf16's bits, are bytes 2 and 3 of its 4 (little-endian,
# as CPUs and CUDA devices are).
_HIGH_HALF = slice(2, 4)


#: A checkpoint layer's tensors by name as ``(shape, dtype)``: ``LayerShape.tensor_specs``,
#: or ``specs_of(layer)``.
Specs = Mapping[str, tuple[tuple[int, ...], torch.dtype]]


@dataclass(frozen=True)
class Move:
    """What a conversion does to one tensor, per expert (module docstring)."""

    order: str | None  # a key of rows.ROW_ORDERS; None: the rows are kept
    layout: str  # "rows", "blocks" (BlockMajorK) or "swizzle" (128x4, elements)
    dtype: torch.dtype  # the converted tensor's dtype
    xor: int = 0  # every byte XOR-ed with it (0: none); its own inverse
    widen: bool = False  # bf16 -> float32 (biases)
    clamp: float | None = None  # clamped up to it (lossy)

    @property
    def moves_bytes(self) -> bool:
        """Whether the converted bytes differ from the checkpoint's in place."""
        return self.order is not None or self.layout != "rows" or bool(self.xor) or self.widen


def moves(fmt: Format, gated: bool) -> dict[str, Move]:
    """Each tensor's move (``Move``) for a layer of ``fmt``, by the layer's tensor names, read
    from the record: its row orders (``interleaved_w13``, ``shuffle_block``), ``block_major_k``,
    ``converted_weight_dtype``, ``sign_flip``, its scales (``scale_block_rows``: whole rows
    reordered, ``scale_min``; otherwise swizzled, ``relaid_scale_dtype``) and ``has_bias``."""
    tile = "_tile64" if fmt.shuffle_block == SHUFFLE_BLOCK_TILE64 else ""
    if fmt.interleaved_w13:
        order13 = "swap_pairs"
    else:
        order13 = ("swap_halves" if gated else "shuffle") + tile
    order2 = "shuffle" + tile
    weights = "blocks" if fmt.block_major_k else "rows"
    dtype = fmt.converted_weight_dtype or fmt.weight_dtype
    out = {
        "w13": Move(order13, weights, dtype, xor=fmt.sign_flip),
        "w2": Move(order2, weights, dtype, xor=fmt.sign_flip),
    }
    if fmt.scale_block_rows > 1:  # block-FP8: whole rows of blocks, w1/w3 swapped, clamped
        out["w13_scale"] = Move("swap" if gated else None, "rows", fmt.scale_dtype,
                                clamp=fmt.scale_min)  # fmt: skip
        out["w2_scale"] = Move(None, "rows", fmt.scale_dtype, clamp=fmt.scale_min)
    elif fmt.scale_block:
        out["w13_scale"] = Move(order13, "swizzle", fmt.relaid_scale_dtype)
        out["w2_scale"] = Move(order2, "swizzle", fmt.relaid_scale_dtype)
    if fmt.has_bias:
        out["w13_bias"] = Move(order13, "rows", torch.float32, widen=True)
        out["w2_bias"] = Move(order2, "rows", torch.float32, widen=True)
    return out


def _converted_dims(
    dims: tuple[int, ...], dtype: torch.dtype, move: Move, fmt: Format
) -> tuple[int, ...]:
    """The converted tensor's shape, from the checkpoint tensor's ``dims`` and ``dtype``."""
    if move.layout == "blocks":
        experts, rows, cols = dims
        row_bytes = cols * dtype.itemsize
        return (experts, row_bytes // BLOCK_K, rows, BLOCK_K // move.dtype.itemsize)
    if move.layout == "swizzle" and fmt.flat_scales:
        return (dims[0], dims[1] * dims[2])
    return dims


def empty_converted(shape: LayerShape, device: torch.device | str) -> Layer:
    """A converted layer of ``shape`` to place experts into: ``torch.empty`` of every tensor
    the format's strategies return, in their shapes and dtypes. New tensors (the layer's
    converted bytes: the streaming strategy's whole peak)."""
    specs = shape.tensor_specs
    return Layer(
        **{
            name: torch.empty(
                _converted_dims(*specs[name], move, shape.fmt), dtype=move.dtype, device=device
            )  # fmt: skip
            for name, move in moves(shape.fmt, shape.gated).items()
        }
    )


@functools.cache
def placement_index(order: str | None, rows: int, cols: int, swizzle: bool) -> torch.Tensor:
    """Q: where each checkpoint row (``swizzle``: element of the ``[rows, cols]`` scale
    matrix) of one expert lands in the converted expert, int64 ``[rows]`` (``[rows cols]``), on
    CPU; ``order`` None: the rows kept. Cached; never write to it."""
    if order is None:
        return torch.arange(rows * cols if swizzle else rows)
    forward = scale_index(order, rows, cols) if swizzle else row_index(order, rows)
    inverse = torch.empty_like(forward)
    inverse[forward] = torch.arange(forward.numel())
    return inverse


def _rows_view(expert: torch.Tensor, move: Move) -> tuple[torch.Tensor, int]:
    """One expert in checkpoint layout, ``[M, ...]`` or a slice of its rows, as the uint8 view
    its move indexes, and the dim its rows (or elements) lie along."""
    raw = expert.view(torch.uint8)
    if move.widen:  # bf16 [M]: two bytes per row
        return raw.view(-1, 2), 0
    if move.layout == "swizzle":  # one row per element
        return raw.view(-1, expert.element_size()), 0
    if move.layout == "blocks":
        return block_major_k(raw), 1
    return raw, 0


def _converted_view(expert: torch.Tensor, move: Move, rows: int) -> tuple[torch.Tensor, int]:
    """One converted expert's bytes as ``_rows_view``'s layout, checkpoint order replaced by
    the converted order: the same dim, every other dim matching."""
    raw = expert.reshape(-1).view(torch.uint8)
    if move.widen:
        return raw.view(rows, 4)[:, _HIGH_HALF], 0
    if move.layout == "swizzle":
        return raw.view(rows, -1), 0  # reshaped below to one element a row
    if move.layout == "blocks":
        return raw.view(-1, rows, BLOCK_K), 1
    return raw.view(rows, -1), 0


def _element_rows(view: torch.Tensor, move: Move, itemsize: int) -> torch.Tensor:
    return view.reshape(-1, itemsize) if move.layout == "swizzle" else view


@functools.cache
def _copies(move: Move, dims: tuple[int, ...], first: int, count: int) -> tuple[StridedCopy, ...]:
    """The strided copies of checkpoint rows ``first`` to ``first + count`` of one expert of
    checkpoint shape ``dims`` (``[M, ...]``; a swizzled scale's positions are its elements, by
    row) into the converted expert: ``strided_copies`` of that part of Q. Cached."""
    swizzle = move.layout == "swizzle"
    per_row = dims[1] if swizzle else 1
    index = placement_index(move.order, dims[0], per_row, swizzle)
    return strided_copies(index[first * per_row : (first + count) * per_row])


def copies_per_slice(move: Move, halves: int) -> int:
    """``copy_`` calls of one slice of a tensor delivered in ``halves`` (1 or 2): the same at
    every size a format converts (Q's digits are; tests/test_strided.py), counted here on 256
    rows (of 4 scale factors where the scales are swizzled)."""
    dims = (256, 4) if move.layout == "swizzle" else (256,)
    return len(_copies(move, dims, 0, 256 // halves))


def _place(converted: torch.Tensor, slices: list[tuple[int, torch.Tensor]], move: Move,
           dims: tuple[int, ...], itemsize: int) -> None:  # fmt: skip
    """Copy ``slices`` (``(first row, checkpoint rows)``) of one expert whose checkpoint shape
    is ``dims`` (``[M, ...]``) into ``converted``, its converted expert (``_copies``)."""
    rows = dims[0]
    view, dim = _converted_view(converted, move, rows)
    view = _element_rows(view, move, itemsize)
    for first, part in slices:
        source, _ = _rows_view(part, move)
        if move.xor:  # into a scratch of the slice: the loader's tensor is only read
            source = torch.bitwise_xor(source, move.xor)
        copy_strided(view, source, dim, _copies(move, dims, first, part.shape[0]))
    # Both idempotent: a tensor placed in several calls (w1, then w3) repeats them harmlessly.
    if move.widen:  # the float32's low half: zero, as a widened bf16's is
        converted.reshape(-1).view(torch.uint8).view(rows, 4)[:, :2].zero_()
    if move.clamp is not None:
        converted.clamp_(min=move.clamp)


#: The loader's names of a gated w13's halves (and of their scales): ``[w1; w3]``.
_HALVES = {"w13": ("w1", "w3"), "w13_scale": ("w1_scale", "w3_scale")}


def place_expert(converted: Layer, shape: LayerShape, expert: int, **slices: torch.Tensor) -> None:
    """Place one expert's checkpoint slices into ``converted`` (``empty_converted(shape)``, or
    any strategy's conversion of a ``shape`` layer) at ``expert``: each slice's bytes land in
    their converted places, as every strategy of the format puts them; nothing else is written.

    ``slices``, by the layer's tensor names, one expert each in checkpoint layout
    (``w13 [M13, H/epi]``, ``w2 [H, I/epi]``, ``w13_scale``, ..., as ``Layer`` says); a gated
    w13 in ``[w1; w3]`` halves may come as ``w1``, ``w3`` (``[I, H/epi]`` each) and its scales
    as ``w1_scale``, ``w3_scale``, as vLLM's loader delivers shards. Any subset, any order: a
    tensor of the expert is complete once all its rows have come. The slices are read, never
    written. Peak transient: none (Q's strided copies, cached per tensor shape and slice), but
    for MXINT4 the slice being placed (XOR-ed first).
    ``ValueError`` naming the slice for an unknown name, a wrong shape or dtype, an expert out
    of range.
    """
    plan, specs = _expert_layout(shape)
    if not 0 <= expert < shape.experts:
        raise ValueError(f"expert {expert} is out of range: the layer has {shape.experts}")
    grouped: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for name, part in slices.items():
        whole, first = name, 0
        for fused, halves in _HALVES.items():
            if name in halves:
                if not shape.gated or shape.fmt.interleaved_w13:
                    why = "interleaves w1 and w3" if shape.gated else "is one matrix (not gated)"
                    raise ValueError(f"{name}: this {shape.fmt.name} w13 {why}; pass {fused}=")
                whole, first = fused, halves.index(name) * specs[fused][0][1] // 2
        if whole not in plan:
            raise ValueError(
                f"{name}: a {shape.fmt.name} layer has no such tensor; it has "
                f"{', '.join(plan)} (w1, w3 for a gated w13's halves)"
            )
        dims, dtype = specs[whole]
        want = (dims[1] // (2 if whole != name else 1), *dims[2:])
        if tuple(part.shape) != want or part.dtype != dtype:
            raise ValueError(
                f"{name} (shape {tuple(part.shape)}, dtype {part.dtype}): one expert's slice "
                f"of {whole} is {list(want)} {dtype}. Fix: pass {whole}[{expert}] as the "
                "checkpoint stores it"
            )
        grouped.setdefault(whole, []).append((first, part))
    for name, parts in grouped.items():
        dims, dtype = specs[name]
        _place(converted[name][expert], parts, plan[name], dims[1:], dtype.itemsize)


@functools.cache
def _expert_layout(shape: LayerShape) -> tuple[dict[str, Move], Specs]:
    """``moves`` and ``tensor_specs`` of a ``shape`` layer, cached (``place_expert`` reads them
    on every call). Never write to them."""
    return moves(shape.fmt, shape.gated), shape.tensor_specs


def _shape_of(layer: Layer, gated: bool, fmt: Format) -> LayerShape:
    """The ``LayerShape`` of a checkpoint-layout ``layer`` of format ``fmt`` (one rank)."""
    experts, hidden, packed = layer.w2.shape
    return LayerShape("placed", 1, experts, hidden, packed * fmt.elements_per_item, 1, gated,
                      fmt.name)  # fmt: skip


def place_layer(converted: Layer, layer: Layer, gated: bool, fmt: Format) -> Layer:
    """Every expert of ``layer`` (checkpoint layout, format ``fmt``) placed into ``converted`` by
    ``place_expert``, as a loader would deliver them: a gated ``[w1; w3]`` w13 and its scales as
    their halves ``w1``, ``w3``. Returns ``converted``, written in its own storage; ``layer`` is
    read. Peak transient: ``place_expert``'s (none; MXINT4: one slice)."""
    shape = _shape_of(layer, gated, fmt)
    split = gated and not fmt.interleaved_w13
    for e in range(shape.experts):
        slices = {}
        for name, tensor in layer.items():
            if split and name in _HALVES:
                first, second = tensor[e].chunk(2)
                slices.update(zip(_HALVES[name], (first, second), strict=True))
            else:
                slices[name] = tensor[e]
        place_expert(converted, shape, e, **slices)
    return converted


def streaming(layer: Layer, gated: bool, fmt: Format) -> Layer:
    """The whole-layer form of ``place_expert``: the converted layer allocated
    (``empty_converted``), then each expert's slices placed as they would arrive
    (``place_layer``).

    Out of place: new tensors; the input is unchanged. Peak transient: the converted layer,
    nothing else."""
    converted = empty_converted(_shape_of(layer, gated, fmt), layer.w13.device)
    return place_layer(converted, layer, gated, fmt)


def specs_of(layer: Layer) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """``layer``'s tensors as ``Specs``: no byte read."""
    return {name: (tuple(t.shape), t.dtype) for name, t in layer.items()}


def _nbytes(dims: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(dims) * dtype.itemsize


def view_problem(held: Layer, checkpoint: Specs) -> str | None:
    """Why ``held`` (a converted layer) cannot be viewed in the ``checkpoint`` layout on its own
    storage, or ``None``: a tensor of ``checkpoint`` that ``held`` lacks, or whose storage holds
    fewer bytes from the held tensor's first byte than the checkpoint tensor needs."""
    for name, (dims, dtype) in checkpoint.items():
        if name not in held:
            return f"{name}: the converted layer has none to view"
        tensor, need = held[name], _nbytes(dims, dtype)
        room = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if room < need:
            return (
                f"{name}: its storage holds {room} bytes from the converted tensor on, the "
                f"checkpoint's {tuple(dims)} {dtype} needs {need}"
            )
    return None


def _view_as(held: torch.Tensor, dims: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    # The whole storage as bytes (a view), then the checkpoint tensor's bytes from held's start.
    whole = held.as_strided((held.untyped_storage().nbytes() // held.element_size(),), (1,), 0)
    start = held.storage_offset() * held.element_size()
    end = start + _nbytes(dims, dtype)
    return whole.view(torch.uint8)[start:end].view(dtype).view(dims)


def checkpoint_views(held: Layer, checkpoint: Specs) -> Layer:
    """Views of ``held``'s storages in the ``checkpoint`` layout: for each tensor of
    ``checkpoint`` (``Specs``), a contiguous tensor of its shape and dtype on the storage of
    ``held``'s tensor of that name, from that tensor's first byte. A converted tensor larger
    than its checkpoint (MXFP4's float32 biases) holds it in its first bytes.

    No byte is read or written; ``ValueError`` (``view_problem``'s reason) where one cannot be
    made."""
    problem = view_problem(held, checkpoint)
    if problem is not None:
        raise ValueError(f"cannot view the converted layer in checkpoint layout: {problem}")
    return Layer(**{name: _view_as(held[name], *spec) for name, spec in checkpoint.items()})


def restore(converted: Layer, shape: LayerShape) -> Layer:
    """The inverse of every strategy of ``shape``'s format, in place: ``converted`` (any
    strategy's conversion of a ``shape`` layer) turned back into checkpoint layout in its own
    storage, and returned as checkpoint-layout views of it (``checkpoint_views``: the
    checkpoint's shapes and dtypes, ``[w1; w3]`` or gpt-oss's pairs, data pointers unchanged).

    Byte-exact but where the conversion is lossy (block-FP8's scales clamped up to
    ``Format.scale_min`` stay so). ``converted``'s own tensors no longer hold the converted
    layout afterwards. Per expert (ascending: a float32 bias's checkpoint is the first half of
    its storage) and tensor: the converted bytes copied into a scratch, rows first, then
    copied into place by ``place_expert``'s strided copies, reversed. Peak transient: the
    scratch, one expert of the largest tensor (``max(S13, S2)``). ``ValueError`` where the
    storage is too small (``view_problem``).
    """
    views = checkpoint_views(converted, shape.tensor_specs)
    plan = {n: m for n, m in moves(shape.fmt, shape.gated).items() if m.moves_bytes}
    device = converted.w13.device
    scratch = torch.empty(max(views[n][0].nbytes for n in plan), dtype=torch.uint8, device=device)
    for e in range(shape.experts):
        for name, move in plan.items():
            checkpoint = views[name][e]
            rows, itemsize = checkpoint.shape[0], checkpoint.element_size()
            source, dim = _converted_view(converted[name][e], move, rows)
            source = source.movedim(dim, 0)  # rows first
            held = scratch[: checkpoint.nbytes].view(source.shape)
            held.copy_(source)
            if move.xor:
                held.bitwise_xor_(move.xor)
            rows_first = _element_rows(held.reshape(held.shape[0], -1), move, itemsize)
            target_rows = _element_rows(checkpoint.view(torch.uint8).view(rows, -1), move,
                                        itemsize)  # fmt: skip
            placed = _copies(move, tuple(checkpoint.shape), 0, rows)
            copy_strided(target_rows, rows_first, 0, tuple(c.inverse for c in placed))
    return views


# The figures, built from the moves as texts of ``moe_convert.formulas``' letters. A tensor's
# letter (its converted bytes), its checkpoint bytes C and its row index over all experts.
_LETTERS = {"w13": "T13", "w2": "T2", "w13_scale": "F13", "w2_scale": "F2",
            "w13_bias": "B13", "w2_bias": "B2"}  # fmt: skip


def _checkpoint_bytes(name: str) -> str:
    letter = _LETTERS[name]
    return f"({letter} // 2)" if name.endswith("bias") else letter


def _halves(name: str, fmt: Format, gated: bool) -> int:
    """Slices a loader delivers the tensor of one expert in: 2 for a gated ``[w1; w3]``."""
    return 2 if name in _HALVES and gated and not fmt.interleaved_w13 else 1


def _streaming_texts(fmt: Format, gated: bool) -> tuple[str, str, str]:
    """(peak, traffic, launches) of ``streaming`` by ``measuring.traffic``'s rule: each slice's
    strided copies read and write its bytes (2 C in all, ``copies_per_slice`` launches);
    MXINT4's XOR makes each slice anew (2 C); a bias's low halves are zeroed (C); block-FP8's
    scales clamped in place (2 C)."""
    plan = moves(fmt, gated)
    traffic, launches = [], []
    for name, move in plan.items():
        c, n = _checkpoint_bytes(name), _halves(name, fmt, gated)
        traffic.append(f"{2 + 2 * bool(move.xor)} {c}")
        steps = n * (copies_per_slice(move, n) + bool(move.xor)) + move.widen
        steps += move.clamp is not None
        traffic += [f"{c}"] * move.widen + [f"2 {c}"] * (move.clamp is not None)
        launches.append(str(steps))
    peak = " + ".join(_LETTERS[name] for name in plan)
    if fmt.sign_flip:  # the XOR-ed slice: half of a gated w13, or a w2
        peak += " + max(S13 // 2, S2)" if gated else " + max(S13, S2)"
    return peak, " + ".join(traffic), f"E ({' + '.join(launches)})"


def _restore_texts(fmt: Format, gated: bool) -> tuple[str, str]:
    """(traffic, launches) of ``restore``: per tensor whose bytes move, the copy into the
    scratch (2 C), MXINT4's XOR of it (2 C), the strided copies back (2 C,
    ``copies_per_slice`` of the whole tensor)."""
    traffic, launches = [], []
    for name, move in moves(fmt, gated).items():
        if move.moves_bytes:
            c = _checkpoint_bytes(name)
            traffic.append(f"{4 + 2 * bool(move.xor)} {c}")
            launches.append(str(1 + bool(move.xor) + copies_per_slice(move, 1)))
    return " + ".join(traffic), f"E ({' + '.join(launches)})"


def _formula(fmt: Format, texts) -> Formula:
    gated = texts(fmt, True)
    return Formula(gated, None if fmt.gated_only else texts(fmt, False))


def restore_figures(fmt: Format) -> tuple[Formula, Formula, Formula]:
    """``restore``'s (peak transient, traffic, launches) for a layer of ``fmt``, exact on meta
    by ``moe_convert.measuring``'s rules (tests/test_placement.py)."""
    return (
        Formula("max(S13, S2)"),
        _formula(fmt, lambda f, g: _restore_texts(f, g)[0]),
        _formula(fmt, lambda f, g: _restore_texts(f, g)[1]),
    )


def register_streaming(fmt: Format) -> None:
    """Register ``streaming`` for ``fmt`` as ``<format>-streaming`` (BF16's: ``streaming``), its
    figures built from the format's moves."""
    peak, traffic, launches = (
        _formula(fmt, lambda f, g, i=i: _streaming_texts(f, g)[i]) for i in range(3)
    )
    if fmt.name == "bf16":  # registered on BF16's two weights (registry.register)

        def function(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> Layer:
            return streaming(Layer(w13, w2), gated, fmt)

    else:

        def function(layer: Layer, gated: bool) -> Layer:
            return streaming(layer, gated, fmt)

    function.__doc__ = streaming.__doc__
    register(
        "streaming" if fmt.name == "bf16" else f"{fmt.name}-streaming",
        format=fmt.name,
        inplace=False,
        origin="ours (vLLM #56570's request)",
        peak=peak,
        traffic=traffic,
        launches=launches,
    )(function)
