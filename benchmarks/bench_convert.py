"""BF16 experts, one MoE layer's conversion: its peak memory, traffic, CUDA allocator peaks, time
and the profile's expert count (``benchmarks.formats``' figures of the format: ``CONVERSION``).

BF16's figures have been recorded under this module's name since before the quantized formats,
so it keeps them; the rank's load is ``bench_allocator``'s.
"""

from . import formats

globals().update(formats.format_benchmarks("bf16", __name__, formats.CONVERSION))
