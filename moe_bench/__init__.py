"""The tooling around the asv suite: results loading, the budget gate, reports, plots, dashboard;
``moe-bench`` (``cli``) is its command.

Needs the ``bench`` extra (asv, pandas, matplotlib); the conversion library itself does not.
"""
