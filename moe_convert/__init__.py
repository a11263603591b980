"""Convert MoE expert weights to FlashInfer's TRTLLM layouts (BF16, NVFP4, MXFP4, FP8, block-FP8,
MXFP8, MXINT4), and measure it.

A layer of any format is a ``Layer``: its named tensors (BF16's ``w13``, ``w2``; a quantized
format's weights, block scales and biases). ``convert(layer, strategy=NAME)`` converts it with
any strategy of ``REGISTRY`` (name -> a ``Strategy`` record: format, function, in place or not,
origin, figures as ``Formula``s of the shape); every strategy of a format gives byte-identical
output. ``UNAVAILABLE`` holds the strategies that cannot run here, with what they need;
``register`` adds one. A ``LayerShape`` is a format (its record in ``FORMATS``) and a layer's
sizes; ``CATALOG`` holds the model shapes of every format, ``layer_shape(model, tp)`` one rank's,
``layer_tensors(shape, device)`` a fresh layer of it.
"""

# First, so that BF16's strategies come first in the registry, as BF16 in ``FORMATS``.
from .formats.bf16 import strategies as bf16_strategies  # noqa: F401 (registers "legacy" ...)

# isort: split
from .formats import (  # noqa: F401 (imported for their registrations, not their names)
    engines,  # noqa: F401 (the adapter mechanism, before the adapters)
    flashinfer,  # registers "<format>-flashinfer" where FlashInfer's helpers run
    preparations,  # registers "<format>-vllm" where vLLM's preparations can run
)
from .formats.bf16 import (  # noqa: F401 (imported for their registrations, not their names)
    cycle_strategy,  # registers "cycle_inplace" where Triton can run
    flashinfer_strategy,  # registers "flashinfer" where FlashInfer is installed
    triton_strategy,  # registers "triton", "triton_inplace" where Triton can run
)
from .formats.bf16 import (
    engines as bf16_engines,  # noqa: F401 (registers "vllm", "sglang-installed" where installed)
)
from .formats.bf16.format import check_weights
from .formats.catalog import (
    CATALOG,
    ModelSpec,
    layer_shape,
    shape_from_hf_config,
    spec_from_hf_config,
)
from .formats.layer import Layer
from .formats.placement import empty_converted, place_expert, restore
from .formats.records import FORMATS  # imports each format's module, which registers its own
from .formats.registry import REGISTRY, UNAVAILABLE, Strategy, register, strategies
from .formats.shape import LayerShape
from .formats.table import convert, layer_call, layer_tensors
from .formulas import Formula

__all__ = [
    "CATALOG",
    "FORMATS",
    "REGISTRY",
    "UNAVAILABLE",
    "Formula",
    "Layer",
    "LayerShape",
    "ModelSpec",
    "Strategy",
    "check_weights",
    "convert",
    "empty_converted",
    "layer_call",
    "layer_tensors",
    "layer_shape",
    "place_expert",
    "register",
    "restore",
    "shape_from_hf_config",
    "spec_from_hf_config",
    "strategies",
]
