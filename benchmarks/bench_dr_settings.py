"""The demo's DR event (``pdwatt dr --demo``: a 20% cut 12:00-14:00) answered by GPU
settings against instance changes.

1. Without notice: the event starts now, in its first period, on the baseline's
   running instances. Settings alone (applied within the first minute): the fast
   response's power under the event's cap (formulation.whatif.shed.fast_response).
   Instance changes: the earliest they take effect is the next period boundary; the
   one-period schedule there from the running counts, within the transition limit
   (formulation.whatif.shed.next_boundary), once with the full clock only (the demo as
   it is) and once with the GPU's default settings.
2. With notice (the what-if as ``pdwatt dr`` plans it): the cost of responding without
   settings (the demo as it is) and with each deployment offered its GPU's default
   settings per phase (bench_settings.with_default_settings).

    python benchmarks/bench_dr_settings.py
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench_settings import with_default_settings

from formulation.budget import Deadline
from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.whatif.dr import DEMO_EVENT, demand_response
from formulation.whatif.shed import fast_response, next_boundary


def no_notice(body: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    problem = problem_from_dict(body)
    ev = report["event"]
    base = report["baseline"]["periods"]
    t = int(ev["start_period"])
    cap = float(ev["cap_w"][0])
    names = [d.name for d in problem.deployments]
    running = [(base[t]["deployments"][n]["n_p"], base[t]["deployments"][n]["n_d"]) for n in names]
    t0 = time.perf_counter()
    r = fast_response(problem, t, running, cap)
    dt = time.perf_counter() - t0
    out: dict[str, Any] = {
        "period": t,
        "cap_w": cap,
        "baseline_power_w": base[t]["power_w"],
        "settings_power_w": r.site_power_w,
        "settings_shed_w": base[t]["power_w"] - r.site_power_w,
        "settings_met": r.met,
        "settings_cost_usd_per_h": r.cost_usd_per_h,
        "settings_answer_s": dt,
        "settings": {d.name: [d.prefill_setting, d.decode_setting] for d in r.deployments},
    }
    for label, b in (
        ("instances_full_clock", body),
        ("instances_with_settings", with_default_settings(body)),
    ):
        nb = next_boundary(problem_from_dict(b), t + 1, running, cap, Deadline.after(10.0))
        out[label] = {
            **nb,
            "baseline_power_w": base[t + 1]["power_w"],
            "shed_w": base[t + 1]["power_w"] - nb.get("site_power_w", float("nan")),
        }
    return out


def main() -> None:
    body = demo_request()
    rows = {}
    for label, b in (("without_settings", body), ("with_settings", with_default_settings(body))):
        t0 = time.perf_counter()
        r = demand_response(b, DEMO_EVENT)
        rows[label] = r
        print(
            json.dumps(
                {
                    "what_if": label,
                    "baseline_usd": r["baseline"]["objective_usd"],
                    "baseline_gap": r["baseline"]["mip_gap"],
                    "response_usd": r["response"]["objective_usd"],
                    "response_gap": r["response"]["mip_gap"],
                    "cost_delta_usd": r["cost_delta_usd"],
                    "max_shed_w": r["max_shed_w"],
                    "mean_shed_w": r["mean_shed_w"],
                    "settings_only": {
                        k: v for k, v in r["settings_only"].items() if k != "periods"
                    },
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
        )
    print(json.dumps({"no_notice": no_notice(body, rows["without_settings"])}, default=str))


if __name__ == "__main__":
    main()
