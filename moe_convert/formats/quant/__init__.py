"""The quantized formats (NVFP4, MXFP4, FP8 per-tensor, block-FP8, MXFP8, MXINT4): their catalog,
layer and checks (``layer``), registry, what the formats share (``shared``: this library's kinds,
vLLM's w1/w3 reorder, the transcription rules), then one module per format (``nvfp4``,
``mxfp4``, ``fp8``, ``fp8block``, ``mxfp8``, ``mxint4``): its record (``formats.format.Format``),
the engines' paths transcribed and this library's strategies of that format."""
