"""MXFP4 experts (gpt-oss-120b and gpt-oss-20b): ``benchmarks.formats``' figures of the format, its
classes named as BF16's (``PeakMemory``, ``LayerTime``, ...), so the dashboard lists them
together.
"""

from . import formats

globals().update(formats.format_benchmarks("mxfp4", __name__))
