"""The formats: what each stores per layer, how engines convert it, and this library's ways.

What they share, below them: the row orders, gathers and swizzles (``layout``, ``quant_ops``,
``swizzle``), the record type of every format (``format``) and the one strategy registry of
every format (``registry``). Then ``bf16/`` (BF16's record, catalog and strategies) and
``quant/`` (the quantized formats: their catalog, layer, what they share, a module per format
with its record); ``records``, every format's record by name, and ``shape``, the one layer
shape type, whose sizes come from the record; and ``table``: every format through one table,
what measurement, replay and the command line take.
"""
