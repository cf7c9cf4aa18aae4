"""``python -m graph_sandbox``: serve the Graph API sandbox until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from graph_sandbox.app import create_app
from graph_sandbox.legacy import APP_MODES
from graph_sandbox.scenarios import SCENARIOS

_EPILOG = """\
examples:
  python -m graph_sandbox                    demo world on 127.0.0.1:8081
  python -m graph_sandbox --token EAAGmine   also accept EAAGmine for every ad account
  python -m graph_sandbox --port 0 --seed 2  another world on a free port
  python -m graph_sandbox --scenario bench --accounts 4 --campaigns 500

admin routes (no token, not counted; for tests and benchmarks):
  GET|DELETE /_sandbox/stats         counters of HTTP requests and counted calls
  POST       /_sandbox/reset         rebuild the world, clear everything
  GET|POST|DELETE /_sandbox/faults   latency, error rate, error rules, null items
  GET        /_sandbox/writes        every POST to an object, in order
  GET        /_sandbox/objects/{id}  a stored object, raw
  GET|POST   /_sandbox/clock         freeze, move or release the clock
  GET|POST   /_sandbox/limits        hourly call capacities and usage
  GET        /_sandbox/world         seed, scenario, account ids
  GET|POST   /_sandbox/tokens        issued tokens; issue one (accounts, permissions, expiry)
  POST       /_sandbox/tokens/update expire or invalidate a token, change its permissions

The process stops cleanly (exit 0) on SIGTERM or SIGINT.
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line of the sandbox."""
    parser = argparse.ArgumentParser(
        prog="python -m graph_sandbox",
        description=(
            "A local simulator of Meta's Marketing API v25.0–v27.0 (ad accounts, campaigns, "
            "ad sets, Insights, writes, copies, the Batch API, rate-limit headers, fault "
            "injection). "
            "Only tokens it issued are accepted: one per ad account (GET /_sandbox/tokens), "
            "the --token ones, and those made through POST /_sandbox/tokens. See docs/sandbox.md."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8081, help="port to bind; 0 picks a free one (default 8081)"
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="world seed: same seed, same world (default 1)"
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="demo",
        help="demo: 3 varied accounts; bench: many uniform campaigns (default demo)",
    )
    parser.add_argument(
        "--accounts", type=int, help="number of ad accounts (default: demo 3, bench 3)"
    )
    parser.add_argument(
        "--campaigns",
        type=int,
        help="campaigns per ad account (default: demo 12, bench 500)",
    )
    parser.add_argument(
        "--adsets", type=int, help="ad sets per campaign (default: demo 2-3, bench 1)"
    )
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="TOKEN",
        help="accept TOKEN for every ad account, also after resets (repeatable)",
    )
    parser.add_argument(
        "--app",
        choices=APP_MODES,
        default="new",
        help="new: an app created since 2026-11-04, refused Graph's legacy features (multi-ID,"
        " date_format, method override, field aliases, JSONP, asynchronous batch requests);"
        " legacy: an older app (default new)",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="log every request to stderr (off by default)"
    )
    return parser


async def serve(app: web.Application, *, host: str, port: int, banner: str) -> None:
    """Serve ``app`` on ``host:port``, print ``banner`` with the real address, stop on a signal."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Handlers go in before the banner: whoever reads it may signal at once.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(app, access_log=logging.getLogger("aiohttp.access"))
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_port = runner.addresses[0][1]
        print(banner.format(url=f"http://{host}:{bound_port}"), flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.access_log:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        app = create_app(
            seed=args.seed,
            scenario=args.scenario,
            accounts=args.accounts,
            campaigns_per_account=args.campaigns,
            adsets_per_campaign=args.adsets,
            tokens=args.token,
            app=args.app,
        )
    except ValueError as exc:
        parser.error(str(exc))
    banner = f"sandbox listening on {{url}} (scenario {args.scenario}, seed {args.seed})"
    try:
        asyncio.run(serve(app, host=args.host, port=args.port, banner=banner))
    except OSError as exc:
        print(f"sandbox could not listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
