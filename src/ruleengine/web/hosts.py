"""Which ``Host`` an API request may name: the web app's own names, never a stranger's.

A page on another site cannot read the API of a web app on loopback — unless its domain
is made to resolve to 127.0.0.1 (DNS rebinding): then the browser treats the API as the
page's own origin, and with reads open it could read every rule and record. Such a request
names the stranger's domain in ``Host``, so ``/api/`` answers only requests whose ``Host``
is one of the app's: loopback names, an IP address (a page reached by an address is that
address's own origin, which no other site can borrow), the host of
``RULEENGINE_WEB_PUBLIC_URL``, ``RULEENGINE_WEB_HOST`` when it is a name, and
``RULEENGINE_WEB_ALLOWED_HOSTS``. Any other is answered ``421 Misdirected Request``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ruleengine.settings import Settings
from ruleengine.web.jsonio import ApiError, error_response

LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def host_name(header: str) -> str:
    """The name of a ``Host`` header value, without its port, lower case (``[::1]:8080`` →
    ``::1``)."""
    value = header.strip().lower()
    if value.startswith("["):  # an IPv6 literal, maybe with a port
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """The names the app answers to, besides loopback names and addresses."""
    names: set[str] = {host_name(h) for h in settings.web_allowed_hosts}
    if settings.web_public_url:
        public = urlsplit(settings.web_public_url).hostname
        if public:
            names.add(public.lower())
    if settings.web_host and not _is_address(host_name(settings.web_host)):
        names.add(host_name(settings.web_host))
    return frozenset(n for n in names if n)


def host_allowed(header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request naming ``header`` as its ``Host`` is the app's own."""
    if not header:
        return False  # HTTP/1.1 requires one; a client that sends none is no browser page
    name = host_name(header)
    if _is_address(name) or name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    return name in allowed


def host_middleware(settings: Settings) -> Middleware:
    """A middleware answering ``421`` to an ``/api/`` request for a host not the app's."""
    allowed = allowed_hosts(settings)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api/") and not host_allowed(
            request.headers.get("Host"), allowed
        ):
            return error_response(
                ApiError(
                    421,
                    "this web app does not answer for that host name: reach it by its own"
                    " name (RULEENGINE_WEB_PUBLIC_URL) or add the name to"
                    " RULEENGINE_WEB_ALLOWED_HOSTS",
                )
            )
        return await handler(request)

    return middleware
