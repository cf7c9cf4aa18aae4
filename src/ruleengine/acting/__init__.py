"""What acting means, shared by everything that acts or says what it would do.

Owns: :class:`~ruleengine.acting.results.ActResult` (what an action did, or why not),
:class:`~ruleengine.acting.results.JobRun` (the per-job context every action reads),
targets planned from live values with the task's own guards (learning phase, approval),
the intent documents and the re-checks of cooldowns and count limits under the lock. It
writes nothing to Meta: the preview imports it.

May import: ``accounts``, ``store``, ``meta`` (read-only), ``rules`` and the basics.
"""
