"""Configuration: one ``Settings`` class read from ``RULEENGINE_*`` environment variables.

Build it once in a process's entry point and pass it down; nothing reads the
environment at import time.

Ports and URLs derive from each other so that ``ruleengine up``, the CLI and every
process agree on where the stack listens: ``RULEENGINE_PORT_BASE`` moves every port
(``PORT_LAYOUT``), and an unset ``MONGODB_URL``, ``REDIS_URL`` or ``GRAPH_URL`` is the
address of the embedded server on its port. Whatever is set explicitly wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ruleengine.errors import ConfigurationError

InsightsStrategy = Literal["account_level", "per_campaign"]
#: An API token is an admin's key: shorter than this is guessable, so no process starts on it.
API_TOKEN_MIN_CHARS: Final = 32
#: Values a shipped example or a tutorial puts where the API token goes (compared ignoring
#: case, spaces, "-" and "_"): a deployment that kept one would be anybody's to administer.
PLACEHOLDER_TOKENS: Final = frozenset(
    {"replaceme", "changeme", "placeholder", "secret", "token", "apitoken", "xxx", "x"}
)
MAKE_API_TOKEN: Final = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
WRITE_LOCK_MARGIN_S = 5.0
ORPHAN_GRACE_S = 60.0

# Where each port sits relative to RULEENGINE_PORT_BASE. Worker metrics come last because
# `ruleengine up --workers N` numbers them upwards: base+5, base+6, ...
PORT_LAYOUT: Final = {
    "web_port": 0,
    "sandbox_port": 1,
    "redis_port": 2,
    "mongodb_port": 3,
    "dispatcher_metrics_port": 4,
    "worker_metrics_port": 5,
}
PortNumber = Annotated[int, Field(ge=0, le=65535)]


def embedded_mongodb_url(port: int) -> str:
    """The driver URL of the embedded MongoDB-compatible server on ``port``.

    Without retryable writes: one node has no failover for a driver to retry across, and
    the embedded server keeps every retryable write's reply for 30 minutes (up to 10,000),
    sorting them on each write once full — under load, a fifth of its CPU.
    """
    return f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"


def embedded_redis_url(port: int) -> str:
    """The URL of the embedded Redis on ``port``."""
    return f"redis://127.0.0.1:{port}/0"


def embedded_graph_url(port: int) -> str:
    """The root of the embedded Graph sandbox on ``port``."""
    return f"http://127.0.0.1:{port}"


class Settings(BaseSettings):
    """Every setting of ruleengine; its variable is ``RULEENGINE_`` + the name in upper case.

    Defaults point at the embedded servers that ``ruleengine up`` starts on loopback.
    Unset ports follow ``port_base`` (``PORT_LAYOUT``) and unset URLs follow the ports.
    """

    model_config = SettingsConfigDict(env_prefix="RULEENGINE_", extra="ignore")

    # storage and queue
    mongodb_url: str = "mongodb://127.0.0.1:27018/?directConnection=true&retryWrites=false"
    mongodb_database: str = "ruleengine"
    redis_url: str = "redis://127.0.0.1:6380/0"

    # Graph API
    graph_url: str = "http://127.0.0.1:8081"
    # Meta's newest Marketing API version (``meta/versions.py`` holds Meta's table of versions
    # and expiries; every process warns at start-up when this one is within 90 days of expiry).
    graph_version: str = Field(default="v27.0", pattern=r"^v\d+\.\d+$")
    graph_timeout_s: float = 30.0
    graph_concurrency: int = Field(default=8, ge=1, description="concurrent Graph requests per job")
    listing_retry_waits_s: tuple[float, ...] = (1.0, 2.0)
    read_retry_waits_s: tuple[float, ...] = (0.5, 1.0)
    rate_limit_max_wait_s: float = 60.0
    insights_strategy: InsightsStrategy = "account_level"
    # big accounts: a timed-out Insights request is split, then run as an async report
    insights_async_threshold: int = Field(
        default=5000, ge=1, description="entities from which Insights run as async reports"
    )
    insights_min_ids_per_request: int = Field(
        default=50, ge=1, description="a timed-out request is split down to this many ids"
    )
    insights_report_poll_s: float = Field(
        default=2.0, gt=0, description="first wait between polls of a report run (doubles)"
    )
    insights_report_max_wait_s: float = Field(
        default=300.0, gt=0, description="longest wait for a report run to complete"
    )
    # Insights throttling (X-FB-Ads-Insights-Throttle)
    insights_throttle_slowdown_pct: float = Field(
        default=75.0, ge=0, lt=100, description="Insights load from which calls are spaced out"
    )
    insights_throttle_wait_s: float = Field(
        default=30.0, ge=0, description="wait after Meta's Insights load limit, and at 100 %"
    )

    # dispatcher
    tick_seconds: float = Field(default=10.0, gt=0)
    dispatch_concurrency: int = Field(default=32, ge=1)
    payload_inline_max_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="a bigger entity list is stored once in MongoDB and jobs carry a reference",
    )
    dispatcher_metrics_port: PortNumber = 9101
    metrics_host: str = "127.0.0.1"

    # worker
    worker_max_jobs: int = Field(
        default=20,
        ge=1,
        description=(
            "jobs one worker process runs at once; a job mostly waits (Graph, MongoDB, an"
            " account's write lock), so a tick's burst starts sooner with more of them"
        ),
    )
    job_timeout_s: int = Field(default=600, ge=1)
    worker_metrics_port: PortNumber = 9102
    max_budget_change_pct: float = Field(default=50.0, gt=0)
    write_batch_size: int = Field(
        default=50,
        ge=1,
        le=50,
        description="writes per Batch API call (Meta allows 50); 1: each write alone, as before",
    )
    # rules that fight (docs/rules.md "Rules that fight"): limits over every rule, per entity
    max_daily_budget_change_pct: float | None = Field(
        default=None,
        gt=0,
        description="the most a daily budget may move in 24 h, summed over every rule; unset: off",
    )
    max_status_changes_per_day: int | None = Field(
        default=None, ge=1, description="status flips per entity in 24 h, every rule; unset: off"
    )
    oscillation_changes: int = Field(
        default=3, ge=2, description="changes in alternating directions that make an oscillation"
    )
    oscillation_window_hours: float = Field(
        default=24.0, gt=0, le=24 * 30, description="the window an oscillation is looked for in"
    )
    account_lock_ttl_s: float | None = Field(
        default=None, gt=0, description="write lock lifetime; unset: derived from Graph timeouts"
    )
    account_lock_timeout_s: float | None = Field(
        default=None, gt=0, description="wait for a busy write lock; unset: derived"
    )

    # retention: TTL indexes expire old documents; a day is rolled up before its batches expire
    executions_retention_days: int = Field(default=30, ge=1)
    batches_retention_days: int = Field(default=90, ge=2)  # a day must settle before it expires
    rollups_retention_days: int = Field(default=400, ge=1)

    # web
    web_host: str = "127.0.0.1"
    web_port: PortNumber = 8080
    #: Where people reach the web app (links in notifications); unset: http://web_host:web_port
    web_public_url: str | None = None
    #: Host names /api/ answers to besides loopback names, IP addresses, WEB_PUBLIC_URL's
    #: host and WEB_HOST (web/hosts.py: a request for any other name is a rebinding's)
    web_allowed_hosts: list[str] = Field(default_factory=list)
    api_token: SecretStr | None = None
    api_reads_require_token: bool = False
    backtest_concurrency: int = Field(
        default=1, ge=1, description="backtests the web app runs at once; more wait, queued"
    )
    backtest_queue_max: int = Field(
        default=5,
        ge=1,
        description="backtests a web process holds at once, queued or running; more: 429",
    )
    backtest_max_entities: int = Field(
        default=2_000,
        ge=1,
        description="entities (campaigns, ad sets or ads, over its accounts) one backtest replays;"
        " more: refused (API 422, CLI exit 1)",
    )
    costly_reads_concurrency: int = Field(
        default=2,
        ge=1,
        description="computations of one kind of costly read (impact, ranking, slow rules,"
        " conflict check, preview) a web process runs at once; one more: 429",
    )
    costly_reads_cache_s: float = Field(
        default=30.0, ge=0, description="seconds a costly read's answer is kept for the same inputs"
    )
    preview_max_entities: int = Field(
        default=2_000,
        ge=1,
        description="entities one preview evaluates (all its accounts together); more: 422",
    )
    refuse_conflicting_rules: bool = Field(
        default=False,
        description="an ACTIVE rule that fights an active rule is not saved (API, `rules"
        " apply`) or activated",
    )

    # secrets
    token_encryption_key: SecretStr | None = None

    # notifications and custom metrics
    webhooks: dict[str, SecretStr] = Field(default_factory=dict)
    sheets_credentials_file: Path | None = None
    sheets_api_url: str | None = None
    sheets_cache_s: float = 60.0
    sheets_call_interval_s: float = 1.1

    # embedded servers (ruleengine up)
    data_dir: Path = Path("var")
    port_base: int | None = Field(default=None, ge=1, le=65535 - 16)
    mongodb_port: PortNumber = 27018
    redis_port: PortNumber = 6380
    sandbox_port: PortNumber = 8081
    sandbox_seed: int = 1

    log_level: str = "INFO"

    @field_validator("graph_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("api_token")
    @classmethod
    def _strong_api_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            problem = api_token_problem(value.get_secret_value())
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _derive_ports_and_urls(self) -> Self:
        explicit = set(self.model_fields_set)
        if self.port_base is not None:
            for name, offset in PORT_LAYOUT.items():
                if name not in explicit:
                    setattr(self, name, self.port_base + offset)
        derived = {
            "mongodb_url": embedded_mongodb_url(self.mongodb_port),
            "redis_url": embedded_redis_url(self.redis_port),
            "graph_url": embedded_graph_url(self.sandbox_port),
        }
        for name, url in derived.items():
            if name not in explicit:
                setattr(self, name, url)
        # Derived values stay "not set": a copy validated again derives them afresh.
        object.__setattr__(self, "__pydantic_fields_set__", explicit)
        return self

    @property
    def write_lock_ttl_s(self) -> float:
        """Lifetime of an ad account's write lock without renewal.

        The holder renews it every third of this while it runs, and once more right
        before each write; a write then takes at most the Graph timeout. So even if
        Redis stops answering renewals, the lock outlives any write in flight, and no
        second holder can start writing before that write has landed or timed out.
        """
        if self.account_lock_ttl_s is not None:
            return self.account_lock_ttl_s
        return self.graph_timeout_s + WRITE_LOCK_MARGIN_S

    @property
    def write_lock_wait_s(self) -> float:
        """How long a write waits for a busy account lock: the longest locked section.

        Inside the lock a worker re-reads the live value (every try of the read
        retry policy, each up to the Graph timeout) and writes once; rate-limit
        waits happen outside it. Waiting this long lets two changes to one
        entity compose even when Graph is slow.
        """
        if self.account_lock_timeout_s is not None:
            return self.account_lock_timeout_s
        waits = self.read_retry_waits_s
        reads_s = (len(waits) + 1) * self.graph_timeout_s + sum(waits)
        return reads_s + self.graph_timeout_s + WRITE_LOCK_MARGIN_S

    @property
    def orphan_after_s(self) -> float:
        """Age (from its job's start) after which a pending intent's owner is provably gone.

        arq cancels a job at ``job_timeout_s``; a write lock outlives its holder by
        at most its lifetime; the grace covers clocks that disagree a little.
        """
        return self.job_timeout_s + self.write_lock_ttl_s + ORPHAN_GRACE_S

    @property
    def graph_base(self) -> str:
        """The Graph API root including the version, e.g. ``http://127.0.0.1:8081/v27.0``."""
        return f"{self.graph_url}/{self.graph_version}"

    @property
    def public_url(self) -> str:
        """The web app's address for people (links in notifications), without a final ``/``."""
        if self.web_public_url:
            return self.web_public_url.rstrip("/")
        return f"http://{self.web_host}:{self.web_port}"


def api_token_problem(token: str) -> str | None:
    """Why ``token`` may not be the configured API token (an admin's), None when it may."""
    folded = "".join(ch for ch in token.lower() if ch not in " -_")
    if folded in PLACEHOLDER_TOKENS or folded.startswith("replaceme"):
        what = "is a placeholder from an example"
    elif len(token) < API_TOKEN_MIN_CHARS:
        what = f"is {len(token)} characters long; it needs at least {API_TOKEN_MIN_CHARS}"
    else:
        return None
    return f"{what}: make one with {MAKE_API_TOKEN} and set it"


def settings_problems(exc: ValidationError) -> list[str]:
    """One line per wrong setting: its variable and what is wrong with it."""
    lines = []
    for error in exc.errors():
        name = "RULEENGINE_" + "_".join(str(p) for p in error["loc"]).upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(
            f"setting {name} {message}"
            if error["type"] == "value_error"
            else f"setting {name}: {message}"
        )
    return lines


def load_settings(**overrides: Any) -> Settings:
    """The process's settings from ``RULEENGINE_*`` variables (``overrides`` win).

    Raises:
        ConfigurationError: a setting is wrong; one line per setting, naming it.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigurationError("; ".join(settings_problems(exc))) from None
