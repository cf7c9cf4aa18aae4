"""Meta's side of a rule: its vocabulary and filters, its Automated Rules imported and
exported, and the table of its API versions. Pure.

May import: ``rules.language``, ``rules.entity``, ``rules.basics`` and ``ruleengine.errors``.
"""
