"""BF16: the model catalog and shapes (``shapes``), the strategy registry (``registry``), the
strategies of this library and the engines' transcriptions (``strategies``), those that need a
package (``flashinfer_strategy``, ``triton_strategy`` with ``cycles``/``cycle_strategy``,
``engines``), the oracle (``reference``) and the inputs (``inputs``)."""
