"""Convert BF16 MoE expert weights to FlashInfer's TRTLLM block layout, and measure it.

``convert(w13, w2, strategy=NAME)`` runs one of the registered ``STRATEGIES`` (name -> a
``Strategy`` record: function, in place or not, origin, figures as ``Formula``s of the shape);
every strategy gives byte-identical output. ``shapes`` holds the model-shape catalog.
"""

from . import (  # noqa: F401 (imported for their registrations, not their names)
    engines,  # registers "vllm", "sglang-installed" where the engines are installed
    flashinfer_strategy,  # registers "flashinfer" where FlashInfer is installed
    strategies,  # registers "legacy" ... "trtllm", everywhere
    triton_strategy,  # registers "triton", "triton_inplace" where Triton can run
)
from .checks import check_weights
from .formulas import Formula
from .layout import unconvert
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
    "STRATEGIES",
    "Formula",
    "LayerShape",
    "ModelSpec",
    "Strategy",
    "check_weights",
    "convert",
    "layer_shape",
    "register",
    "shape_from_hf_config",
    "spec_from_hf_config",
    "unconvert",
]
