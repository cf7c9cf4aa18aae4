"""Accounts named in answers: each item that names an ad account (``account``) also gets its
``account_name`` and ``currency``, so every screen shows money in the account's currency
(``RE.money`` in ``static/common.js``) beside the account's name — one query per answer.

An account no longer registered gets ``null`` for both: its money is shown as stored.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from aiohttp import web

from ruleengine.web.state import services

Item = MutableMapping[str, Any]


async def with_accounts(
    request: web.Request, items: Iterable[Item], *, key: str = "account"
) -> None:
    """Add ``account_name`` and ``currency`` to each of ``items`` (in place), from the
    account its ``key`` names."""
    listed = list(items)
    labels = await services(request).credentials.labels({str(i[key]) for i in listed if i.get(key)})
    for item in listed:
        label = labels.get(str(item.get(key)))
        item["account_name"] = label.name if label else None
        item["currency"] = label.currency if label else None
