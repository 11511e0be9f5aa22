"""The built-in example fleet behind ``pdwatt plan --fleet-demo`` and ``pdwatt dr
--fleet-demo``: three US sites in three time zones sharing the chat demand of three
regions over one day in hourly periods (UTC), and a demand-response event that cuts the
eastern site's cap by 30% over its local evening peak.

Each site: 32 H200 GPUs and one Qwen3-32B chat deployment (azure-conv-2023) with up to
32 GPUs, its grid's day-ahead price (a morning shoulder, a midday dip, an evening peak,
in local time) and carbon intensity, and a 16 kW cap. Each region's demand peaks in
its own afternoon and evening; it is served at its own site at no penalty and at the
others at 0.001 USD per request per time zone crossed (the value of the added latency).
"""

from __future__ import annotations

import math
from typing import Any

PERIOD_MINUTES = 60
N_PERIODS = 24
CAP_W = 11_000.0
#: (site, region, hours from UTC, carbon g/kWh at night)
SITES = (("virginia", "us-east", -5, 390.0), ("texas", "us-central", -6, 420.0),
         ("oregon", "us-west", -8, 180.0))  # fmt: skip
PENALTY_PER_ZONE_USD = 0.001
#: the event: the eastern site's cap cut by 30% from 16:00 to 19:00 local (21-24 UTC)
DEMO_FLEET_EVENT = {
    "site": "virginia",
    "name": "PJM emergency load management",
    "start_period": 21,
    "end_period": 24,
    "reduction_pct": 30,
}


def _bump(h: float, centre: float, width: float) -> float:
    d = min(abs(h - centre), 24 - abs(h - centre))
    return math.exp(-0.5 * (d / width) ** 2)


def _local(offset: int, f: Any) -> list[float]:
    """``f`` of the local hour at each UTC period's middle."""
    return [round(f((t + 0.5 + offset) % 24), 4) for t in range(N_PERIODS)]


def fleet_demo_request() -> dict[str, Any]:
    """The demo fleet as a fleet request body, plain JSON."""
    sites = []
    regions = []
    for name, region, offset, carbon in SITES:
        sites.append(
            {
                "name": name,
                "site": {
                    "gpu_inventory": {"h200": 16},
                    "pue": 1.2,
                    "idle_gpu_power_w": 120,
                    "carbon_price_usd_per_tonne": 50,
                },
                "deployments": [
                    {
                        "name": "chat",
                        "model": "qwen3-32b",
                        "gpu": "h200",
                        "workload": "azure-conv-2023",
                        "demand_rps": [0.0] * N_PERIODS,
                        "max_gpus": 16,
                    }
                ],
                "grid": {
                    "power_cap_w": CAP_W,
                    "price_usd_per_mwh": _local(
                        offset,
                        lambda h: (
                            45
                            + 35 * _bump(h, 8.0, 1.5)
                            - 15 * _bump(h, 13.0, 2.0)
                            + 110 * _bump(h, 18.5, 1.5)
                        ),
                    ),
                    "carbon_g_per_kwh": _local(
                        offset, lambda h, c=carbon: c - 0.35 * c * _bump(h, 13.0, 3.0)
                    ),
                },
                "transitions": {"start_cost_usd": 0.02, "max_instance_changes_per_period": 4},
            }
        )
        regions.append(
            {
                "name": region,
                "model": "qwen3-32b",
                "demand_rps": _local(
                    offset, lambda h: 10 + 15 * _bump(h, 13.5, 3.5) + 30 * _bump(h, 19.0, 2.0)
                ),
                "unserved_penalty_usd_per_request": 0.01,
                "served_by": [
                    {
                        "site": other,
                        "deployment": "chat",
                        "penalty_usd_per_request": round(
                            PENALTY_PER_ZONE_USD * abs(offset - other_offset), 6
                        ),
                    }
                    for other, _r, other_offset, _c in SITES
                ],
            }
        )
    return {
        "period_minutes": PERIOD_MINUTES,
        "sites": sites,
        "regions": regions,
        "routing": {"max_share_change_per_period": 0.5},
        "solver": {"time_limit_s": 60, "mip_gap": 1e-3},
    }
