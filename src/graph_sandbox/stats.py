"""Counters of what clients asked the sandbox, for tests and benchmarks to assert on.

HTTP requests and counted calls are kept apart because Meta bills the second:
a batch of 10 sub-requests is 1 HTTP request and 10 counted calls.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: Kinds of counted calls, always present in the snapshot (zero or not).
KINDS = ("accounts", "list", "read", "insights", "write", "copies", "activities")


class Stats:
    """Request and call counters since the last reset."""

    def __init__(self) -> None:
        self.http_requests = 0
        self.counted_calls = 0
        self.http_by_method: Counter[str] = Counter()
        self.calls_by_kind: Counter[str] = Counter()
        self.calls_by_account: Counter[str] = Counter()
        self.errors_by_code: Counter[str] = Counter()
        self.in_flight = 0  # Graph requests being answered now (a delayed write still lands)
        self.writes_in_flight = 0  # writes received and still delayed: not landed yet
        self.write_calls_in_flight = 0  # calls carrying writes, from their arrival to the answer
        self.write_calls_peak = 0  # the most such calls ever in flight at once

    def http(self, method: str) -> None:
        """One HTTP request to the Graph routes (a batch is one)."""
        self.http_requests += 1
        self.http_by_method[method] += 1

    def call(self, kind: str) -> None:
        """One call Meta would count (each batch sub-request is one)."""
        self.counted_calls += 1
        self.calls_by_kind[kind] += 1

    def accounts(self, accounts: tuple[str, ...]) -> None:
        """The ad accounts the current call touched."""
        self.calls_by_account.update(accounts)

    def call_started(self, *, writes: bool) -> None:
        """A Graph call arrived (``writes``: it carries writes); answered: :meth:`call_finished`."""
        if writes:
            self.write_calls_in_flight += 1
            self.write_calls_peak = max(self.write_calls_peak, self.write_calls_in_flight)

    def call_finished(self, *, writes: bool) -> None:
        """A Graph call was answered."""
        self.write_calls_in_flight -= writes

    def error(self, code: int) -> None:
        """A call or a batch answered with Meta error ``code``."""
        self.errors_by_code[str(code)] += 1

    def snapshot(self) -> dict[str, Any]:
        """The counters as JSON."""
        return {
            "http_requests": self.http_requests,
            "counted_calls": self.counted_calls,
            "http_by_method": {"GET": 0, "POST": 0, **self.http_by_method},
            "calls_by_kind": {kind: 0 for kind in KINDS} | dict(self.calls_by_kind),
            "calls_by_account": dict(self.calls_by_account),
            "errors_by_code": dict(self.errors_by_code),
            "in_flight": self.in_flight,
            "writes_in_flight": self.writes_in_flight,
            "write_calls_peak": self.write_calls_peak,
        }
