"""``scripts/gpu-check``: the whole CUDA-side check in one time-boxed command; ``__main__`` runs
it, ``plan`` says what it does, one module per step, ``report`` writes what it found.

Imports nothing here: the orchestrator starts without torch, each step imports the library in a
process of its own.
"""
