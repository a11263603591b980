"""MXFP8 experts (MiniMax-M3-MXFP8: fp8 weights, an e8m0 scale per 32 elements, swizzled):
``benchmarks.formats``' figures of the format, its classes named as BF16's (``PeakMemory``,
``LayerTime``, ...), so the dashboard lists them together.
"""

from . import formats

globals().update(formats.format_benchmarks("mxfp8", __name__))
