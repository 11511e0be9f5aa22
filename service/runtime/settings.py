"""Service settings, from the environment (prefix ``PDWATT_``).

The limits on a schedule (``max_periods``, ``max_time_limit_s``) may only tighten the
formulation's own (:mod:`formulation.request`: 2,016 periods, 86,400 s), which are their
defaults or bounds: a setting above one is refused at start. The formulation has no
fixed number of deployments: a solve estimated to need more than
``max_solve_memory_mb`` is refused (:mod:`formulation.memory`); ``max_deployments``,
unset by default, is a server's own limit beside it. Invalid settings are an
:class:`~model.errors.InputError` naming the environment variable (``pdwatt serve``
prints it and exits with status 2).
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from formulation.request import MAX_PERIODS, TIME_LIMIT, field_path
from model.errors import InputError

ENV_PREFIX = "PDWATT_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_key: str | None = Field(
        None,
        min_length=1,
        description="when set, every POST needs X-API-Key (not blank, no surrounding "
        "whitespace: HTTP drops it from a header, so no client could send such a key)",
    )
    max_body_bytes: int = Field(4_000_000, ge=1024)
    max_periods: int = Field(
        MAX_PERIODS, ge=1, le=MAX_PERIODS, description="may only tighten the schedule's own"
    )
    max_deployments: int | None = Field(
        None,
        ge=1,
        description="a server's own limit on a schedule's deployments (unset: none; "
        "the memory estimate against max_solve_memory_mb decides)",
    )
    max_site_gpus: int = Field(20_000, ge=1)
    max_front_gpus: int = Field(512, ge=2)
    max_time_limit_s: float = Field(
        300.0,
        ge=TIME_LIMIT.least_s,
        le=TIME_LIMIT.max_s,
        description="the most solver.time_limit_s a request may ask for; also the "
        f"default time limit when it is below the schedule's default ({TIME_LIMIT.default_s:g} "
        "s; service.requests.limits.time_limit)",
    )
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
    ray_address: str | None = Field(
        None,
        min_length=1,
        description="Ray cluster the solves' parallel work runs on ('auto': the cluster "
        "this machine is part of, host:port its head, ray://host:10001 through Ray "
        "Client); unset: each solve's own processes. Needs Ray: pip install 'pdwatt[ray]'",
    )
    kernels: str | None = Field(
        None,
        min_length=1,
        description="kernel database (AIConfigurator's layout) that requests with "
        "performance 'kernels' read; unset: the tables of the installed aiconfigurator-core "
        "package, and without it such requests are refused (422)",
    )

    @field_validator("kernels")
    @classmethod
    def _kernel_database(cls, v: str | None) -> str | None:
        if v is not None:
            from model.operations import kernel_database

            try:
                kernel_database(v)
            except InputError as e:
                raise ValueError(e.reason) from None
        return v

    @field_validator("ray_address")
    @classmethod
    def _ray_installed(cls, v: str | None) -> str | None:
        if v is not None:
            from formulation.processes.executor import ray_missing

            missing = ray_missing()
            if missing is not None:
                raise ValueError(missing)
        return v

    @field_validator("api_key")
    @classmethod
    def _usable_key(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v != v.strip()):
            what = "is blank" if not v.strip() else "has whitespace around it"
            raise ValueError(
                f"the key {what}: HTTP drops whitespace around a header value, so no "
                "client could send it; unset it or choose another key"
            )
        return v


@lru_cache
def get_settings() -> Settings:
    """The settings from the environment; InputError naming the first variable at fault."""
    try:
        return Settings()  # type: ignore[call-arg]  # values come from the environment
    except ValidationError as exc:
        e = exc.errors()[0]
        name = ENV_PREFIX + field_path(e.get("loc", ())).upper()
        reason = e.get("msg", "invalid").removeprefix("Value error, ")
        if name in _TIGHTEN_ONLY and e.get("type") == "less_than_equal":
            reason += " (the schedule's own limit: a server may only set a lower one)"
        raise InputError(name, reason) from None


_TIGHTEN_ONLY = {f"{ENV_PREFIX}{n.upper()}" for n in ("max_periods", "max_time_limit_s")}
