"""Test sites built from the built-in demo."""

from __future__ import annotations

import copy
from typing import Any

from formulation.demo import demo_request


def demo_three_times(time_limit_s: float) -> dict[str, Any]:
    """The demo site three times over: nine deployments, three times the GPUs and the
    cap (column generation runs: more deployments than one-period enumeration takes)."""
    body = demo_request()
    deps = []
    for k in range(3):
        for d in body["deployments"]:
            deps.append(copy.deepcopy(d) | {"name": f"{d['name']}-{k}"})
    body["deployments"] = deps
    inv = body["site"]["gpu_inventory"]
    body["site"]["gpu_inventory"] = {g: 3 * n for g, n in inv.items()}
    cap = body["grid"]["power_cap_w"]
    body["grid"]["power_cap_w"] = [3 * c for c in cap] if isinstance(cap, list) else 3 * cap
    body["solver"] |= {"time_limit_s": time_limit_s}
    return body
