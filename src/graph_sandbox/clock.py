"""The sandbox's clock: real time by default, freezable and movable by tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class SandboxClock:
    """Tells the sandbox what time it is.

    Real time unless frozen; ``advance`` moves a frozen clock, or shifts real
    time by an offset, so tests can cross an hour or a day without waiting.
    """

    def __init__(self) -> None:
        self._frozen_at: datetime | None = None
        self._offset = timedelta(0)

    @property
    def frozen(self) -> bool:
        """True while the clock is stopped at a fixed instant."""
        return self._frozen_at is not None

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        if self._frozen_at is not None:
            return self._frozen_at
        return datetime.now(UTC) + self._offset

    def freeze(self, at: datetime) -> None:
        """Stop the clock at ``at`` (a naive datetime is taken as UTC)."""
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        self._frozen_at = at.astimezone(UTC)

    def advance(self, seconds: float) -> None:
        """Move the clock forward (or back, with a negative number)."""
        if self._frozen_at is not None:
            self._frozen_at += timedelta(seconds=seconds)
        else:
            self._offset += timedelta(seconds=seconds)

    def reset(self) -> None:
        """Return to real time."""
        self._frozen_at = None
        self._offset = timedelta(0)
