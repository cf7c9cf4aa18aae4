"""The cross-rule guards of the write path: the change budget an entity may move in 24 h
over every rule (``change_budget``), oscillation detection and holds (``oscillation``),
and the round that applies both under the account's lock (``cross_rule``).

May import: ``acting``, ``store``, ``rules`` and the basics.
"""
