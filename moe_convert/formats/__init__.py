"""The formats: what each stores per layer, how engines convert it, and this library's ways.

What every format shares, below them: the record type (``format``), the one layer type
(``layer``), the one strategy registry (``registry``), the row orders, gathers and swizzles
(``layout``, ``rows``, ``swizzle``; ``strided``: a row order as a few strided copies), this
library's kinds as functions of a format (``kinds``). Then a module per format, its record and
strategies: ``bf16/`` (a package: its strategies, Triton kernels, transcriptions and engine
adapters), ``nvfp4``, ``mxfp4``, ``fp8``, ``fp8block``, ``mxfp8``, ``mxint4``. Above them:
``records`` (every format's record by name), ``shape`` (the one layer-shape type, whose sizes
come from the record), ``catalog`` (the model shapes of every format), ``table`` (``convert``,
and the fresh layers every measurement takes), and the strategies that call other packages:
``engines`` (the adapter mechanism), ``preparations`` (vLLM's quantized preparations as
installed) and ``flashinfer`` (FlashInfer's own helpers).
"""
