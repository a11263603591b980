"""Every format's moves (``moe_convert.formats.placement``): the in-place inverse of every
strategy's output (byte-exact, in the converted tensors' own storage), the streaming placement
of one expert at a time (the bytes of every strategy, in any order, by halves, into a layer
converted before), their figures exact on meta at full size, and each strategy's inverse class.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import (
    FORMATS,
    REGISTRY,
    Layer,
    LayerShape,
    convert,
    empty_converted,
    place_expert,
    restore,
)
from moe_convert.cli import commands as cli
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.formats.placement import restore_figures, streaming
from moe_convert.formats.table import strategy_input
from moe_convert.load.refit import reverse_problem, reversibility
from moe_convert.measuring.memory import measure_memory, strategy_memory
from moe_convert.measuring.traffic import measure_traffic

PLAIN = sorted(name for name, record in REGISTRY.items() if not record.needs)
# (E, H, I): one expert and several, H above and below I, rows of one and of several blocks.
SIZES = ((1, 256, 256), (3, 512, 256), (2, 256, 768), (2, 768, 512))


def shapes_of(fmt: str) -> list[LayerShape]:
    """Every size of ``SIZES`` the format converts, gated and not where it has both."""
    gatings = (True,) if FORMATS[fmt].gated_only else (True, False)
    shapes = [LayerShape("place", 1, e, h, i, 1, g, fmt) for g in gatings for e, h, i in SIZES]
    return [shape for shape in shapes if shape.conversion_error is None]


def checkpoint(shape: LayerShape, strategy: str, seed: int = 0) -> Layer:
    """A fresh layer of what ``strategy`` takes; a clamped format's scales all above the
    clamp (as a checkpoint's are), so that its round trip can be byte-exact."""
    layer = strategy_input(shape, strategy, "cpu", seed=seed)
    if shape.fmt.scale_min is not None:
        gen = torch.Generator().manual_seed(seed)
        for name in ("w13_scale", "w2_scale"):
            layer[name].copy_(torch.rand(layer[name].shape, generator=gen) + 0.01)
    return layer


def clone(layer: Layer) -> Layer:
    return Layer(**{name: t.clone() for name, t in layer.items()})


def assert_same_bytes(got: Layer, want: Layer) -> None:
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert (got[name].shape, got[name].dtype) == (tensor.shape, tensor.dtype), name
        assert torch.equal(got[name].view(torch.uint8), tensor.view(torch.uint8)), name


def storages(layer: Layer) -> dict[str, int]:
    return {name: t.untyped_storage().data_ptr() for name, t in layer.items()}


def test_every_format_converts_on_several_shapes_here():
    for fmt in FORMATS:
        assert len(shapes_of(fmt)) >= 3, fmt


@pytest.mark.parametrize("strategy", PLAIN)
def test_restore_inverts_every_strategy_in_its_own_storage(strategy):
    """checkpoint -> convert -> restore == checkpoint, byte for byte, and each restored tensor
    is a view of the storage the conversion returned."""
    for shape in shapes_of(REGISTRY[strategy].format):
        taken = checkpoint(shape, strategy)
        want = clone(taken)
        converted = convert(taken, strategy=strategy, gated=shape.gated)
        before = storages(converted)
        back = restore(converted, shape)
        assert_same_bytes(back, want)
        assert storages(back) == {name: before[name] for name in back}, shape


def test_restore_leaves_a_clamped_scale_clamped():
    (shape, *_) = shapes_of("fp8block")
    taken = checkpoint(shape, "fp8block-fast")
    taken.w2_scale[0, 0, 0] = 1e-12  # below the clamp: the conversion raises it to 1e-10
    back = restore(convert(clone(taken), strategy="fp8block-fast"), shape)
    assert back.w2_scale[0, 0, 0].item() == pytest.approx(1e-10)
    assert torch.equal(back.w13.view(torch.uint8), taken.w13.view(torch.uint8))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_place_expert_in_any_order_by_halves_gives_the_upstream_bytes(fmt):
    """Experts placed last first, a gated ``[w1; w3]`` w13 and its scales as ``w3`` then ``w1``
    in separate calls, w2 in a third: the bytes of the format's upstream conversion."""
    for shape in shapes_of(fmt):
        taken = checkpoint(shape, shape.fmt.upstream)
        want = convert(clone(taken), strategy=shape.fmt.upstream, gated=shape.gated)
        out = empty_converted(shape, "cpu")
        halves = shape.gated and not shape.fmt.interleaved_w13
        for e in reversed(range(shape.experts)):
            rest = {n: t[e] for n, t in taken.items() if not (halves and n in ("w13", "w13_scale"))}
            if halves:
                w1, w3 = taken.w13[e].chunk(2)
                place_expert(out, shape, e, w3=w3)
                place_expert(out, shape, e, w1=w1)
                if "w13_scale" in taken:
                    s1, s3 = taken.w13_scale[e].chunk(2)
                    place_expert(out, shape, e, w1_scale=s1, w3_scale=s3)
            place_expert(out, shape, e, **rest)
        assert_same_bytes(out, want)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_place_expert_into_a_converted_layer_is_a_refit(fmt):
    """New weights placed expert by expert into a layer the in-place kind converted: a cold
    conversion's bytes, every address kept, the new weights only read."""
    shape = shapes_of(fmt)[1]
    kind = "inplace" if fmt == "bf16" else f"{fmt}-inplace"
    held = convert(checkpoint(shape, kind), strategy=kind, gated=shape.gated)
    before = storages(held)
    new = checkpoint(shape, kind, seed=1)
    kept = clone(new)
    for e in range(shape.experts):
        place_expert(held, shape, e, **{name: t[e] for name, t in new.items()})
    assert_same_bytes(held, convert(clone(new), strategy=kind, gated=shape.gated))
    assert storages(held) == before
    assert_same_bytes(new, kept)


def test_place_expert_refuses_bad_slices_in_one_line():
    shape = LayerShape("place", 1, 2, 256, 256, 1, True, "nvfp4")
    out = empty_converted(shape, "cpu")
    w2 = torch.zeros(256, 128, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^expert 2 is out of range: the layer has 2$"):
        place_expert(out, shape, 2, w2=w2)
    with pytest.raises(ValueError, match=r"^w4: a nvfp4 layer has no such tensor; it has w13, "):
        place_expert(out, shape, 0, w4=w2)
    with pytest.raises(
        ValueError,
        match=r"^w1 \(shape \(128, 256\), dtype torch.uint8\): one expert's slice of w13 is "
        r"\[256, 128\] torch.uint8\. Fix: pass w13\[0\] as the checkpoint stores it$",
    ):
        place_expert(out, shape, 0, w1=torch.zeros(128, 256, dtype=torch.uint8))
    mxfp4 = LayerShape("place", 1, 2, 256, 256, 1, True, "mxfp4")
    with pytest.raises(ValueError, match=r"^w1: this mxfp4 w13 interleaves w1 and w3; pass w13=$"):
        place_expert(empty_converted(mxfp4, "cpu"), mxfp4, 0, w1=w2)


def _catalog(fmt: str, gated: bool) -> LayerShape | None:
    return next((s for s in catalog_shapes() if s.format == fmt and s.gated == gated
                 and s.conversion_error is None), None)  # fmt: skip


FULL_SIZE = [s for fmt in FORMATS for g in (True, False) if (s := _catalog(fmt, g)) is not None]


@pytest.mark.parametrize("shape", FULL_SIZE, ids=lambda s: f"{s.label}-g{int(s.gated)}")
def test_restore_figures_at_full_size_on_meta(shape):
    """Exact: the peak is one expert's scratch of the larger weight (``max(S13, S2)``); the
    traffic and launches are ``restore_figures``'."""
    upstream = shape.fmt.upstream
    small = shape.with_experts(1)  # the index caches warmed, as every figure takes them
    restore(convert(strategy_input(small, upstream, "meta"), strategy=upstream,
                    gated=small.gated), small)  # fmt: skip
    converted = convert(strategy_input(shape, upstream, "meta"), strategy=upstream,
                        gated=shape.gated)  # fmt: skip
    peak, traffic, launches = restore_figures(shape.fmt)
    memory = measure_memory(lambda: restore(converted, shape))
    assert (
        memory.peak_bytes
        == peak.evaluate(shape)
        == max(shape.w13_expert_bytes, shape.w2_expert_bytes)
    )
    work = measure_traffic(lambda: restore(converted, shape))
    assert (work.traffic_bytes, work.launches) == (
        traffic.evaluate(shape),
        launches.evaluate(shape),
    )


@pytest.mark.parametrize("shape", FULL_SIZE, ids=lambda s: f"{s.label}-g{int(s.gated)}")
def test_streaming_holds_nothing_but_its_output_at_full_size_on_meta(shape):
    """The whole-layer streaming strategy's peak is the converted layer it allocates, and for
    MXINT4 one XOR-ed slice besides (half a gated w13's expert, or one of w2)."""
    name = "streaming" if shape.format == "bf16" else f"{shape.format}-streaming"
    out = streaming(strategy_input(shape, name, "meta"), shape.gated, shape.fmt)
    outputs = sum(t.nbytes for t in out.values())
    scratch = shape.w2_expert_bytes if shape.fmt.sign_flip else 0
    assert strategy_memory(shape, name).peak_bytes == outputs + scratch
    assert REGISTRY[name].peak.evaluate(shape) == outputs + scratch


def test_every_strategy_s_inverse_class():
    """Reversible in place but block-FP8 (its scales' clamp) and where the result's storage
    cannot hold the layer the strategy took."""
    for name in PLAIN:
        got = reversibility(name)
        if REGISTRY[name].format == "fp8block":
            assert got == (
                "not reversible in place: w13_scale, w2_scale not the checkpoint's bytes "
                "(clamped to at least 1e-10: lossy) (E2 H128 I128)"
            ), name
        else:
            assert got == "reversible in place", name


@requires_flashinfer
def test_a_result_too_small_for_its_input_is_not_reversible():
    shape = LayerShape("place", 1, 2, 64, 64, 1, True, "fp8")
    assert reverse_problem(shape, "fp8-flashinfer") == (
        "no room (w13: its storage holds 16384 bytes from the converted tensor on, the "
        "checkpoint's (2, 128, 64) torch.bfloat16 needs 32768)"
    )


def test_the_strategies_command_prints_each_inverse_class(capsys):
    assert cli.main(["strategies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("streaming "))
    assert lines[at + 2] == "    inverse         reversible in place"
    at = next(i for i, line in enumerate(lines) if line.startswith("fp8block-inplace "))
    assert lines[at + 2].startswith("    inverse         not reversible in place: w13_scale")
