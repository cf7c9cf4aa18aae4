"""The web app: REST API (``api``), UI screens (``views``, templates, static), health and
metrics (``python -m ruleengine.web``).

It never writes to Meta: previews and the live conflict check read through the read-only
client, and everything that changes an ad object (an undo, an approved change) is queued
for the workers. May import every capability's read side, ``store``, ``meta`` (read-only),
``rules`` and the basics — never ``writes`` or the worker's job (tests/test_layers.py).
"""
