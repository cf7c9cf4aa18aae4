"""The Graph API transport: one aiohttp session per process, typed errors, usage and cost.

A :class:`GraphSession` refuses every HTTP method it was not built for: the
dispatcher's session allows only GET, so it cannot change anything at Meta
whatever code runs in it. ``REPORT`` is the one POST a read-only caller may send: it
starts an asynchronous Insights report run (``POST act_…/insights``), which creates a
report and changes no ad object. Views made with :meth:`GraphSession.view` share the
process's aiohttp session but carry their own allowed methods and their own
cost counter (so one job's Graph cost is not mixed with another's).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import orjson

from ruleengine.meta.errors import (
    GraphError,
    MalformedResponseError,
    RateLimitError,
    TransientError,
    error_from_body,
)
from ruleengine.redact import REDACTOR
from ruleengine.settings import Settings

log = logging.getLogger(__name__)

# "BATCH" is the Batch API call: a POST to the root whose sub-requests are all GETs.
BATCH: Final = "BATCH"
# "REPORT" is a POST to an ad account's insights edge: an async report run, nothing else.
REPORT: Final = "REPORT"
READ_ONLY: Final = frozenset({"GET"})
READ_AND_BATCH: Final = frozenset({"GET", BATCH})
READ_AND_REPORT: Final = frozenset({"GET", BATCH, REPORT})
READ_WRITE: Final = frozenset({"GET", BATCH, REPORT, "POST", "DELETE"})
_REPORT_PATH = re.compile(r"act_[0-9]{1,30}/insights")


class ReadOnlyViolation(RuntimeError):
    """A session was asked for an HTTP method it does not allow (a programming error)."""


@dataclass
class Cost:
    """Graph cost as Meta counts it: HTTP requests, and calls (every batch item is a call)."""

    http_requests: int = 0
    counted_calls: int = 0

    def add(self, *, http_requests: int, counted_calls: int) -> None:
        """Account for one exchange."""
        self.http_requests += http_requests
        self.counted_calls += counted_calls

    def as_dict(self) -> dict[str, int]:
        """JSON-ready form."""
        return {"http_requests": self.http_requests, "counted_calls": self.counted_calls}


def _json_header(headers: Mapping[str, str], name: str) -> Any:
    raw = headers.get(name)
    if raw is None:  # batch items carry their headers as a plain dict: match any case
        lowered = name.lower()
        raw = next((v for k, v in headers.items() if k.lower() == lowered), None)
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _pct(*values: Any) -> float:
    # bool is an int to Python, not a percentage to Meta
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return max(numbers, default=0.0)


@dataclass(frozen=True)
class Usage:
    """What Meta's usage headers say, in percent of the allowance, and when access returns."""

    app_pct: float = 0.0
    account_pct: float = 0.0
    business_pct: float = 0.0
    regain_access_s: float | None = None

    @property
    def max_pct(self) -> float:
        """The highest of the three usages."""
        return max(self.app_pct, self.account_pct, self.business_pct)

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Usage:
        """Parse ``X-App-Usage``, ``X-Ad-Account-Usage`` and ``X-Business-Use-Case-Usage``."""
        app = _json_header(headers, "X-App-Usage") or {}
        account = _json_header(headers, "X-Ad-Account-Usage") or {}
        business = _json_header(headers, "X-Business-Use-Case-Usage") or {}
        entries = (
            [e for v in business.values() if isinstance(v, list) for e in v]
            if isinstance(business, dict)
            else []
        )
        regain = [e.get("estimated_time_to_regain_access") for e in entries if isinstance(e, dict)]
        regain_min = max((float(r) for r in regain if isinstance(r, int | float)), default=None)
        return cls(
            app_pct=_pct(*(app.values() if isinstance(app, dict) else [])),
            account_pct=_pct(account.get("acc_id_util_pct") if isinstance(account, dict) else None),
            business_pct=_pct(
                *(
                    e.get(k)
                    for e in entries
                    if isinstance(e, dict)
                    for k in ("call_count", "total_time", "total_cputime")
                )
            ),
            regain_access_s=None if regain_min is None else regain_min * 60,
        )


@dataclass(frozen=True)
class InsightsThrottle:
    """Meta's ``X-FB-Ads-Insights-Throttle``: how much of the Insights load allowance is used.

    ``app_pct`` is the app's share, ``account_pct`` the ad account's, in percent; near 100
    Meta starts refusing Insights calls (code 4, subcodes 1504022/1504039).
    """

    app_pct: float = 0.0
    account_pct: float = 0.0
    access_tier: str | None = None

    @property
    def max_pct(self) -> float:
        """The higher of the two."""
        return max(self.app_pct, self.account_pct)

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> InsightsThrottle | None:
        """Parse the header; None when the response carries none (not an Insights call)."""
        value = _json_header(headers, "X-FB-Ads-Insights-Throttle")
        if not isinstance(value, dict):
            return None
        tier = value.get("ads_api_access_tier")
        return cls(
            app_pct=_pct(value.get("app_id_util_pct")),
            account_pct=_pct(value.get("acc_id_util_pct")),
            access_tier=tier if isinstance(tier, str) else None,
        )


@dataclass
class _Shared:
    """What every view of one process's session shares."""

    settings: Settings
    http: aiohttp.ClientSession | None = None
    usage: dict[str, Usage] = field(default_factory=dict)
    throttle: dict[str, InsightsThrottle] = field(default_factory=dict)

    def client(self) -> aiohttp.ClientSession:
        if self.http is None or self.http.closed:
            self.http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.graph_timeout_s),
                json_serialize=lambda value: orjson.dumps(value).decode(),
                connector=aiohttp.TCPConnector(limit=100),
                headers={"User-Agent": "ruleengine"},
            )
        return self.http


def _only_gets(form: Mapping[str, Any] | None) -> None:
    items = (form or {}).get("batch")
    if not isinstance(items, list) or any(
        not isinstance(item, dict) or str(item.get("method", "")).upper() != "GET" for item in items
    ):
        raise ReadOnlyViolation("a batch call may carry GET sub-requests only")


def _only_report(path: str) -> None:
    if not _REPORT_PATH.fullmatch(path.strip("/")):
        raise ReadOnlyViolation(f"a report run is a POST to act_…/insights only; refusing {path}")


def encode_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Graph parameters as strings: lists and dicts as JSON, booleans as true/false."""
    encoded: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            encoded[key] = "true" if value else "false"
        elif isinstance(value, list | dict):
            encoded[key] = orjson.dumps(value).decode()
        else:
            encoded[key] = str(value)
    return encoded


class GraphSession:
    """HTTP to the Graph API: version prefix, auth header, typed errors, usage, cost.

    Args:
        settings: the process's settings (Graph URL and version, timeout).
        methods: the HTTP methods this session may send; anything else raises
            :class:`ReadOnlyViolation` before touching the network.
    """

    def __init__(self, settings: Settings, *, methods: frozenset[str] = READ_ONLY) -> None:
        self._shared = _Shared(settings)
        self.methods = methods
        self.cost = Cost()

    def view(
        self, *, methods: frozenset[str] | None = None, cost: Cost | None = None
    ) -> GraphSession:
        """A session sharing this one's connection pool, with fewer methods and/or its own cost."""
        allowed = self.methods if methods is None else methods
        if not allowed <= self.methods:
            raise ReadOnlyViolation(
                f"a view cannot widen {sorted(self.methods)} to {sorted(allowed)}"
            )
        other = GraphSession.__new__(GraphSession)
        other._shared = self._shared
        other.methods = allowed
        other.cost = cost if cost is not None else Cost()
        return other

    @property
    def settings(self) -> Settings:
        """The settings the session was built with."""
        return self._shared.settings

    def usage(self, account_id: str | None = None) -> Usage:
        """The latest usage Meta reported (for an ad account, or the app)."""
        return self._shared.usage.get(account_id or "app", Usage())

    def record_usage(self, headers: Mapping[str, str], account_id: str | None) -> Usage:
        """Remember the usage headers of a response (and its Insights throttle, if any)."""
        usage = Usage.from_headers(headers)
        self._shared.usage[account_id or "app"] = usage
        if usage.max_pct >= 75:
            log.warning("Graph usage at %.0f%% for %s", usage.max_pct, account_id or "the app")
        self.record_throttle(headers, account_id)
        return usage

    def insights_throttle(self, account_id: str | None = None) -> InsightsThrottle:
        """The latest Insights throttle Meta reported for an ad account (zero before any)."""
        return self._shared.throttle.get(account_id or "app", InsightsThrottle())

    def record_throttle(self, headers: Mapping[str, str], account_id: str | None) -> None:
        """Remember ``X-FB-Ads-Insights-Throttle`` when a response (or batch item) has it."""
        throttle = InsightsThrottle.from_headers(headers)
        if throttle is not None:
            self._shared.throttle[account_id or "app"] = throttle

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str,
        params: Mapping[str, Any] | None = None,
        form: Mapping[str, Any] | None = None,
        counted_calls: int = 1,
        account_id: str | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON body or raise a :class:`GraphError`.

        ``method`` ``BATCH`` sends a Batch API call (a POST to the root) and is refused
        unless every sub-request in ``form["batch"]`` is a GET; ``REPORT`` sends a POST
        and is refused unless ``path`` is an ad account's insights edge.
        """
        method = method.upper()
        if method not in self.methods:
            raise ReadOnlyViolation(
                f"this Graph session allows only {sorted(self.methods)}; refusing {method} {path}"
            )
        if method == BATCH:
            _only_gets(form)
            method, path = "POST", ""
        elif method == REPORT:
            _only_report(path)
            method = "POST"
        REDACTOR.register(token)
        url = f"{self.settings.graph_base}/{path.lstrip('/')}"
        started = time.perf_counter()
        self.cost.add(http_requests=1, counted_calls=counted_calls)
        try:
            async with self._shared.client().request(
                method,
                url,
                params=encode_params(params or {}),
                data=encode_params(form) if form is not None else None,
                headers={"Authorization": f"Bearer {token}"},
            ) as response:
                raw = await response.read()
                status, headers = response.status, response.headers
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TransientError(
                f"network error talking to Graph: {type(exc).__name__}: {exc}"
            ) from None
        usage = self.record_usage(headers, account_id)
        log.debug("%s %s -> %s in %.3fs", method, path, status, time.perf_counter() - started)
        return self._decode(raw, status, usage)

    def _decode(self, raw: bytes, status: int, usage: Usage) -> Any:
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            kind = TransientError if status >= 500 else MalformedResponseError
            raise kind(
                f"Graph answered HTTP {status} with a body that is not JSON", http_status=status
            ) from None
        if status >= 400 or (isinstance(body, dict) and "error" in body):
            raise error_from_body(
                body,
                http_status=status,
                retry_after_s=usage.regain_access_s,
                throttle_wait_s=self.settings.insights_throttle_wait_s,
            )
        return body

    async def close(self) -> None:
        """Close the shared aiohttp session (call once, from the process's shutdown)."""
        if self._shared.http is not None and not self._shared.http.closed:
            await self._shared.http.close()


__all__ = [
    "BATCH",
    "READ_AND_BATCH",
    "READ_AND_REPORT",
    "READ_ONLY",
    "READ_WRITE",
    "REPORT",
    "Cost",
    "GraphError",
    "GraphSession",
    "InsightsThrottle",
    "RateLimitError",
    "ReadOnlyViolation",
    "Usage",
]
