"""MXFP8 (MiniMax-M3 MXFP8): vLLM's preparation as installed beside its transcription,
``bench_engine``'s grid of the format (``bench_engine.format_benchmarks``), its classes named as
the main suite's ``bench_mxfp8``'s, so the metrics table judges them alike.
"""

from . import bench_engine

globals().update(bench_engine.format_benchmarks("mxfp8", __name__))
