"""The worker's periodic jobs: the reaper that closes batches whose worker died, settles
their writes and records them (``reaper``), retention of records, batches and rollups
(``retention``), and keeping each periodic job to once a minute whatever the clocks do
(``periodic``).

May import: ``writes``, ``approvals``, ``acting``, ``store``, ``meta``, ``rules``, the
basics, and :mod:`ruleengine.worker.deps` (the worker's services).
"""
