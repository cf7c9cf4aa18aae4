"""MongoDB: one module per collection family, and the database's indexes (``db``).

Rules and versions, accounts and their encrypted tokens, batches and execution records,
intents and the lock fences, follow-ups, approvals, holds, the error log, rollups, listing
snapshots, the Insights history cache, backtests, heartbeats and API tokens.

May import: ``rules`` and the basics (``errors``, ``constants``, ``settings``, ``redact``).
"""
