"""A local simulator of Meta's Marketing API v25.0–v27.0 (December 2026) for the demo and tests.

``create_app()`` builds the aiohttp application; ``python -m graph_sandbox``
serves it; :class:`graph_sandbox.admin.SandboxAdmin` drives its admin
routes. See ``docs/sandbox.md``.

A sibling of ``ruleengine`` in the same distribution, not a part of it: it imports
nothing from ``ruleengine`` (it simulates Meta, so Meta's limits are its own
constants), and the product never imports it (``ruleengine up`` starts it as a
process). ``tests/test_layers.py`` checks both directions.
"""

from graph_sandbox.app import create_app

__all__ = ["create_app"]
