"""Marketing API versions: when Meta released each and when it stops answering it.

Meta publishes a version's expiry only once a later version is out ("TBD" until then); a
call to an expired version fails (``(#2635) You are calling a deprecated version of the
Ads API``). Every process (dispatcher, worker, web, ``ruleengine up``) warns at start-up
when the configured ``graph_version`` is within :data:`EXPIRY_WARNING_DAYS` of its expiry,
or past it, or not a version Meta released (:func:`version_warning`; pure: the callers log).

Source: Meta's "Marketing API version history" page (developers.facebook.com/documentation/
ads-commerce/marketing-api/marketing-api-changelog/versions), as stored with v27.0 listed:
v27.0 released 2026-11-04 (expiry TBD), v26.0 2026-07-29 (TBD), v25.0 2026-02-18 until
2027-02-23, v24.0 2025-10-08 until 2026-11-10, v23.0 2025-05-29 until 2026-06-09, v22.0
2025-01-21 until 2026-02-19. An older copy of that page and the v24.0 changelog give v24.0
"until October 6, 2026"; the newer listing (the one that knows v27.0) is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Final

#: How long before a version's expiry the processes start warning.
EXPIRY_WARNING_DAYS: Final = 90


@dataclass(frozen=True)
class ApiVersion:
    """One Marketing API version: its name, release date and expiry (None: not announced)."""

    name: str
    released: date
    expires: date | None


#: Meta's versions, newest first (see the module docstring for the source).
MARKETING_API_VERSIONS: Final = (
    ApiVersion("v27.0", date(2026, 11, 4), None),
    ApiVersion("v26.0", date(2026, 7, 29), None),
    ApiVersion("v25.0", date(2026, 2, 18), date(2027, 2, 23)),
    ApiVersion("v24.0", date(2025, 10, 8), date(2026, 11, 10)),
    ApiVersion("v23.0", date(2025, 5, 29), date(2026, 6, 9)),
    ApiVersion("v22.0", date(2025, 1, 21), date(2026, 2, 19)),
)
#: The version the engine calls unless ``RULEENGINE_GRAPH_VERSION`` says otherwise.
DEFAULT_GRAPH_VERSION: Final = MARKETING_API_VERSIONS[0].name


def known_version(name: str) -> ApiVersion | None:
    """The table's entry for ``name`` (``"v25.0"``), or None."""
    return next((v for v in MARKETING_API_VERSIONS if v.name == name), None)


def version_warning(name: str, today: date, *, warn_days: int = EXPIRY_WARNING_DAYS) -> str | None:
    """What to warn about the configured version on ``today``; None when nothing is due.

    A version past its expiry, within ``warn_days`` of it, or missing from Meta's table
    (a typo, or a version newer than this table) gets a sentence that says what to do.
    """
    newest = MARKETING_API_VERSIONS[0].name
    version = known_version(name)
    if version is None:
        return (
            f"RULEENGINE_GRAPH_VERSION={name} is not a Marketing API version this release "
            f"knows (newest known: {newest}); check it against Meta's version list"
        )
    if version.expires is None:
        return None
    left = (version.expires - today).days
    if left < 0:
        return (
            f"Marketing API {name} expired on {version.expires.isoformat()}: Meta refuses "
            f"its calls; set RULEENGINE_GRAPH_VERSION={newest}"
        )
    if left <= warn_days:
        return (
            f"Marketing API {name} expires on {version.expires.isoformat()} ({left} days "
            f"left): move RULEENGINE_GRAPH_VERSION to {newest}"
        )
    return None
