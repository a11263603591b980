"""NVFP4 (Qwen3-235B-A22B NVFP4): vLLM's preparation as installed beside its transcription,
``bench_engine``'s grid of the format (``bench_engine.format_benchmarks``), its classes named as
the main suite's ``bench_nvfp4``'s, so the metrics table judges them alike.
"""

from . import bench_engine

globals().update(bench_engine.format_benchmarks("nvfp4", __name__))
