"""Undoing a batch: the plan read from its records and the live values (``plan``,
read-only: the web app's dry run imports it) and the undo itself, written through the
rules' own write path as the batch ``undo:<id>`` (``run``, a worker job and the CLI).

May import: ``acting``, ``accounts``, ``store``, ``meta``, ``rules``, the basics, and
:mod:`ruleengine.worker.deps` (the worker's services).
"""
