"""The backtest's replay of a rule over Insights history: the runs, their rows and candidate
masks, the history a backtest asks for, and Meta's reporting lag. Pure.

May import: ``rules.language``, ``rules.plan``, ``rules.impact``, ``rules.evaluate``,
``rules.filtering``, ``rules.entity``, ``rules.basics`` and ``ruleengine.errors``.
"""
