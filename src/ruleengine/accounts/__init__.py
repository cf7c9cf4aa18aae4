"""An ad account as the engine knows it, and what Meta says about it.

Owns: the account's ``token_state`` from Meta's token errors (``token_state``), the check
that its registered currency and timezone are Meta's and the ``currency_state`` kept when
not (``currency``), and :class:`~ruleengine.accounts.facts.AccountFacts` — what one job
reads about its ad account (minimum daily budget, currency, timezone, the activity log),
once, when needed.

May import: ``store``, ``meta`` (read-only: the reader and ``adaccount``), ``rules`` and the
basics (``errors``, ``constants``, ``settings``, ``redact``, ``clocks``). Never the write path.
"""
