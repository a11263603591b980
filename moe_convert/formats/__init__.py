"""The formats: what each stores per layer, how engines convert it, and this library's ways.

What they share, below them: the row orders, gathers and swizzles (``layout``, ``quant_ops``,
``swizzle``), the layer shapes' common sizes (``geometry``) and the one strategy registry of
every format (``registry``). Then ``bf16/`` (the BF16 catalog and strategies) and ``quant/``
(the quantized formats: their table, catalog, layer, what they share, a module per format), and
``table``: every format through one table, what measurement, replay and the command line take.
"""
