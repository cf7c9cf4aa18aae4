"""Constants shared by the test modules and conftest (import this, never ``conftest``)."""

from __future__ import annotations

from datetime import UTC, datetime

# The sandbox's clock is frozen here in every test: 13:00 in New York, so "today" has
# spend on act_1001 (America/New_York) and the numbers never depend on when tests run.
SANDBOX_NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
SANDBOX_TOKEN = "EAAGsandboxTESTtoken0123456789abcdefXYZ"
SANDBOX_ACCOUNTS = {
    "act_1001": ("Demo Store US", "America/New_York", "USD"),
    "act_1002": ("Demo Store DE", "Europe/Berlin", "EUR"),
    "act_1003": ("Demo Store ID", "Asia/Jakarta", "USD"),
    "act_1004": ("Demo Store JP", "Asia/Tokyo", "JPY"),
}
#: The timezone of the sandbox's bench account act_2001 (its currency: USD).
BENCH_ZONE = "America/New_York"
