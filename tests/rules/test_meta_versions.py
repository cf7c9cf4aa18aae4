"""Meta's Marketing API versions: the default, and the start-up warning before an expiry."""

from __future__ import annotations

from datetime import date

import pytest

from ruleengine.rules.meta.versions import (
    DEFAULT_GRAPH_VERSION,
    EXPIRY_WARNING_DAYS,
    MARKETING_API_VERSIONS,
    version_warning,
)
from ruleengine.settings import Settings


def test_the_default_is_metas_newest_version() -> None:
    assert DEFAULT_GRAPH_VERSION == "v27.0"
    assert Settings().graph_version == DEFAULT_GRAPH_VERSION
    released = [v.released for v in MARKETING_API_VERSIONS]
    assert released == sorted(released, reverse=True)


@pytest.mark.parametrize(
    ("today", "expected"),
    [
        (date(2026, 11, 24), None),  # 91 days before 2027-02-23
        (date(2026, 11, 25), "expires on 2027-02-23 (90 days left)"),
        (date(2027, 2, 23), "expires on 2027-02-23 (0 days left)"),
        (date(2027, 2, 24), "expired on 2027-02-23"),
    ],
)
def test_v25_warns_within_90_days_of_its_expiry(today: date, expected: str | None) -> None:
    warning = version_warning("v25.0", today)
    if expected is None:
        assert warning is None
    else:
        assert warning is not None and expected in warning
        assert "v27.0" in warning  # says what to move to
    assert EXPIRY_WARNING_DAYS == 90


def test_versions_without_an_expiry_and_unknown_ones() -> None:
    assert version_warning("v27.0", date(2027, 6, 1)) is None
    assert version_warning("v26.0", date(2027, 6, 1)) is None
    unknown = version_warning("v99.0", date(2026, 12, 1))
    assert unknown is not None and "not a Marketing API version" in unknown


def test_a_malformed_version_is_refused_by_the_settings() -> None:
    with pytest.raises(ValueError, match="graph_version"):
        Settings(graph_version="27")
