"""Planning a change from live values: status, budget, bid and name targets, scaling to a
target and rebalancing a group. Pure; the live write path and the backtest's replay call the
same functions.

May import: ``rules.language``, ``rules.basics``, ``rules.entity``, ``rules.advantage`` and
``ruleengine.errors``; nothing that does I/O.
"""
