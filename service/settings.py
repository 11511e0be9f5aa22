"""Service settings, from the environment (prefix ``PDWATT_``)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDWATT_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_key: str | None = Field(
        None, min_length=1, description="when set, every POST needs X-API-Key (not empty)"
    )
    max_body_bytes: int = Field(4_000_000, ge=1024)
    max_periods: int = Field(2016, ge=1)
    max_deployments: int = Field(32, ge=1)
    max_site_gpus: int = Field(20_000, ge=1)
    max_front_gpus: int = Field(512, ge=2)
    max_time_limit_s: float = Field(300.0, gt=0)
    max_solve_memory_mb: float = Field(
        4096.0, gt=0, description="refuse a solve estimated to need more memory (MB)"
    )
    workers: int = Field(2, ge=1, le=64, description="concurrent solves (processes)")
    retry_after_s: int = Field(5, ge=1)
    database_url: str = "sqlite:///pdwatt.db"
    redis_url: str | None = Field(
        None,
        min_length=1,
        description="Redis queue of jobs (redis://host:6379/0); when set, `pdwatt worker` "
        "processes run the jobs, else the API runs them in its own solver pool",
    )
    job_heartbeat_timeout_s: float = Field(
        30.0, gt=0, description="a queued job's worker silent this long is presumed dead"
    )
    webhook_secret: str | None = Field(
        None,
        min_length=16,
        description="HMAC-SHA256 key signing job webhooks; jobs may name a webhook only "
        "when it is set",
    )
    webhook_allow_private: bool = Field(
        False,
        description="let webhooks reach loopback, private and link-local addresses (an EMS "
        "on the server's own network)",
    )
    replan_check_s: float = Field(
        15.0,
        gt=0,
        description="how often sites with replan_each_period are checked for a new period",
    )
    job_max_attempts: int = Field(
        3, ge=1, description="runs of a job before a lost worker fails it instead of retrying"
    )


@lru_cache
def get_settings() -> Settings:
    return Settings()  # type: ignore[call-arg]  # values come from the environment
