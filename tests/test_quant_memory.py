"""Every quantized strategy's registered figures are the measured ones: the peak
(``REGISTRY[name].peak``) at full size on ``meta`` for every catalog model and on CPU,
traffic and launches (``moe_convert.measuring.traffic``'s rule) on ``meta`` at full size and
small."""

from __future__ import annotations

import pytest

from moe_convert import REGISTRY, LayerShape
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.formats.table import layer_call
from moe_convert.measuring.memory import measure_memory
from moe_convert.measuring.traffic import measure_traffic

#: Every quantized format's registered strategies.
QUANT_STRATEGIES = {name: record for name, record in REGISTRY.items() if record.format != "bf16"}
# Every strategy that states its figures (an installed engine's adapter may not: measured only).
# (FlashInfer's helpers cannot run on meta: their figures are checked on CPU in
# tests/test_flashinfer_prepare.py.)
CATALOG_CASES = [
    (name, shape)
    for shape in catalog_shapes()
    if shape.format != "bf16"
    for name, record in sorted(QUANT_STRATEGIES.items())
    if record.format == shape.format and record.peak is not None and not record.not_on_meta
]
SMALL = [
    LayerShape("small", 1, 3, 256, 128, 1, format="nvfp4"),
    LayerShape("small", 1, 2, 256, 256, 1, gated=False, format="nvfp4"),
    LayerShape("small", 1, 3, 384, 256, 1, format="mxfp4"),
    LayerShape("small", 1, 3, 96, 64, 1, format="fp8"),
    LayerShape("small", 1, 2, 64, 96, 1, gated=False, format="fp8"),
    LayerShape("small", 1, 3, 384, 256, 1, format="fp8block"),
    LayerShape("small", 1, 2, 256, 384, 1, gated=False, format="fp8block"),
    LayerShape("small", 1, 3, 384, 256, 1, format="mxfp8"),
    LayerShape("small", 1, 2, 256, 384, 1, gated=False, format="mxfp8"),
    LayerShape("small", 1, 1, 256, 256, 1, format="mxint4"),  # one 128-byte block per row
    LayerShape("small", 1, 3, 512, 768, 1, format="mxint4"),
]
SMALL_CASES = [
    (name, shape)
    for shape in SMALL
    for name, record in sorted(QUANT_STRATEGIES.items())
    if record.format == shape.format and record.peak is not None
]
META_SMALL_CASES = [
    (name, shape) for name, shape in SMALL_CASES if not QUANT_STRATEGIES[name].not_on_meta
]


def case_id(case: tuple[str, LayerShape]) -> str:
    name, shape = case
    dims = f"E{shape.experts}H{shape.hidden}I{shape.intermediate}g{int(shape.gated)}"
    return f"{name}-{shape.label}-{dims}"


@pytest.mark.parametrize("case", CATALOG_CASES, ids=case_id)
def test_peak_is_the_registered_formula_on_meta_at_full_size(case):
    name, shape = case
    measured = measure_memory(layer_call(shape, name, "meta"))
    assert measured.peak_bytes == QUANT_STRATEGIES[name].peak.evaluate(shape)
    assert measured.end_bytes == 0


@pytest.mark.parametrize("case", SMALL_CASES, ids=case_id)
def test_peak_is_the_registered_formula_on_cpu(case):
    name, shape = case
    measured = measure_memory(layer_call(shape, name, "cpu"))
    assert measured.peak_bytes == QUANT_STRATEGIES[name].peak.evaluate(shape)


@pytest.mark.parametrize("case", CATALOG_CASES + META_SMALL_CASES, ids=case_id)
def test_traffic_and_launches_are_the_registered_formulas_on_meta(case):
    name, shape = case
    record = QUANT_STRATEGIES[name]
    measured = measure_traffic(layer_call(shape, name, "meta"))
    assert measured.traffic_bytes == record.traffic.evaluate(shape)
    assert measured.launches == record.launches.evaluate(shape)
