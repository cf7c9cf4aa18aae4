"""Rules that fight, with I/O: the stored rules analysed, a rule being saved checked, live
entities looked at (the pure analysis is :mod:`ruleengine.rules.conflicts`).

May import: ``store``, ``meta`` (read-only), ``rules`` and the basics.
"""
