"""One Graph call as the sandbox sees it, whether it came over HTTP or inside a batch.

Both paths reduce a request to a :class:`GraphRequest` (method, versionless
path, string parameters, token) and answer with a :class:`GraphResponse`, so a
batch sub-request behaves exactly like the same request sent alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import orjson

from graph_sandbox.errors import GraphError
from graph_sandbox.query import Page

#: The Marketing API versions the sandbox serves, with Meta's expiry (None: not announced),
#: from Meta's "Marketing API version history" page as it stood with v27.0 out
#: (v27.0 2026-11-04, v26.0 2026-07-29, v25.0 2026-02-18 until 2027-02-23). An older
#: version, or one of these past its expiry by the sandbox clock, gets Meta's error 2635.
SERVED_VERSIONS: Final[dict[str, datetime | None]] = {
    "v27.0": None,
    "v26.0": None,
    "v25.0": datetime(2027, 2, 23, tzinfo=UTC),
}
DEFAULT_VERSION: Final = "v27.0"
_VERSION = re.compile(r"^v(\d+)\.(\d+)$")


@dataclass(frozen=True)
class GraphRequest:
    """A Graph call.

    Attributes:
        method: ``GET``, ``POST`` or ``DELETE`` (a DELETE only of a budget schedule).
        path: The path without its version prefix, e.g. ``/act_1001/campaigns``; ``/`` for the root.
        params: Query and body parameters as strings, without ``access_token``.
        token: The access token, or ``None`` when the caller sent none.
        base_url: Scheme, host and version, e.g. ``http://127.0.0.1:8081/v25.0``, for
            ``paging.next`` links.
        in_async_batch: True for a request run as part of an asynchronous batch (where
            Meta allows bigger copies).
        version: The version prefix it was sent under (``v27.0``), None without one.
    """

    method: str
    path: str
    params: Mapping[str, str]
    token: str | None
    base_url: str
    in_async_batch: bool = False
    version: str | None = None

    @cached_property
    def segments(self) -> tuple[str, ...]:
        """The non-empty parts of ``path``."""
        return tuple(part for part in self.path.split("/") if part)

    def param(self, name: str) -> str | None:
        """One parameter, or ``None``."""
        return self.params.get(name)


@dataclass
class GraphResponse:
    """What the sandbox answers to one call: status, JSON-able body, headers — and, under the
    ``lost_answers`` fault, how the answer never reaches the client (``bad_gateway``, ``reset``)."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    lost: str | None = None


def split_version(raw_path: str) -> tuple[str | None, str]:
    """``"v25.0/act_1/campaigns"`` → ``("v25.0", "/act_1/campaigns")``; no prefix: ``None``."""
    parts = [part for part in raw_path.split("/") if part]
    if parts and _VERSION.match(parts[0]):
        return parts[0], "/" + "/".join(parts[1:])
    return None, "/" + "/".join(parts)


def version_error(version: str | None, now: datetime) -> GraphError | None:
    """Meta's refusal of a call under ``version`` at ``now``; None when it is served.

    A versionless call is served as :data:`DEFAULT_VERSION` (Meta refuses unversioned
    Marketing API calls; the sandbox keeps them for its own tests and tools). An older
    version, or a served one past its expiry, gets ``(#2635) You are calling a deprecated
    version of the Ads API`` (OAuthException, as Meta answers it); a version newer than
    the sandbox knows is refused with error 100 (the sandbox's wording).
    """
    if version is None or (version in SERVED_VERSIONS and not _expired(version, now)):
        return None
    if _number(version) > _number(DEFAULT_VERSION):
        return GraphError(
            100,
            f"(#100) Unknown API version {version}: the sandbox models Meta's Marketing API "
            f"up to {DEFAULT_VERSION}",
        )
    return GraphError(
        2635,
        "(#2635) You are calling a deprecated version of the Ads API. Please update to the "
        f"latest version: {DEFAULT_VERSION}.",
        status=400,
    )


def _number(version: str) -> tuple[int, int]:
    """``"v27.0"`` → ``(27, 0)`` (``split_version`` lets only that shape through)."""
    major, _, minor = version.removeprefix("v").partition(".")
    return int(major), int(minor)


def _expired(version: str, now: datetime) -> bool:
    expires = SERVED_VERSIONS[version]
    return expires is not None and now >= expires


def item_request_parts(item: Mapping[str, Any]) -> tuple[str | None, str, dict[str, str]]:
    """The version, path and parameters of a batch item: its ``relative_url`` and ``body``.

    The body is form-encoded (a string) or a JSON object; its fields join the query's.
    """
    path_part, _, query = str(item["relative_url"]).partition("?")
    version, path = split_version(path_part)
    params = dict(parse_qsl(query, keep_blank_values=True))
    body = item.get("body")
    if isinstance(body, str):
        params |= dict(parse_qsl(body, keep_blank_values=True))
    elif isinstance(body, Mapping):
        params |= {name: as_param(value) for name, value in body.items()}
    return version, path, params


def as_param(value: Any) -> str:
    """A JSON body value as the string a form field would carry."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def split_token(
    params: Mapping[str, str], authorization: str | None
) -> tuple[dict[str, str], str | None]:
    """Take the access token out of the parameters (or the ``Authorization`` header)."""
    rest = {name: value for name, value in params.items() if name != "access_token"}
    token = params.get("access_token") or None
    if token is None and authorization:
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() in ("oauth", "bearer") and credentials.strip():
            token = credentials.strip()
    return rest, token


def page_body(req: GraphRequest, data: list[Any], page: Page[Any]) -> dict[str, Any]:
    """``{"data": …, "paging": …}`` the way Meta pages an edge; no ``next`` on the last page."""
    if not data:
        return {"data": []}
    paging: dict[str, Any] = {"cursors": {"before": page.before, "after": page.after}}
    if page.has_previous and page.before:
        paging["previous"] = _page_url(req, "before", page.before)
    if page.has_next and page.after:
        paging["next"] = _page_url(req, "after", page.after)
    return {"data": data, "paging": paging}


def _page_url(req: GraphRequest, direction: str, cursor: str) -> str:
    # Like Meta's, the link carries the access token: a client must treat it as secret.
    params = {k: v for k, v in req.params.items() if k not in ("after", "before")}
    params[direction] = cursor
    if req.token:
        params["access_token"] = req.token
    return f"{req.base_url}{req.path}?{urlencode(params)}"
