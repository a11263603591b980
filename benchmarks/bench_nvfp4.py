"""NVFP4 experts (Kimi-K2, DeepSeek-R1 and Qwen3-235B-A22B, NVIDIA's NVFP4 checkpoints):
``benchmarks.formats``' figures of the format, its classes named as BF16's (``PeakMemory``,
``LayerTime``, ...), so the dashboard lists them together.
"""

from . import formats

globals().update(formats.format_benchmarks("nvfp4", __name__))
