"""Rules that fight, with I/O: the stored rules analysed, a rule being saved checked, live
entities looked at (the pure analysis is :mod:`ruleengine.rules.conflicts`); and what each
rule earns, measured against its holdout (:mod:`ruleengine.analysis.impact`).

May import: ``backtest`` (its Insights history), ``store``, ``meta`` (read-only), ``rules``
and the basics.
"""
