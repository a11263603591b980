"""The formats: what each stores per layer, how engines convert it, and this library's ways.

``bf16/`` (the BF16 catalog, strategies and registry), ``quant/`` (the quantized formats: their
table, catalog, layer, registry, the engines' paths transcribed and this library's), the row
orders, gathers and swizzles they share (``layout``, ``quant_ops``, ``swizzle``), and ``table``:
every format through one table, what measurement, replay and the command line take.
"""
