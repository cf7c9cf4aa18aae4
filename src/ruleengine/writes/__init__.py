"""The write path — the only code that changes Meta, per ad account one write at a time:
the executor (``executor``: one change at a time, copies, messages), the batched writes
(``batched``: Batch API calls of ≤ 50 under one hold of the lock), settling pending
intents from live values (``settling``), the fenced, renewed account lock (``lock``),
Meta's limits on budget writes (``meta_limits``), copies (``copies``) and notifications
(``notify``).

May import: ``acting``, ``guards``, ``accounts``, ``store``, ``meta`` (the writer
included), ``rules`` and the basics.
"""
