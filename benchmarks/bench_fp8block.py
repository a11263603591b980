"""DeepSeek block-FP8 experts (DeepSeek-R1-0528, 128x128 float32 block scales):
``benchmarks.quant``'s figures of the format, its classes named as BF16's (``PeakMemory``,
``LayerTime``, ...), so the dashboard lists them together.
"""

from . import quant

globals().update(quant.format_benchmarks("fp8block", __name__))
