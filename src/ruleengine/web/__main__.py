"""``python -m ruleengine.web``: serve the REST API, the screens, health and metrics.

Settings come from ``RULEENGINE_*`` variables (``--host``/``--port`` override
the address). SIGTERM or Ctrl-C stops the server cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from aiohttp import web

from ruleengine.errors import ConfigurationError, RuleEngineError
from ruleengine.redact import setup_logging
from ruleengine.rules.meta.versions import version_warning
from ruleengine.settings import Settings, load_settings
from ruleengine.web.app import create_app

log = logging.getLogger("ruleengine.web")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m ruleengine.web",
        description=(
            "Serve the ruleengine web app: REST API under /api, the Rules, Rule Logs,"
            " Benchmark and Errors screens, /health, /health/ready and /metrics."
        ),
        epilog=(
            "Configuration is read from RULEENGINE_* environment variables, e.g."
            " RULEENGINE_MONGODB_URL, RULEENGINE_REDIS_URL, RULEENGINE_API_TOKEN (an admin"
            " token; every write needs a token: named ones with roles come from `ruleengine"
            " tokens add`), RULEENGINE_API_READS_REQUIRE_TOKEN, RULEENGINE_TOKEN_ENCRYPTION_KEY."
            " SIGTERM or Ctrl-C stops the server cleanly."
        ),
    )
    parser.add_argument("--host", help="address to listen on (default: RULEENGINE_WEB_HOST)")
    parser.add_argument(
        "--port",
        type=int,
        help="port to listen on, 0 for any free one (default: RULEENGINE_WEB_PORT)",
    )
    return parser.parse_args(argv)


async def serve(settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly."""
    if (warning := version_warning(settings.graph_version, datetime.now(UTC).date())) is not None:
        log.warning("%s", warning)
    runner = web.AppRunner(create_app(settings), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.web_host, settings.web_port)
        await site.start()
        host, port = runner.addresses[0][:2]
        print(f"web listening on http://{host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse_args(argv)
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.host is not None:
        settings = settings.model_copy(update={"web_host": args.host})
    if args.port is not None:
        settings = settings.model_copy(update={"web_port": args.port})
    setup_logging(settings.log_level)
    try:
        asyncio.run(serve(settings))
    except RuleEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{settings.web_host}:{settings.web_port}"
        print(f"error: cannot listen on {where}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
