"""BF16: its record (``format``), the strategies of this library and the engines'
transcriptions (``strategies``), those that need a package (``flashinfer_strategy``,
``triton_strategy`` with ``cycles``/``cycle_strategy``, ``engines``), the oracle (``reference``)
and the inputs (``inputs``). Its strategies' records are in the one registry,
``formats.registry``."""
