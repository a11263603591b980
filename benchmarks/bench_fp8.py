"""FP8 per-tensor experts (Llama-4-Maverick FP8): ``benchmarks.formats``' figures of the format, its
classes named as BF16's (``PeakMemory``, ``LayerTime``, ...), so the dashboard lists them
together.
"""

from . import formats

globals().update(formats.format_benchmarks("fp8", __name__))
