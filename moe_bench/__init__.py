"""The tooling around the asv suite: results loading, the budget gate, reports, plots, dashboard.

Needs the ``bench`` extra (asv, pandas, matplotlib); the conversion library itself does not.
"""
