"""Holdouts and measured impact: which entities a task holds out, the measure per entity and
per currency, and its intervals. Pure.

May import: ``rules.basics`` and ``ruleengine.errors`` only (the language imports it).
"""
