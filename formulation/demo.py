"""The built-in example site and day behind ``pdwatt plan --demo``.

64 H200 GPUs serving three Qwen3-32B deployments over 24 h in 15-minute periods:
``chat`` (azure-conv-2023), ``code`` (azure-code-2023) and ``long-context``
(mooncake), each with a diurnal demand curve; a day-ahead price curve with a morning
shoulder, a midday solar dip and an evening peak; a carbon-intensity curve; and a
demand-response event that lowers the site cap by 25% from 17:00 to 20:00.
"""

from __future__ import annotations

import math
from typing import Any

PERIOD_MINUTES = 15
N_PERIODS = 96
NORMAL_CAP_W = 32_000.0
DR_START_H, DR_END_H, DR_CUT = 17.0, 20.0, 0.25


def _bump(h: float, centre: float, width: float) -> float:
    d = min(abs(h - centre), 24 - abs(h - centre))
    return math.exp(-0.5 * (d / width) ** 2)


def _series(f: Any) -> list[float]:
    return [round(f((t + 0.5) * PERIOD_MINUTES / 60.0), 4) for t in range(N_PERIODS)]


def demo_request() -> dict[str, Any]:
    """The demo as a schedule request body (SPEC 6.1), plain JSON."""
    chat = _series(lambda h: 14 + 38 * _bump(h, 13.5, 3.5) + 36 * _bump(h, 18.5, 2.0))
    code = _series(lambda h: 3 + 30 * _bump(h, 11.0, 2.5) + 22 * _bump(h, 15.5, 2.0))
    long_ctx = _series(lambda h: 0.6 + 2.0 * _bump(h, 14.0, 4.0) + 1.4 * _bump(h, 19.5, 1.5))
    price = _series(
        lambda h: (
            45 + 35 * _bump(h, 8.0, 1.5) - 15 * _bump(h, 13.0, 2.0) + 110 * _bump(h, 18.5, 1.5)
        )
    )
    carbon = _series(lambda h: 380 - 140 * _bump(h, 13.0, 3.0) + 60 * _bump(h, 19.0, 2.0))
    cap = [
        NORMAL_CAP_W * (1 - DR_CUT)
        if DR_START_H <= t * PERIOD_MINUTES / 60.0 < DR_END_H
        else NORMAL_CAP_W
        for t in range(N_PERIODS)
    ]
    return {
        "period_minutes": PERIOD_MINUTES,
        "site": {
            "gpu_inventory": {"h200": 64},
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
                "demand_rps": chat,
                "unserved_penalty_usd_per_request": 0.01,
                "headroom": 0.9,
                "max_gpus": 24,
                "initial": {"n_p": 4, "n_d": 2},
            },
            {
                "name": "code",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": "azure-code-2023",
                "demand_rps": code,
                "unserved_penalty_usd_per_request": 0.005,
                "headroom": 0.9,
                "max_gpus": 16,
                "initial": {"n_p": 1, "n_d": 1},
            },
            {
                "name": "long-context",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": "mooncake",
                "demand_rps": long_ctx,
                "unserved_penalty_usd_per_request": 0.05,
                "headroom": 0.9,
                "max_gpus": 24,
                "initial": {"n_p": 2, "n_d": 1},
            },
        ],
        "grid": {"power_cap_w": cap, "price_usd_per_mwh": price, "carbon_g_per_kwh": carbon},
        "transitions": {
            "start_cost_usd": 0.02,
            "stop_cost_usd": 0.0,
            "max_instance_changes_per_period": 4,
        },
        "solver": {"time_limit_s": 30, "mip_gap": 0.001},
    }
