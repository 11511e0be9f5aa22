"""``pdwatt plan``: solve a site schedule from a request file or the built-in demo."""

from __future__ import annotations

import argparse
from typing import Any

from formulation.problem import problem_from_dict
from service.cli.calibrate import calibration_for_gpu, read_calibration_file
from service.cli.solving import Progress, add_host_args, host_from_args, load_body


def print_summary(resp: dict[str, Any]) -> None:
    tot = resp["totals"]
    print(
        f"status {resp['status']}: objective ${resp['objective_usd']:.2f}, proven gap "
        f"{100 * resp['mip_gap']:.3f}% (lower bound ${resp['lower_bound_usd']:.2f}), "
        f"solved in {resp['solve_time_s']:.1f} s"
    )
    for d in resp["deployments"]:
        if not d["calibration_measured"]:
            print(f"note: {d['name']} uses an ESTIMATED calibration for {d['model']} on {d['gpu']}")
    rows = [("schedule", tot, None)] + [(k, v, v) for k, v in resp["baselines"].items()]
    hdr = (
        f"{'':12} {'objective $':>12} {'energy kWh':>11} {'cost $':>9} {'carbon kg':>10} "
        f"{'unserved req':>13} {'unserved $':>11} {'trans. $':>9} {'viol.':>6} {'saving':>8}"
    )
    print(hdr)
    for name, t, b in rows:
        viol = (
            "-"
            if b is None
            else str(b["cap_violations"] + b["limit_violations"] + b["inventory_violations"])
        )
        save = "" if b is None else f"{b['savings_pct']:.1f}%"
        print(
            f"{name:12} {t['objective_usd']:12.2f} {t['energy_kwh']:11.1f} {t['cost_usd']:9.2f} "
            f"{t['carbon_kg']:10.1f} {t['unserved_requests']:13.0f} "
            f"{t['unserved_value_usd']:11.2f} {t['transition_cost_usd']:9.2f} {viol:>6} {save:>8}"
        )
    print("(viol.: periods breaking the cap, the inventory or the transition limits)")
    names = [d["name"] for d in resp["deployments"]]
    print("\nper deployment, every 2 hours: n_P/n_D, served/demand req/s")
    periods = resp["periods"]
    stride = (
        max(1, round(120 / max(periods[1]["start_minute"] - periods[0]["start_minute"], 1e-9)))
        if len(periods) > 1
        else 1
    )
    print(f"{'time':>6} {'site kW':>8} {'cap kW':>7}  " + "  ".join(f"{n:>22}" for n in names))
    for p in periods[::stride]:
        h = p["start_minute"] / 60.0
        cells = []
        for n in names:
            d = p["deployments"][n]
            cells.append(
                f"{str(d['n_p']) + 'P' + str(d['n_d']) + 'D':>6} "
                f"{d['served_rps']:6.1f}/{d['demand_rps']:<6.1f}"
            )
        print(
            f"{int(h):02d}:{int(round((h % 1) * 60)):02d} {p['power_w'] / 1e3:8.1f} "
            f"{p['power_cap_w'] / 1e3:7.1f}  " + "  ".join(f"{c:>22}" for c in cells)
        )


def cmd_plan(a: argparse.Namespace) -> dict[str, Any] | None:
    from formulation.results import response, to_csv
    from formulation.solve import solve

    body = load_body(a)
    if a.calibration:
        body = with_calibration_file(body, a.calibration)
    problem = problem_from_dict(body, host_from_args(a, body))
    with Progress(quiet=a.json and not a.progress) as prog:
        outcome = solve(problem, prog)
    resp = response(outcome)
    if a.csv:
        with open(a.csv, "w", encoding="utf-8") as fh:
            fh.write(to_csv(resp))
    plot = a.plot or ("pdwatt-demo.png" if a.demo and not a.json else None)
    if plot:
        from service.charts import schedule_chart

        schedule_chart(resp, plot, "pdwatt demo site" if a.demo else "pdwatt schedule")
    if not a.json:
        print_summary(resp)
        if a.csv:
            print(f"per-period table written to {a.csv}")
        if plot:
            print(f"chart written to {plot}")
    return resp


def with_calibration_file(body: dict[str, Any], path: str) -> dict[str, Any]:
    """``body`` with each deployment's calibration taken from the file's entry for its
    GPU (the deployment's own ``overrides.calibration`` fields still win)."""
    import copy
    import dataclasses

    fitted = read_calibration_file(path)
    out = copy.deepcopy(body)
    deps = out.get("deployments")
    if not isinstance(deps, list):
        return out  # the schedule's validation names what is wrong
    for dep in deps:
        if not isinstance(dep, dict) or not isinstance(dep.get("gpu"), str):
            continue
        cal = dataclasses.asdict(calibration_for_gpu(path, dep["gpu"], fitted))
        overrides = dep.setdefault("overrides", {})
        if isinstance(overrides, dict):
            overrides["calibration"] = cal | dict(overrides.get("calibration") or {})
    return out


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="schedule (n_P, n_D) per deployment and period under a site cap"
    )
    p.add_argument("file", nargs="?", help="schedule request (the body of POST /v1/schedule)")
    p.add_argument("--demo", action="store_true", help="the built-in example site and day")
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")
    p.add_argument("--csv", metavar="OUT.csv", help="write the per-period table")
    p.add_argument(
        "--plot", metavar="OUT.png", help="draw the schedule (default for --demo: pdwatt-demo.png)"
    )
    p.add_argument("--time-limit", type=float, help="override solver.time_limit_s")
    p.add_argument("--progress", action="store_true", help="show progress also with --json")
    p.add_argument(
        "--calibration",
        metavar="CAL.json",
        help="calibration file from pdwatt calibrate: each deployment takes its GPU's entry",
    )
    add_host_args(p)
    p.set_defaults(func=cmd_plan)
