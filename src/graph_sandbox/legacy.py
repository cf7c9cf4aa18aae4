"""What a new app may no longer use: Graph's legacy protocol features, refused in "new app" mode.

"Starting November 4, 2026, new apps cannot use multi-ID requests, date/time formatting,
HTTP method override, field aliases, JSONP callbacks, or asynchronous batch requests [...]
This applies across all Graph API versions." (Meta's blog, "Introducing Graph API v27.0 and
Marketing API v27.0", 2026-11-04.) The sandbox is a new app unless it was started with
``--app legacy`` (or reset with ``"app": "legacy"``): every app created today is one.

Meta's stored changelogs do not give the error such a call gets. The sandbox answers with
Meta's generic capability error, ``(#3) Application does not have the capability to make
this API call.`` (code 3, "API Method — capability or permissions issue" in Meta's
error-handling guide), with an ``error_user_msg`` of its own naming the feature.
"""

from __future__ import annotations

import re
from typing import Final

from graph_sandbox.errors import GraphError
from graph_sandbox.protocol import GraphRequest

#: The app modes: ``new`` (created on or after 2026-11-04) and ``legacy`` (created before).
APP_MODES: Final = ("new", "legacy")
_ALIAS = re.compile(r"\.as\(")


def legacy_feature(req: GraphRequest, kind: str) -> str | None:
    """The legacy feature a call uses (the first found), or None.

    Args:
        req: The call.
        kind: Its kind (the router's classification): ``async_batch`` is a new
            asynchronous batch request.
    """
    params = req.params
    if kind == "async_batch":
        return "asynchronous batch requests (POST act_{id}/async_batch_requests)"
    if not req.segments and "ids" in params:
        return "multi-ID requests (?ids=)"
    if "date_format" in params:
        return "date/time formatting (date_format)"
    if "method" in params:
        return "HTTP method override (method=)"
    if "callback" in params:
        return "JSONP callbacks (callback=)"
    if _ALIAS.search(params.get("fields") or ""):
        return "field aliases (fields=….as(…))"
    return None


def not_for_new_apps(feature: str) -> GraphError:
    """Meta's capability error for ``feature`` (see the module docstring)."""
    return GraphError(
        3,
        "(#3) Application does not have the capability to make this API call.",
        status=400,
        user_title="Not available to new apps",
        user_msg=(
            f"Apps created on or after November 4, 2026 cannot use {feature}, in any "
            "Graph API version."
        ),
    )
