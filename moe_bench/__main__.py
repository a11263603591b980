"""``python -m moe_bench``: the ``moe-bench`` command (``moe_bench.cli``) where the console script
is not installed (a checkout on ``PYTHONPATH``: scripts/gpu-check)."""

import sys

from .cli import main

sys.exit(main())
