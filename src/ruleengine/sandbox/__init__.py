"""A local simulator of Meta's Graph API v25.0 for the demo, the tests and the benchmarks.

``create_app()`` builds the aiohttp application; ``python -m ruleengine.sandbox``
serves it; :class:`ruleengine.sandbox.admin.SandboxAdmin` drives its admin
routes. See ``docs/sandbox.md``.
"""

from ruleengine.sandbox.app import create_app

__all__ = ["create_app"]
