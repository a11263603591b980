"""MXINT4 experts (Kimi-K2-Thinking: int4 weights packed in int32, a bf16 scale per 32 elements,
swizzled; BlockMajorK weights): ``benchmarks.formats``' figures of the format, its classes named
as BF16's (``PeakMemory``, ``LayerTime``, ...), so the dashboard lists them together.
"""

from . import formats

globals().update(formats.format_benchmarks("mxint4", __name__))
