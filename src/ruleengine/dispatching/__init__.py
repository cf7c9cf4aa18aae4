"""The dispatcher's work, run by ``python -m ruleengine.dispatch``: the sweep that finds
due rules and enqueues one job per ad account (``sweep``), the Redis lease that keeps one
dispatcher active (``lease``), one entity listing per (account, level) shared by every due
rule (``listings``), and the job payloads that cross Redis (``payload``).

May import: ``accounts``, ``followups.scheduling`` (re-arming timers), ``store``, ``meta``
(the GET-only reader only: no path from here reaches code that writes to Meta —
tests/test_layers.py), ``rules`` and the basics.
"""
