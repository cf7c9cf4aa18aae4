"""A sandbox playing an app created since 2026-11-04: Graph's legacy features are refused.

Meta's blog ("Introducing Graph API v27.0 and Marketing API v27.0", 2026-11-04): new apps
cannot use multi-ID requests, date/time formatting, HTTP method override, field aliases,
JSONP callbacks or asynchronous batch requests, in any Graph API version.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from sandbox_helpers import NOON_ISH, Sandbox, running_sandbox


@pytest.fixture
async def new_app() -> AsyncIterator[Sandbox]:
    async with running_sandbox(seed=1) as box:
        await box.admin.set_clock(NOON_ISH)
        yield box


async def _campaigns(box: Sandbox) -> list[str]:
    return [c["id"] for c in (await box.get("/act_1001/campaigns", fields="id")).body["data"]]


LEGACY_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/", {"ids": "{c0},{c1}", "fields": "name"}),
    ("GET", "/{c0}", {"fields": "created_time", "date_format": "U"}),
    ("GET", "/{c0}", {"method": "post", "name": "renamed by override"}),
    ("GET", "/{c0}", {"fields": "id,name.as(title)"}),
    ("GET", "/{c0}", {"fields": "name", "callback": "jsonp_cb"}),
]


@pytest.mark.parametrize(("method", "path", "params"), LEGACY_CALLS)
async def test_each_legacy_feature_gets_metas_capability_error(
    new_app: Sandbox, method: str, path: str, params: dict[str, Any]
) -> None:
    c0, c1 = (await _campaigns(new_app))[:2]
    filled = {k: v.format(c0=c0, c1=c1) for k, v in params.items()}
    reply = await new_app.get(path.format(c0=c0), **filled)
    assert reply.status == 400
    assert (reply.error["code"], reply.error["type"]) == (3, "OAuthException")
    assert reply.error["message"] == (
        "(#3) Application does not have the capability to make this API call."
    )
    assert "November 4, 2026" in reply.error["error_user_msg"]
    assert (await new_app.admin.object(c0))["name"] != "renamed by override"


async def test_an_asynchronous_batch_request_is_refused_and_copies_nothing(
    new_app: Sandbox,
) -> None:
    c0 = (await _campaigns(new_app))[0]
    before = (await new_app.admin.world())["campaigns"]
    adbatch = [{"name": "copy", "relative_url": f"{c0}/copies", "body": "deep_copy=true"}]
    reply = await new_app.post(
        "/act_1001/async_batch_requests", name="copy", adbatch=orjson.dumps(adbatch).decode()
    )
    assert reply.error["code"] == 3
    assert "asynchronous batch requests" in reply.error["error_user_msg"]
    assert (await new_app.admin.world())["campaigns"] == before


async def test_the_same_calls_pass_for_a_legacy_app_and_the_batch_api_for_both(
    legacy_sandbox: Sandbox, new_app: Sandbox
) -> None:
    sandbox = legacy_sandbox
    assert (await new_app.admin.world())["app"] == "new"  # the default
    c0, c1 = (await _campaigns(sandbox))[:2]
    assert (await sandbox.admin.world())["app"] == "legacy"
    many = await sandbox.get("/", ids=f"{c0},{c1}", fields="name")
    assert sorted(many.body) == sorted([c0, c1])
    # what remains for a new app: one GET per object, in a Batch API call
    items = [{"method": "GET", "relative_url": f"{c}?fields=name"} for c in (c0, c1)]
    answers = (await new_app.batch(items)).body
    assert [a["code"] for a in answers] == [200, 200]
    # a legacy feature inside a batch item is refused like the same call sent alone
    item = [{"method": "GET", "relative_url": f"?ids={c0}&fields=name"}]
    (refused,) = (await new_app.batch(item)).body
    assert orjson.loads(refused["body"])["error"]["code"] == 3
