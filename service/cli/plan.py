"""``pdwatt plan``: solve a site schedule from a request file or the built-in demo."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from typing import Any

from formulation.fleet.request import is_fleet
from formulation.problem import ScheduleProblem, problem_from_dict
from service.cli.calibrate import calibration_for_gpu, read_calibration_file
from service.cli.solving import (
    Progress,
    add_host_args,
    check_output,
    fleet_demo_body,
    host_from_args,
    load_body,
    write_output,
)


def print_summary(resp: dict[str, Any], problem: ScheduleProblem) -> None:
    """The text report of a schedule: what was solved, the status, the schedule against
    the baselines, a table every 2 hours and where the unserved requests are."""
    print(describe_problem(problem))
    print(
        f"status {resp['status']}: objective ${resp['objective_usd']:.2f}, proven gap "
        f"{100 * resp['mip_gap']:.3f}% (lower bound ${resp['lower_bound_usd']:.2f}), "
        f"solved in {resp['solve_time_s']:.1f} s"
    )
    for d in resp["deployments"]:
        if not d["calibration_measured"]:
            print(f"note: {d['name']} uses an ESTIMATED calibration for {d['model']} on {d['gpu']}")
    print_baselines(resp)
    sec = 60.0 * problem.period_minutes
    print_windows(resp, sec)
    print_losses(resp, sec)


def describe_problem(p: ScheduleProblem) -> str:
    """What a schedule request asks, in one paragraph: the GPUs, the deployments, the
    horizon and the site cap (its usual value and where it differs)."""
    gpus = ", ".join(f"{n} {g.upper()}" for g, n in p.site.gpu_inventory.items())
    deps = "; ".join(f"{d.name} ({d.model}, {d.workload})" for d in p.deployments)
    hours = p.n_periods * p.period_minutes / 60.0
    return (
        f"site: {gpus} GPUs; {len(p.deployments)} deployment"
        f"{'' if len(p.deployments) == 1 else 's'}: {deps}\n"
        f"horizon: {p.n_periods} periods x {p.period_minutes:g} min ({hours:g} h); "
        f"{describe_cap(p.grid.power_cap_w, p.period_minutes)}"
    )


def describe_cap(cap_w: Sequence[float], period_minutes: float) -> str:
    """The site cap: its most common value, then each run of periods where it differs
    (at most four named; more are counted)."""
    usual = Counter(cap_w).most_common(1)[0][0]
    runs: list[tuple[int, int, float]] = []  # (first, end, value) where the cap is not usual
    for t, v in enumerate(cap_w):
        if v == usual:
            continue
        if runs and runs[-1][1] == t and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], t + 1, v)
        else:
            runs.append((t, t + 1, v))
    text = f"site cap {usual / 1e3:g} kW"
    if not runs:
        return text
    named = [
        f"{v / 1e3:g} kW {_clock(a * period_minutes)}-{_clock(b * period_minutes)}"
        for a, b, v in runs[:4]
    ]
    more = f" and {len(runs) - 4} more changes" if len(runs) > 4 else ""
    return f"{text}, cut to " + ", ".join(named) + more


def _clock(minute: float) -> str:
    """A minute of the horizon as hh:mm from its start (days past the first counted on)."""
    h, m = divmod(int(round(minute)), 60)
    return f"{h:02d}:{m:02d}"


def print_baselines(resp: dict[str, Any]) -> None:
    """The schedule against each baseline. A baseline that breaks a constraint is not a
    schedule one could run: it is marked infeasible and its saving is not given."""
    tot = resp["totals"]
    rows = [("schedule", tot, None)] + [(k, v, v) for k, v in resp["baselines"].items()]
    hdr = (
        f"{'':14} {'objective $':>12} {'energy kWh':>11} {'cost $':>9} {'carbon kg':>10} "
        f"{'unserved req':>13} {'unserved $':>11} {'trans. $':>9} {'viol.':>6} {'saving':>10}"
    )
    print(hdr)
    for name, t, b in rows:
        viol = "-" if b is None else str(violations(b))
        if b is None:
            save = ""
        elif not b["feasible"]:
            save, name = "infeasible", name + " *"
        else:
            save = f"{b['savings_pct']:.1f}%"
        print(
            f"{name:14} {t['objective_usd']:12.2f} {t['energy_kwh']:11.1f} {t['cost_usd']:9.2f} "
            f"{t['carbon_kg']:10.1f} {t['unserved_requests']:13.0f} "
            f"{t['unserved_value_usd']:11.2f} {t['transition_cost_usd']:9.2f} {viol:>6} {save:>10}"
        )
    print("(viol.: periods breaking the cap, the inventory or the transition limits)")
    if any(not b["feasible"] for b in resp["baselines"].values()):
        print(
            "* infeasible: breaks the constraints the schedule keeps, so its cost is no comparison"
        )


def violations(b: dict[str, Any]) -> int:
    """The constraints a baseline breaks, counted per period (and deployment)."""
    return int(b["cap_violations"] + b["limit_violations"] + b["inventory_violations"])


def _windows(periods: list[dict[str, Any]], sec: float) -> list[list[dict[str, Any]]]:
    """The periods in windows of 2 hours (one period each when periods are longer)."""
    stride = max(1, round(7200.0 / sec))
    return [periods[i : i + stride] for i in range(0, len(periods), stride)]


def _unserved(p: dict[str, Any], name: str, seconds: float) -> float:
    d = p["deployments"][name]
    return max(0.0, d["demand_rps"] - d["served_rps"]) * seconds


def print_windows(resp: dict[str, Any], sec: float) -> None:
    """Every 2 hours: the instances at the window's start, served and demand as means
    over the whole window (not its first period) and the requests left unserved in it."""
    names = [d["name"] for d in resp["deployments"]]
    periods = resp["periods"]
    print(
        "\nper deployment, every 2 hours: n_P/n_D at the window's start and served/demand "
        "req/s,\nmeans over the window; the window's peak site power, the cap in its period and "
        "the unserved requests"
    )
    print(
        f"{'time':>6} {'peak kW':>8} {'cap there':>9}  "
        + "  ".join(f"{n:>22}" for n in names)
        + f"  {'unserved req':>12}"
    )
    for win in _windows(periods, sec):
        cells = []
        for n in names:
            d = win[0]["deployments"][n]
            served = sum(p["deployments"][n]["served_rps"] for p in win) / len(win)
            demand = sum(p["deployments"][n]["demand_rps"] for p in win) / len(win)
            cells.append(
                f"{str(d['n_p']) + 'P' + str(d['n_d']) + 'D':>6} {served:6.1f}/{demand:<6.1f}"
            )
        lost = sum(_unserved(p, n, sec) for p in win for n in names)
        peak = max(win, key=lambda p: p["power_w"])
        print(
            f"{_clock(win[0]['start_minute']):>6} {peak['power_w'] / 1e3:8.1f} "
            f"{peak['power_cap_w'] / 1e3:9.1f}  "
            + "  ".join(f"{c:>22}" for c in cells)
            + f"  {lost:12,.0f}"
        )


def print_losses(resp: dict[str, Any], sec: float) -> None:
    """Where the unserved requests are: per deployment, the requests and the periods."""
    periods = resp["periods"]
    lines = []
    for d in resp["deployments"]:
        n = d["name"]
        at = [p for p in periods if _unserved(p, n, sec) >= 0.5]
        if not at:
            continue
        lost = sum(_unserved(p, n, sec) for p in at)
        first, last = at[0], at[-1]
        end = _clock(last["start_minute"] + sec / 60.0)
        where = (
            f"in period {first['index']} ({_clock(first['start_minute'])}-{end})"
            if len(at) == 1
            else f"in {len(at)} periods of {first['index']}-{last['index']} "
            f"({_clock(first['start_minute'])}-{end})"
        )
        lines.append(f"  {n}: {lost:,.0f} requests {where}")
    if lines:
        print("unserved requests, where they are:")
        print("\n".join(lines))


def cmd_plan(a: argparse.Namespace) -> dict[str, Any] | None:
    from formulation.results import to_csv
    from service.usecases.rows import Checked, Context
    from service.usecases.table import run

    demo = "pdwatt-fleet-demo.png" if a.fleet_demo else "pdwatt-demo.png"
    plot = a.plot or (demo if (a.demo or a.fleet_demo) and not a.json else None)
    check_output(a.csv, "--csv")  # before the solve: a path that cannot be written
    check_output(plot, "--plot", chart=True)  # would otherwise lose the solve's result
    body = fleet_demo_body(a) if a.fleet_demo else load_body(a)
    if is_fleet(body):
        return plan_fleet(a, body, plot)
    if a.calibration:
        body = with_calibration_file(body, a.calibration)
    problem = problem_from_dict(body, host_from_args(a, body))
    with Progress(quiet=a.json and not a.progress) as prog:
        # the schedule row of the use-case table, as the service runs it, on this host
        resp = run("schedule", Checked(body, problem), Context(host=problem.host, progress=prog))
    if not a.json:
        print_summary(resp, problem)
    if a.csv:
        write_output(a, "--csv", lambda: _write_text(a.csv, to_csv(resp)), "per-period table")
    if plot:
        from service.charts.schedule import schedule_chart

        title = "pdwatt demo site" if a.demo else "pdwatt schedule"
        write_output(a, "--plot", lambda: schedule_chart(resp, plot, title), "chart", plot)
    return resp


def plan_fleet(a: argparse.Namespace, body: dict[str, Any], plot: str | None) -> dict[str, Any]:
    """``pdwatt plan fleet.json``: several sites and the regions they share
    (docs/fleet.md), as ``POST /v1/fleet/schedule`` answers it."""
    from formulation.fleet.problem import fleet_from_dict
    from service.usecases.rows import Checked, Context
    from service.usecases.table import run

    if a.calibration:
        for site in body.get("sites") or []:
            if isinstance(site, dict):
                site.update(with_calibration_file(site, a.calibration))
    problem = fleet_from_dict(body, host_from_args(a, body))
    with Progress(quiet=a.json and not a.progress) as prog:
        ctx = Context(host=problem.host, progress=prog)
        resp = run("fleet_schedule", Checked(body, problem), ctx)
    if not a.json:
        print_fleet_summary(resp)
    if a.csv:
        from formulation.fleet.results import fleet_csv

        write_output(a, "--csv", lambda: _write_text(a.csv, fleet_csv(resp)), "per-period table")
    if plot:
        from service.charts.fleet import fleet_chart

        title = "pdwatt demo fleet" if a.fleet_demo else "pdwatt fleet plan"
        write_output(a, "--plot", lambda: fleet_chart(resp, plot, title), "chart", plot)
    return resp


def print_fleet_summary(resp: dict[str, Any]) -> None:
    """The text report of a fleet's plan: the status and objective, each site's cost and
    peak draw against its cap, and each region's shares over the horizon."""
    print(
        f"fleet of {len(resp['sites'])} site{'' if len(resp['sites']) == 1 else 's'} "
        f"({resp['method']}), status {resp['status']}: objective ${resp['objective_usd']:.2f}, "
        f"proven gap {100 * resp['mip_gap']:.3f}% (lower bound ${resp['lower_bound_usd']:.2f}), "
        f"solved in {resp['solve_time_s']:.1f} s"
    )
    for site in resp["sites"]:
        peak = max(site["periods"], key=lambda p: p["power_w"])
        print(
            f"  site {site['name']}: ${site['objective_usd']:.2f}, peak "
            f"{peak['power_w'] / 1e3:,.1f} kW against a cap of {peak['power_cap_w'] / 1e3:,.1f} "
            f"kW (period {peak['index']}), {site['totals']['unserved_requests']:,.0f} own "
            "requests unserved"
        )
    for reg in resp["regions"]:
        demand = sum(reg["demand_rps"])
        parts = []
        for sh in reg["shares"]:
            mean = sum(sh["served_rps"]) / demand if demand > 0 else 0.0
            parts.append(f"{sh['site']}/{sh['deployment']} {100 * mean:.1f}%")
        lost = sum(reg["unserved_rps"]) / demand if demand > 0 else 0.0
        print(f"  region {reg['name']} ({reg['model']}): " + ", ".join(parts)
              + f", unserved {100 * lost:.1f}%")  # fmt: skip


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


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
    p.add_argument(
        "file",
        nargs="?",
        help="schedule request (the body of POST /v1/schedule), or a fleet's (POST "
        "/v1/fleet/schedule: several sites, docs/fleet.md)",
    )
    p.add_argument("--demo", action="store_true", help="the built-in example site and day")
    p.add_argument(
        "--fleet-demo",
        action="store_true",
        help="the built-in example fleet: three sites in three time zones sharing three "
        "regions' demand (docs/fleet.md)",
    )
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")
    p.add_argument(
        "--csv",
        metavar="OUT.csv",
        help="write the per-period table (a fleet's: a row per site, period and deployment, "
        "with the rate it serves of each region)",
    )
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw the schedule (default for --demo: pdwatt-demo.png, for --fleet-demo: "
        "pdwatt-fleet-demo.png)",
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
