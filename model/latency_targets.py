"""A deployment's p99 latency targets, as a value: what :mod:`model.queueing.targets` computes
capacities under and what :class:`model.spec.DeploymentSpec` carries, so that the
tables a schedule is built from are the capacities under the deployment's targets."""

from __future__ import annotations

import math
from dataclasses import dataclass

from model.errors import InputError


@dataclass(frozen=True)
class LatencyTargets:
    """p99 targets of a deployment (seconds; None: no target)."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p99_s", "tpot_p99_s"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise InputError(name, f"must be a number of seconds, got {v!r}")
            if not v > 0:
                raise InputError(name, f"must be > 0 seconds, got {v!r}")
            object.__setattr__(self, name, float(v))

    @property
    def given(self) -> bool:
        return self.ttft_p99_s is not None or self.tpot_p99_s is not None

    def record(self) -> dict[str, float | None]:
        return {"ttft_p99_s": self.ttft_p99_s, "tpot_p99_s": self.tpot_p99_s}
