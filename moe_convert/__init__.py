"""Convert MoE expert weights to FlashInfer's TRTLLM layouts (BF16, NVFP4, MXFP4, FP8, MXINT4), and
measure it.

Every format's strategies are in one registry, ``REGISTRY`` (name -> a ``Strategy`` record:
format, function, in place or not, origin, figures as ``Formula``s of the shape); every strategy
of a format gives byte-identical output. ``convert(w13, w2, strategy=NAME)`` runs a BF16 one
(``STRATEGIES``, BF16's view of the registry), ``convert_quant(layer, strategy=NAME)`` a
quantized ``QuantLayer``'s (weights, scale factors, biases; ``QUANT_STRATEGIES``), and
``convert_layer`` a layer of any format as named tensors. A ``LayerShape`` is a format (its
record in ``FORMATS``: BF16's, NVFP4's, ...) and a layer's sizes; ``CATALOG`` and
``QUANT_CATALOG`` hold the model shapes.
"""

from .checks import check_weights
from .formats.bf16 import (  # noqa: F401 (imported for their registrations, not their names)
    cycle_strategy,  # registers "cycle_inplace" where Triton can run
    engines,  # registers "vllm", "sglang-installed" where the engines are installed
    flashinfer_strategy,  # registers "flashinfer" where FlashInfer is installed
    strategies,  # registers "legacy" ... "trtllm", everywhere
    triton_strategy,  # registers "triton", "triton_inplace" where Triton can run
)
from .formats.bf16.shapes import (
    CATALOG,
    ModelSpec,
    layer_shape,
    shape_from_hf_config,
    spec_from_hf_config,
)
from .formats.layout import unconvert
from .formats.quant import (
    engines as quant_engines,  # noqa: F401 (registers "<format>-vllm" where vLLM's can run)
)
from .formats.quant import (
    flashinfer,  # noqa: F401 (registers "<format>-flashinfer" where FlashInfer's helpers run)
)
from .formats.quant.catalog import QUANT_CATALOG, quant_layer_shape
from .formats.quant.layer import QuantLayer, check_quant_layer
from .formats.quant.registry import QuantStrategy, register_quant
from .formats.records import FORMATS  # imports each format's module, which registers its own
from .formats.registry import (
    QUANT_STRATEGIES,
    QUANT_UNAVAILABLE,
    REGISTRY,
    STRATEGIES,
    Strategy,
    convert,
    register,
)
from .formats.shape import LayerShape
from .formats.table import (
    LAYER_FORMATS,
    LayerFormat,
    convert_layer,
    convert_quant,
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
    "QUANT_UNAVAILABLE",
    "REGISTRY",
    "STRATEGIES",
    "Formula",
    "LayerFormat",
    "LayerShape",
    "ModelSpec",
    "QuantLayer",
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
    "register_quant",
    "shape_from_hf_config",
    "spec_from_hf_config",
    "unconvert",
]
