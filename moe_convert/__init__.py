"""Convert MoE expert weights to FlashInfer's TRTLLM layouts (BF16, NVFP4, MXFP4, FP8, MXINT4), and
measure it.

``convert(w13, w2, strategy=NAME)`` runs one of the registered ``STRATEGIES`` (name -> a
``Strategy`` record: function, in place or not, origin, figures as ``Formula``s of the shape);
every strategy gives byte-identical output. ``shapes`` holds the model-shape catalog.
``convert_quant(layer, strategy=NAME)`` does the same for a quantized ``QuantLayer`` (weights,
scale factors, biases) with the ``QUANT_STRATEGIES`` of its format (``quant_formats``).
"""

from .checks import check_weights
from .formats.bf16 import (  # noqa: F401 (imported for their registrations, not their names)
    cycle_strategy,  # registers "cycle_inplace" where Triton can run
    engines,  # registers "vllm", "sglang-installed" where the engines are installed
    flashinfer_strategy,  # registers "flashinfer" where FlashInfer is installed
    strategies,  # registers "legacy" ... "trtllm", everywhere
    triton_strategy,  # registers "triton", "triton_inplace" where Triton can run
)
from .formats.bf16.registry import STRATEGIES, Strategy, convert, register
from .formats.bf16.shapes import (
    CATALOG,
    LayerShape,
    ModelSpec,
    layer_shape,
    shape_from_hf_config,
    spec_from_hf_config,
)
from .formats.layout import unconvert
from .formats.quant import (
    engines as quant_engines,  # noqa: F401 (registers "<format>-vllm" where vLLM's can run)
)
from .formats.quant import (  # noqa: F401 (imported for their registrations, not their names)
    mxint4,  # noqa: F401 (registers "mxint4-legacy", "-preallocated", "-inplace", "-fast")
    upstream,  # noqa: F401 (registers "nvfp4-legacy", "nvfp4-preallocated", "mxfp4-legacy")
    upstream_fp8,  # noqa: F401 (registers "fp8-legacy", "fp8block-legacy", "mxfp8-legacy")
)
from .formats.quant import (
    strategies as quant_strategies,  # noqa: F401 (registers "<format>-preallocated", ...)
)
from .formats.quant.catalog import QUANT_CATALOG, quant_layer_shape
from .formats.quant.formats import FORMATS, QuantLayerShape
from .formats.quant.layer import QuantLayer, check_quant_layer
from .formats.quant.registry import QUANT_STRATEGIES, QuantStrategy, convert_quant
from .formats.table import (
    LAYER_FORMATS,
    LayerFormat,
    convert_layer,
    layer_call,
    layer_format,
    layer_tensors,
)
from .formulas import Formula

__all__ = [
    "CATALOG",
    "FORMATS",
    "LAYER_FORMATS",
    "QUANT_CATALOG",
    "QUANT_STRATEGIES",
    "STRATEGIES",
    "Formula",
    "LayerFormat",
    "LayerShape",
    "ModelSpec",
    "QuantLayer",
    "QuantLayerShape",
    "QuantStrategy",
    "Strategy",
    "check_quant_layer",
    "check_weights",
    "convert",
    "convert_layer",
    "convert_quant",
    "layer_call",
    "layer_format",
    "layer_shape",
    "layer_tensors",
    "quant_layer_shape",
    "register",
    "shape_from_hf_config",
    "spec_from_hf_config",
    "unconvert",
]
