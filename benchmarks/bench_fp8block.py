"""DeepSeek block-FP8 experts (DeepSeek-R1-0528, 128x128 float32 block scales):
``benchmarks.formats``' figures of the format, its classes named as BF16's (``PeakMemory``,
``LayerTime``, ...), so the dashboard lists them together.
"""

from . import formats

globals().update(formats.format_benchmarks("fp8block", __name__))
