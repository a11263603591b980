"""MXFP4 experts (gpt-oss-120b and gpt-oss-20b): ``benchmarks.quant``'s figures of the format, its
classes named as BF16's (``PeakMemory``, ``LayerTime``, ...), so the dashboard lists them together.
"""

from . import quant

globals().update(quant.format_benchmarks("mxfp4", __name__))
