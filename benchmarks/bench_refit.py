"""BF16 refits: one full-size layer, converted once, then new checkpoint weights converted again
into it (``moe_convert.load.refit``), in each way of ``moe_suite.metrics.REFIT_WAYS``: vLLM 0.34's
``direct`` and ``layerwise`` and our ``streamed`` (``benchmarks.formats``' figures of a refit:
``REFIT``; each quantized format's are in its module, ``bench_nvfp4.Refit`` ...).

``Refit``: per way the refit's peak transient bytes, traffic and launches, exact on ``meta``, and
the strategy's two classes as 0/1. ``RefitTime``: the ``direct`` and ``streamed`` refits timed
against a same-size copy, as every time figure. ``moe_bench`` reads them beside ``bench_convert``'s
first load for the summary's refit block, without the library. ``RefitReplay`` (BF16's
alone, ``formats.HEADLINE``): the whole rank's refits in a row, replayed on the headline's
shapes, and how many fit before an out-of-memory. BF16's figures have been recorded under this
module's name since the refit (issue 38), so it keeps them.
"""

from . import formats

globals().update(formats.format_benchmarks("bf16", __name__, (*formats.REFIT, *formats.HEADLINE)))
