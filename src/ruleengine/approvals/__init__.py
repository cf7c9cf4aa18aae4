"""Changes that wait for a person: proposing one (``proposing``, from the worker's act
stage), deciding it (``deciding``, from the API and the CLI: compare-and-set, then the
write's job enqueued) and writing an approved one once, retried through transient failures
until it lands or expires, with its follow-up (``applying``, a worker job).

May import: ``acting``, ``writes``, ``followups``, ``accounts``, ``store``, ``meta``,
``rules``, the basics, and :mod:`ruleengine.worker.deps` (the worker's services its job
runs with).
"""
