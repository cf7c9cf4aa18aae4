"""The dispatcher process: ``python -m ruleengine.dispatch`` (``--once`` for a single sweep).

A thin entry point: it builds the clients from the settings, runs the sweep loop of
:class:`ruleengine.dispatching.sweep.Dispatcher` until SIGTERM/SIGINT, and closes the
clients. It reaches no code that can write to Meta (tests/test_layers.py proves it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from redis.exceptions import RedisError

from ruleengine.dispatching.sweep import Dispatcher, utcnow
from ruleengine.errors import ConfigurationError, RuleEngineError
from ruleengine.meta.http import READ_ONLY, GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.observability import DispatcherMetrics, serve
from ruleengine.queue import connect_queue
from ruleengine.redact import setup_logging
from ruleengine.rules.meta.versions import version_warning
from ruleengine.settings import Settings, load_settings
from ruleengine.store.db import create_client, database, ensure_indexes
from ruleengine.store.formats import migrate_rules
from ruleengine.store.rules import RuleStore

log = logging.getLogger("ruleengine.dispatch")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``python -m ruleengine.dispatch``."""
    parser = argparse.ArgumentParser(
        prog="python -m ruleengine.dispatch",
        description="The ruleengine dispatcher: every RULEENGINE_TICK_SECONDS, enqueue one arq job"
        " per (due rule, ad account). Run two for a hot standby: only the holder of the Redis"
        " lease dispatches. SIGTERM/SIGINT finish the current sweep, then exit 0.",
    )
    parser.add_argument("--once", action="store_true", help="run a single sweep and exit")
    return parser


async def run_dispatcher(settings: Settings, *, once: bool) -> int:
    """Create the clients, tick until signalled (or once), close the clients."""
    if (warning := version_warning(settings.graph_version, utcnow().date())) is not None:
        log.warning("%s", warning)
    client = create_client(settings)
    db = database(client, settings)
    await ensure_indexes(db)
    await RuleStore(db).repair_orphans(now=utcnow())
    await migrate_rules(db, now=utcnow())
    queue = connect_queue(settings)
    session = GraphSession(settings, methods=READ_ONLY)
    metrics = DispatcherMetrics()
    serve(
        metrics.registry,
        settings.dispatcher_metrics_port,
        what="dispatcher",
        host=settings.metrics_host,
    )
    dispatcher = Dispatcher(
        settings, db=db, queue=queue, reader=GraphReader.from_settings(session), metrics=metrics
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if once:
            await dispatcher.tick()
        else:
            log.info("dispatcher %s ticking every %.1fs", dispatcher.owner, settings.tick_seconds)
            await dispatcher.run(stop)
    finally:
        with contextlib.suppress(RedisError, OSError):
            await dispatcher.lease.release()
        await session.close()
        await queue.aclose()
        await client.close()
        log.info("dispatcher %s stopped", dispatcher.owner)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m ruleengine.dispatch``."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level)
    try:
        return asyncio.run(run_dispatcher(settings, once=args.once))
    except RuleEngineError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
