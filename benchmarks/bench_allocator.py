"""BF16 experts, the whole rank's load through the caching allocator: replayed in sleep mode and
on each device, and run on CUDA (``benchmarks.formats``' figures of the format: ``LOAD``).

BF16's figures have been recorded under this module's name since before the quantized formats,
so it keeps them; one layer's conversion is ``bench_convert``'s.
"""

from . import formats

globals().update(formats.format_benchmarks("bf16", __name__, formats.LOAD))
