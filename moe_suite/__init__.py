"""What the suite and its readers share, below both: the figures' table (``metrics``), the
benchmark profile (``profiles``), the suite's BF16 shapes (``shapes``), the formats' titles in the
reports' order (``formats``) and the load-time arithmetic (``loadtime``).

Standard library only (torch in ``profiles.detect_device`` alone, imported there), so that
``moe_bench`` judges and reports committed results where torch is not installed. It imports
neither ``moe_convert``, ``moe_bench`` nor ``benchmarks``; ``moe_convert`` and ``moe_bench``
import it, and ``benchmarks/`` imports it from the checkout whatever commit asv measures
(``benchmarks/__init__.py``; docs/architecture.md).
"""
