"""A job's run in the arq worker: the read-only stages shared with the preview
(``stages``: cooldown, fetch, evaluate), the evaluation that acts and keeps its records
(``job``), the preview that only says what it would do (``preview``), custom metrics from
Google Sheets (``sheets``), the worker's services (``deps``) and its process life
(``process``: clients built at startup, closed at shutdown).

May import: ``writes``, ``approvals.proposing``, ``followups.scheduling``, ``guards``,
``acting``, ``accounts``, ``dispatching.payload``, ``store``, ``meta``, ``rules`` and the
basics. The preview reaches no code that writes to Meta (tests/test_layers.py).
"""
