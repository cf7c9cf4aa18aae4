"""Asynchronous Insights report runs (``AdReportRun``), and how big a synchronous request may be.

A run holds the rows its ``POST …/insights`` asked for, computed at that instant, and
moves one step per read of ``GET /{report_run_id}``: ``Job Not Started`` (0 %), then
``Job Running``, then its outcome at the ``report_polls``-th read — ``Job Completed``
(100 %), or ``Job Failed`` / ``Job Skipped`` when the admin API queued that outcome. The
sandbox never sleeps: progress is counted in reads, not in time.

Synchronous Insights that would aggregate more than ``sync_max_cells`` (ad sets × days
of the period) time out as Meta's do: code 100 subcode 1504018, or code 2 subcode
1504038, "Please reduce the amount of data you're asking for, then retry your request".
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from graph_sandbox.attribution_lag import AttributionLag
from graph_sandbox.errors import GraphError

COMPLETED: Final = "Job Completed"
RUNNING: Final = "Job Running"
NOT_STARTED: Final = "Job Not Started"
Outcome = Literal["Job Completed", "Job Failed", "Job Skipped"]
#: Meta's code and subcode of a report that failed to generate (Ads Insights error codes).
REPORT_FAILED: Final = (-2, 2490547)
RUN_FIELDS: Final = frozenset(
    {
        "id",
        "account_id",
        "async_status",
        "async_percent_completion",
        "date_start",
        "date_stop",
        "time_ref",
        "time_completed",
        "is_running",
        "error_code",
        "error_subcode",
        "error_message",
        "error_user_title",
        "error_user_msg",
    }
)


class InsightsSettings(BaseModel):
    """Everything ``POST /_sandbox/insights`` can set; defaults leave every request alone."""

    model_config = ConfigDict(extra="forbid")

    sync_max_cells: int = Field(default=100_000_000, ge=1)
    sync_timeout_subcode: Literal[1504018, 1504038] = 1504018
    report_polls: int = Field(default=3, ge=1, le=1000)
    report_outcomes: list[Outcome] = Field(default_factory=list)
    #: Rows per page of synchronous Insights, whatever ``limit`` asks (Meta may answer
    #: fewer rows than asked for and a next page); None: ``limit`` decides.
    page_max_rows: int | None = Field(default=None, ge=1)
    #: Conversions that mature after the day they belong to (off: a past day never changes).
    attribution_lag: AttributionLag = Field(default_factory=AttributionLag)


def sync_timeout(subcode: int) -> GraphError:
    """A synchronous Insights request asked for more than the sandbox answers in time."""
    return GraphError(
        100 if subcode == 1504018 else 2,
        "Please reduce the amount of data you're asking for, then retry your request",
        subcode=subcode,
        user_title="Request Timed Out",
        user_msg="Your request timed out. Try a smaller date range, fetch less data, "
        "or use async jobs.",
    )


@dataclass
class ReportRun:
    """One async report: what it found, and how far the reads have moved it."""

    id: str
    account: str
    rows: list[tuple[str, dict[str, Any]]]
    period: tuple[date, date]
    created: datetime
    polls: int
    outcome: Outcome
    reads: int = 0
    completed: datetime | None = None

    @property
    def status(self) -> str:
        """``async_status`` after the reads so far."""
        if self.reads >= self.polls:
            return self.outcome
        return NOT_STARTED if self.reads <= 1 else RUNNING

    @property
    def percent(self) -> int:
        """``async_percent_completion`` after the reads so far."""
        if self.reads >= self.polls:
            return 100 if self.outcome == COMPLETED else self._step()
        return self._step()

    def _step(self) -> int:
        if self.polls <= 1 or self.reads <= 1:
            return 0
        return min(99, round(100 * (self.reads - 1) / (self.polls - 1)))

    def read(self, now: datetime) -> None:
        """One ``GET /{report_run_id}``: the run moves a step."""
        self.reads += 1
        if self.reads == self.polls:
            self.completed = now

    def render(self, fields: list[str] | None) -> dict[str, Any]:
        """The ``AdReportRun`` node (all its fields unless ``fields`` names some)."""
        node: dict[str, Any] = {
            "id": self.id,
            "account_id": self.account.removeprefix("act_"),
            "time_ref": int(self.created.timestamp()),
            "time_completed": int(self.completed.timestamp()) if self.completed else 0,
            "async_status": self.status,
            "async_percent_completion": self.percent,
            "date_start": self.period[0].isoformat(),
            "date_stop": self.period[1].isoformat(),
            "is_running": self.status in (NOT_STARTED, RUNNING),
        }
        if self.status == "Job Failed":
            node |= {
                "error_code": REPORT_FAILED[0],
                "error_subcode": REPORT_FAILED[1],
                "error_message": "Report Failed",
                "error_user_title": "Report Failed",
                "error_user_msg": "Generating the report failed. Try again later.",
            }
        if not fields:
            return node
        return {name: node[name] for name in ("id", *fields) if name in node}


@dataclass
class ReportRuns:
    """The runs of one world, and the settings of synchronous and async Insights."""

    settings: InsightsSettings = field(default_factory=InsightsSettings)
    _runs: dict[str, ReportRun] = field(default_factory=dict)
    _outcomes: deque[Outcome] = field(default_factory=deque)

    def configure(self, changes: dict[str, Any]) -> None:
        """Replace the settings named in ``changes`` (``report_outcomes`` queues outcomes).

        ``attribution_lag`` changes the keys it names (``enabled``, ``curve``) and keeps
        the other.

        Raises:
            pydantic.ValidationError: a value is out of range or a key is unknown.
        """
        current = self.settings.model_dump()
        lag = changes.get("attribution_lag")
        if isinstance(lag, dict):
            changes = changes | {"attribution_lag": current["attribution_lag"] | lag}
        self.settings = InsightsSettings.model_validate(current | changes)
        if "report_outcomes" in changes:
            self._outcomes = deque(self.settings.report_outcomes)

    def describe(self) -> dict[str, Any]:
        """The settings, with the outcomes still queued, and how many runs exist."""
        return self.settings.model_dump() | {
            "report_outcomes": list(self._outcomes),
            "report_runs": len(self._runs),
        }

    def create(
        self,
        account: str,
        rows: list[tuple[str, dict[str, Any]]],
        period: tuple[date, date],
        now: datetime,
    ) -> ReportRun:
        """A new run with the next queued outcome (completed when none is queued)."""
        outcome: Outcome = self._outcomes.popleft() if self._outcomes else COMPLETED
        self.settings = self.settings.model_copy(update={"report_outcomes": list(self._outcomes)})
        run_id = f"6023{len(self._runs) + 1:011d}"
        run = ReportRun(run_id, account, rows, period, now, self.settings.report_polls, outcome)
        self._runs[run_id] = run
        return run

    def get(self, run_id: str) -> ReportRun | None:
        """The run with this id, if there is one."""
        return self._runs.get(run_id)
