"""Every format's record, collected from the format modules that define them into ``FORMATS``
(``format.FORMATS``, read by name: ``LayerShape.format``, ``Strategy.format``), in the order
reports show them (BF16, then the quantized formats).

A format module defines its record first and its strategies use it directly; this module only
gathers them, and the layer shape reads them through ``format.format_record`` without importing
the format modules. Importing a quantized format's module registers its strategies:
``nvfp4-legacy``, ``nvfp4-preallocated`` and ours; ``mxint4-legacy``, ``-preallocated`` and
ours; the others' ``-legacy`` and this library's kinds (``kinds``). Every format's streaming
strategy (``placement.register_streaming``: BF16's ``streaming``, ``<format>-streaming``) is
registered here, once the records are gathered: it is built from a record alone.
"""

from __future__ import annotations

from .bf16.format import BF16
from .format import FORMATS, format_record
from .fp8 import FP8
from .fp8block import FP8BLOCK
from .mxfp4 import MXFP4
from .mxfp8 import MXFP8
from .mxint4 import MXINT4
from .nvfp4 import NVFP4
from .placement import register_streaming

__all__ = ["FORMATS", "format_record"]

FORMATS.update({fmt.name: fmt for fmt in (BF16, NVFP4, MXFP4, FP8, FP8BLOCK, MXFP8, MXINT4)})
for _fmt in FORMATS.values():
    register_streaming(_fmt)
