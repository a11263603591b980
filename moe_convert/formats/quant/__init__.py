"""The quantized formats (NVFP4, MXFP4, FP8 per-tensor, block-FP8, MXFP8): their table and
shapes (``formats``), catalog, layer and checks (``layer``), registry, the engines' paths
transcribed (``upstream``, ``upstream_fp8``) and this library's (``strategies``)."""
