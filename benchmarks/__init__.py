"""The moe-convert-bench asv suite (see README.md, "Benchmarks")."""
