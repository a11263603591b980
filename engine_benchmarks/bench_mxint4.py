"""MXINT4 (Kimi-K2-Thinking): vLLM's preparation as installed beside its transcription,
``bench_engine``'s grid of the format (``bench_engine.format_benchmarks``), its classes named as
the main suite's ``bench_mxint4``'s, so the metrics table judges them alike.
"""

from . import bench_engine

globals().update(bench_engine.format_benchmarks("mxint4", __name__))
