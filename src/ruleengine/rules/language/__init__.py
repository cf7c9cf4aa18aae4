"""The language a rule is written in: its model, vocabulary and catalogue of metrics,
validation, levels, periods, schedules, actions, approvals and templates, and its money
(amounts per currency, minor units, money as a person reads it). Pure.

May import: ``rules.basics``, ``rules.entity``, ``rules.advantage``, ``rules.impact`` (a
task's holdout) and ``ruleengine.errors``; nothing that does I/O.
"""
