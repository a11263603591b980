"""MXFP4 (gpt-oss-120b): vLLM's preparation as installed beside its transcription,
``bench_engine``'s grid of the format (``bench_engine.format_benchmarks``), its classes named as
the main suite's ``bench_mxfp4``'s, so the metrics table judges them alike.
"""

from . import bench_engine

globals().update(bench_engine.format_benchmarks("mxfp4", __name__))
