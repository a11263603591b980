"""The moe-convert-bench asv suite (see docs/benchmarks.md)."""
