"""Convert MoE expert weights to FlashInfer's TRTLLM layouts (BF16, NVFP4, MXFP4, FP8), and
measure it.

``convert(w13, w2, strategy=NAME)`` runs one of the registered ``STRATEGIES`` (name -> a
``Strategy`` record: function, in place or not, origin, figures as ``Formula``s of the shape);
every strategy gives byte-identical output. ``shapes`` holds the model-shape catalog.
``convert_quant(layer, strategy=NAME)`` does the same for a quantized ``QuantLayer`` (weights,
scale factors, biases) with the ``QUANT_STRATEGIES`` of its format (``quant_formats``).
"""

from . import (  # noqa: F401 (imported for their registrations, not their names)
    cycle_strategy,  # registers "cycle_inplace" where Triton can run
    engines,  # registers "vllm", "sglang-installed" where the engines are installed
    engines_quant,  # registers "<format>-vllm" where vLLM is installed and its function callable
    flashinfer_strategy,  # registers "flashinfer" where FlashInfer is installed
    quant_strategies,  # registers "<format>-preallocated", "-inplace", "-fast"
    quant_upstream,  # registers "nvfp4-legacy", "nvfp4-preallocated", "mxfp4-legacy"
    quant_upstream_fp8,  # registers "fp8-legacy", "fp8block-legacy", "mxfp8-legacy"
    strategies,  # registers "legacy" ... "trtllm", everywhere
    triton_strategy,  # registers "triton", "triton_inplace" where Triton can run
)
from .checks import check_weights
from .formulas import Formula
from .layout import unconvert
from .quant_catalog import QUANT_CATALOG, quant_layer_shape
from .quant_formats import FORMATS, QuantLayerShape
from .quant_layer import QuantLayer, check_quant_layer
from .quant_registry import QUANT_STRATEGIES, QuantStrategy, convert_quant
from .registry import STRATEGIES, Strategy, convert, register
from .shapes import (
    CATALOG,
    LayerShape,
    ModelSpec,
    layer_shape,
    shape_from_hf_config,
    spec_from_hf_config,
)

__all__ = [
    "CATALOG",
    "FORMATS",
    "QUANT_CATALOG",
    "QUANT_STRATEGIES",
    "STRATEGIES",
    "Formula",
    "LayerShape",
    "ModelSpec",
    "QuantLayer",
    "QuantLayerShape",
    "QuantStrategy",
    "Strategy",
    "check_quant_layer",
    "check_weights",
    "convert",
    "convert_quant",
    "layer_shape",
    "quant_layer_shape",
    "register",
    "shape_from_hf_config",
    "spec_from_hf_config",
    "unconvert",
]
