"""The moe-convert-bench asv suite (see docs/benchmarks.md).

asv imports this package from the checkout and every other one from the measured commit's
build (``asv_runner``'s ``update_sys_path``: a meta-path finder for ``benchmarks`` alone). The
suite's definitions shared with ``moe_bench`` (``moe_suite``: the figures' table, the profile,
the shapes) must be the checkout's too, whatever commit is measured (an older commit's build
has an older ``moe_suite``, or none): so ``moe_suite`` is found the same way, in the folder
that holds this package, ahead of any installed one (docs/architecture.md).
"""

import importlib.machinery
import sys
from pathlib import Path

_CHECKOUT = str(Path(__file__).resolve().parent.parent)


class _CheckoutSuite:
    """A meta-path finder of ``moe_suite`` in ``_CHECKOUT`` (its submodules follow its
    ``__path__``); None for any other name."""

    def find_spec(self, name, path=None, target=None):
        if name != "moe_suite":
            return None
        return importlib.machinery.PathFinder.find_spec(name, [_CHECKOUT])


if not any(isinstance(finder, _CheckoutSuite) for finder in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutSuite())
