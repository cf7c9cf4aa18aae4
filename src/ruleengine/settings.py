"""Configuration: one ``Settings`` class read from ``RULEENGINE_*`` environment variables.

Build it once in a process's entry point and pass it down; nothing reads the
environment at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

InsightsStrategy = Literal["account_level", "per_campaign"]


class Settings(BaseSettings):
    """Every setting of ruleengine; its variable is ``RULEENGINE_`` + the name in upper case.

    Defaults point at the embedded servers that ``ruleengine up`` starts on loopback.
    """

    model_config = SettingsConfigDict(env_prefix="RULEENGINE_", extra="ignore")

    # storage and queue
    mongodb_url: str = "mongodb://127.0.0.1:27018/?directConnection=true"
    mongodb_database: str = "ruleengine"
    redis_url: str = "redis://127.0.0.1:6380/0"

    # Graph API
    graph_url: str = "http://127.0.0.1:8081"
    graph_version: str = "v25.0"
    graph_timeout_s: float = 30.0
    graph_concurrency: int = Field(default=8, ge=1, description="concurrent Graph requests per job")
    listing_retry_waits_s: tuple[float, ...] = (1.0, 2.0)
    read_retry_waits_s: tuple[float, ...] = (0.5, 1.0)
    rate_limit_max_wait_s: float = 60.0
    insights_strategy: InsightsStrategy = "account_level"

    # dispatcher
    tick_seconds: float = Field(default=10.0, gt=0)
    dispatch_concurrency: int = Field(default=32, ge=1)
    dispatcher_metrics_port: int = 9101
    metrics_host: str = "127.0.0.1"

    # worker
    worker_max_jobs: int = Field(default=10, ge=1)
    job_timeout_s: int = Field(default=600, ge=1)
    worker_metrics_port: int = 9102
    max_budget_change_pct: float = Field(default=50.0, gt=0)
    account_lock_timeout_s: float = 30.0

    # retention: TTL indexes expire old documents; a day is rolled up before its batches expire
    executions_retention_days: int = Field(default=30, ge=1)
    batches_retention_days: int = Field(default=90, ge=2)  # a day must settle before it expires
    rollups_retention_days: int = Field(default=400, ge=1)

    # web
    web_host: str = "127.0.0.1"
    web_port: int = 8080
    api_token: SecretStr | None = None
    api_reads_require_token: bool = False

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
    mongodb_port: int = 27018
    redis_port: int = 6380
    sandbox_port: int = 8081
    sandbox_seed: int = 1

    log_level: str = "INFO"

    @field_validator("graph_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @property
    def graph_base(self) -> str:
        """The Graph API root including the version, e.g. ``http://127.0.0.1:8081/v25.0``."""
        return f"{self.graph_url}/{self.graph_version}"
