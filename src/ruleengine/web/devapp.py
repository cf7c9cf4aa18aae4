"""The app factory for aiohttp-devtools: ``adev runserver src/ruleengine/web/devapp.py``.

aiohttp-devtools imports this file and calls the first of ``app``,
``app_factory``, ``get_app``, ``create_app`` it finds, with no arguments: so the
factory here is ``app_factory`` (reading settings from ``RULEENGINE_*`` when the
server starts or reloads), and ``create_app`` is imported under another name so
that devtools does not pick the real factory, which needs the settings.
"""

from __future__ import annotations

from aiohttp import web

from ruleengine.redact import setup_logging
from ruleengine.settings import Settings
from ruleengine.web.app import create_app as _create_app


def app_factory() -> web.Application:
    """The web app for the ``RULEENGINE_*`` settings, in development mode."""
    settings = Settings()
    setup_logging(settings.log_level)
    return _create_app(settings, dev=True)
