"""The asv suite an engine's history is measured with (``moe-bench engine-config``): the
installed engine's converter beside the frozen transcriptions, one small grid per commit."""
