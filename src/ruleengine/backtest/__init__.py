"""What a rule would have done over the last N days: the service that composes a backtest
(``service``), the Insights history cache it reads (``history``) and each account's
attribution-lag curve fitted from its own records (``lag_fit``). The replay itself is pure
(:mod:`ruleengine.rules.replay.run`) and plans with the same functions as the live write path.

May import: ``store``, ``meta`` (read-only), ``rules`` and the basics. Never the write path.
"""
