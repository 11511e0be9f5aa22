"""``pdwatt dr`` (demand-response what-if) and ``pdwatt flex`` (flexibility curve)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from formulation.fleet.request import is_fleet
from model import jsondoc
from model.errors import InputError
from service.cli.solving import (
    Progress,
    add_host_args,
    check_output,
    fleet_demo_body,
    host_from_args,
    load_body,
    write_output,
)

DEMO_FLEX_PERIOD = 72  # 18:00, the demo's evening peak
DR_DEMO_PNG = "pdwatt-dr-demo.png"
FLEET_DR_DEMO_PNG = "pdwatt-fleet-dr-demo.png"
FLEX_DEMO_PNG = "pdwatt-flex-demo.png"


def _hhmm(minute: float) -> str:
    h = minute / 60.0
    return f"{int(h):02d}:{int(round((h % 1) * 60)):02d}"


def _load_json(path: str, field: str) -> Any:
    return jsondoc.read(path, field)


# --------------------------------------------------------------------------- dr


def print_dr(r: dict[str, Any]) -> None:
    ev = r["event"]
    name = f" '{ev['name']}'" if ev.get("name") else ""
    caps = ev["cap_w"]
    cap_txt = (
        f"{caps[0] / 1e3:.1f} kW"
        if max(caps) - min(caps) < 1e-6
        else f"{min(caps) / 1e3:.1f} .. {max(caps) / 1e3:.1f} kW"
    )
    print(
        f"event{name}: periods {ev['start_period']}..{ev['end_period'] - 1} "
        f"({_hhmm(ev['start_minute'])}-{_hhmm(ev['end_minute'])}), cap {cap_txt} "
        f"({ev['kind']} {ev['value']:g}: {ev['reference']})"
    )
    if ev.get("window_note"):
        print(f"  window: {ev['window_note']}")
    for label, s in (("baseline", r["baseline"]), ("response", r["response"])):
        print(
            f"{label:9} status {s['status']}: objective ${s['objective_usd']:.2f}, "
            f"proven gap {100 * s['mip_gap']:.2f}%, solved in {s['solve_time_s']:.1f} s"
        )
    b = r["cost_delta_breakdown"]
    print(
        f"cost of responding: ${r['cost_delta_usd']:+.2f} (energy ${b['energy_usd']:+.2f}, "
        f"carbon ${b['carbon_usd']:+.2f}, unserved demand ${b['unserved_value_usd']:+.2f}, "
        f"transitions ${b['transition_usd']:+.2f})"
    )
    print(
        f"power shed in the window: max {r['max_shed_w'] / 1e3:.2f} kW, mean "
        f"{r['mean_shed_w'] / 1e3:.2f} kW, {r['window_energy_shed_kwh']:.2f} kWh "
        f"({r['energy_shed_kwh']:+.2f} kWh over the horizon)"
    )
    so = r.get("settings_only")
    if so is not None:
        n = len(so["periods"])
        print(
            f"settings alone (the baseline's instances kept, applied at once): shed max "
            f"{so['max_shed_w'] / 1e3:.2f} kW, mean {so['mean_shed_w'] / 1e3:.2f} kW, cap met "
            f"in {so['periods_met']} of {n} period(s), {so['demand_lost_requests']:,.0f} "
            f"requests lost, cost ${so['cost_delta_usd']:+.2f}"
        )
    print("demand lost (response - baseline, whole horizon):")
    w = max(len(n) for n in r["demand_lost"])
    for n, d in r["demand_lost"].items():
        print(f"  {n.ljust(w)}  {d['requests']:12,.0f} requests  ${d['value_usd']:10,.2f}")
    prep = r["preparation"]
    if prep["first_changed_period"] is None:
        print("preparation: none (the plans agree before the window)")
    else:
        print(
            f"preparation: the plans differ from period {prep['first_changed_period']} "
            f"({prep['periods']} period(s) before the window): {prep['instance_starts']} "
            f"starts, {prep['instance_stops']} stops"
        )
    rec = r["recovery"]
    if rec["rejoined"]:
        print(
            f"recovery: back to the baseline's configurations in period {rec['rejoin_period']} "
            f"({rec['periods']} period(s) after the window): {rec['instance_starts']} starts, "
            f"{rec['instance_stops']} stops"
        )
    else:
        print(
            f"recovery: the plans still differ at the horizon's end "
            f"({rec['periods_after_event']} period(s) after the window): "
            f"{rec['instance_starts']} starts, {rec['instance_stops']} stops"
        )
    base, resp = r["baseline"]["periods"], r["response"]["periods"]
    names = list(base[0]["deployments"])
    lo = max(0, ev["start_period"] - 2)
    hi = min(len(base), ev["end_period"] + 2)
    print(f"\nperiods {lo}..{hi - 1}: site kW baseline -> response (cap), n_P/n_D per deployment")
    print(
        f"{'time':>6} {'base kW':>8} {'resp kW':>8} {'cap kW':>7} {'shed kW':>8} "
        f"{'set kW':>7} {'set shed':>8}  " + "  ".join(f"{n:>16}" for n in names)
    )
    by_settings = {p["period"]: p for p in (so or {"periods": []})["periods"]}
    for t in range(lo, hi):
        cells = []
        for n in names:
            a, c = base[t]["deployments"][n], resp[t]["deployments"][n]
            cells.append(f"{a['n_p']}P{a['n_d']}D->{c['n_p']}P{c['n_d']}D")
        mark = "*" if ev["start_period"] <= t < ev["end_period"] else " "
        p = by_settings.get(t)
        st = (
            f"{p['power_w'] / 1e3:7.2f} {p['shed_w'] / 1e3:8.2f}{'' if p['met'] else '!'}"
            if p is not None
            else f"{'':7} {'':8}"
        )
        print(
            f"{_hhmm(base[t]['start_minute']):>5}{mark} {base[t]['power_w'] / 1e3:8.2f} "
            f"{resp[t]['power_w'] / 1e3:8.2f} {resp[t]['power_cap_w'] / 1e3:7.2f} "
            f"{r['power_shed_w'][t] / 1e3:8.2f} {st}  " + "  ".join(f"{c:>16}" for c in cells)
        )
    print(
        "(* in the event window; set kW: settings alone on the baseline's instances, "
        "! where they cannot meet the cap)"
    )


def _print_conflicts(conflicts: list[dict[str, Any]]) -> None:
    for c in conflicts:
        if "deepest_feasible_cap_w" in c:
            print(
                f"  period {c['period']}: cap {c['power_cap_w'] / 1e3:.2f} kW, deepest feasible "
                f"cap {c['deepest_feasible_cap_w'] / 1e3:.2f} kW",
                file=sys.stderr,
            )
        else:
            print(f"  {c}", file=sys.stderr)


def cmd_dr(a: argparse.Namespace) -> dict[str, Any] | None:
    from formulation.infeasible import InfeasibleError
    from formulation.whatif.dr import DEMO_EVENT, demand_response

    check_output(_plot(a, DR_DEMO_PNG), "--plot")  # before the solves
    body = fleet_demo_body(a) if a.fleet_demo else load_body(a)
    if is_fleet(body):
        return dr_fleet(a, body)
    event = _event(a, a.demo, DEMO_EVENT, "")
    try:
        with Progress(quiet=a.json and not a.progress) as prog:
            result = demand_response(body, event, prog, host=host_from_args(a, body))
    except InfeasibleError as e:
        print(f"error: {e}", file=sys.stderr)
        _print_conflicts(e.conflicts)
        raise
    from service.charts.dr import dr_chart
    from service.usecases.table import answer

    result = answer("demand_response", result)  # what POST /v1/demand-response answers
    return _report(a, result, "demand response", DR_DEMO_PNG, dr_chart, print_dr)


def dr_fleet(a: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """``pdwatt dr fleet.json --event EVENT.json`` (the event names its ``site``), or
    ``--fleet-demo``: the local and the re-routed responses, as ``POST
    /v1/fleet/demand-response`` answers them."""
    from formulation.fleet.demo import DEMO_FLEET_EVENT
    from formulation.fleet.dr import fleet_demand_response
    from service.usecases.table import answer

    plot = a.plot or (FLEET_DR_DEMO_PNG if a.fleet_demo and not a.json else None)
    check_output(plot, "--plot", chart=True)  # before the solves
    event = _event(a, a.fleet_demo, DEMO_FLEET_EVENT, ", with the site's name")
    with Progress(quiet=a.json and not a.progress) as prog:
        result = fleet_demand_response(body, event, prog, host=host_from_args(a, body))
    result = answer("fleet_demand_response", result)
    if not a.json:
        print_fleet_dr(result)
    if plot:
        from service.charts.fleet import fleet_dr_chart

        title = "pdwatt demo fleet" if a.fleet_demo else "fleet what-if"
        write_output(a, "--plot", lambda: fleet_dr_chart(result, plot, title), "chart", plot)
    return result


def print_fleet_dr(r: dict[str, Any]) -> None:
    ev = r["event"]
    name = f" '{ev['name']}'" if ev.get("name") else ""
    print(
        f"event{name} at {ev['site']}: periods {ev['start_period']}..{ev['end_period'] - 1}, "
        f"cap {min(ev['cap_w']) / 1e3:.1f} kW ({ev['kind']} {ev['value']:g})"
    )
    for label in ("baseline", "local", "rerouted"):
        s = r[label]
        print(
            f"{label:9} status {s['status']}: objective ${s['objective_usd']:,.2f}, proven gap "
            f"{100 * s['mip_gap']:.2f}%, solved in {s['solve_time_s']:.1f} s"
        )
    print(
        f"cost of responding: ${r['local_cost_usd']:+,.2f} at the site alone, "
        f"${r['rerouted_cost_usd']:+,.2f} with the fleet re-routing; saving "
        f"${r['saving_usd']:,.2f} (at least ${r['saving_at_least_usd']:,.2f} by the bounds), "
        f"{r['moved_requests']:,.0f} requests served elsewhere"
    )
    start, end = ev["start_period"], ev["end_period"]
    for label in ("local", "rerouted"):
        print(f"{label}: shares in the window (mean over its periods)")
        for reg in r[label]["regions"]:
            parts = [
                f"{sh['site']} {100 * sum(sh['share'][start:end]) / (end - start):.0f}%"
                for sh in reg["shares"]
            ]
            lost = sum(reg["unserved_rps"][start:end]) / max(
                sum(reg["demand_rps"][start:end]), 1e-9
            )
            print(f"  {reg['name']}: " + ", ".join(parts) + f", unserved {100 * lost:.1f}%")


def _event(a: argparse.Namespace, demo: bool, default: dict[str, Any], what: str) -> Any:
    """The event of ``--event``, else ``default`` for a demo; an InputError naming
    ``--event`` otherwise (``what``: what the file must hold besides the window)."""
    if a.event:
        return _load_json(a.event, "--event")
    if demo:
        return dict(default)
    raise InputError("--event", f"give the event file (JSON{what}) with --event")


def _report(
    a: argparse.Namespace,
    result: dict[str, Any],
    what: str,
    demo_file: str,
    chart: Callable[[dict[str, Any], str, str], Any],
    show: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Print ``result`` unless ``--json``, chart it (to ``--plot``, or ``demo_file`` for a
    demo shown as text) and return it."""
    plot = _plot(a, demo_file)
    if not a.json:
        show(result)
    if plot:
        title = f"pdwatt demo: {what}" if a.demo else what
        write_output(a, "--plot", lambda: chart(result, plot, title), "chart", plot)
    return result


def _plot(a: argparse.Namespace, demo_file: str) -> str | None:
    """The chart's file: ``--plot``, else ``demo_file`` for a demo shown as text."""
    return a.plot or (demo_file if a.demo and not a.json else None)


# --------------------------------------------------------------------------- flex


def print_flex(r: dict[str, Any]) -> None:
    names = r["deployments"]
    print(f"flexibility curve; transitions {r['transitions']}")
    if r["status"] == "time_limit":
        caps = sum(len(p.get("unevaluated_caps_w", [])) for p in r["periods"])
        periods = len(r.get("unevaluated_periods", []))
        print(
            f"time limit reached after {r['solve_time_s']:.1f} s: {caps} cap(s) and "
            f"{periods} period(s) not evaluated (raise solver.time_limit_s or --time-limit)"
        )
    if len(r["periods"]) == 1:
        per = r["periods"][0]
        print(
            f"period {per['period']} ({_hhmm(per['start_minute'])}): least site draw "
            f"{per['min_site_power_w'] / 1e3:.2f} kW, unconstrained "
            f"{per['unconstrained_power_w'] / 1e3:.2f} kW ({per['method']})"
        )
        print(
            f"{'cap kW':>8} {'site kW':>8} {'value $/h':>10} {'energy $/h':>10}  "
            + "  ".join(f"{n:>18}" for n in names)
        )
        for p in per["points"]:
            cells = [
                f"{p['configurations'][n]['n_p']}P{p['configurations'][n]['n_d']}D "
                f"{p['served_rps'][n]:6.2f}/s"
                for n in names
            ]
            print(
                f"{p['cap_w'] / 1e3:8.2f} {p['site_power_w'] / 1e3:8.2f} "
                f"{p['served_value_usd_per_h']:10.2f} {p['energy_cost_usd_per_h']:10.2f}  "
                + "  ".join(f"{c:>18}" for c in cells)
            )
        return
    print(
        f"{'time':>6} {'period':>6} {'least kW':>9} {'top kW':>8} {'top value $/h':>14} "
        f"{'value at mid cap $/h':>21}"
    )
    for per in r["periods"]:
        pts = per["points"]
        mid = pts[len(pts) // 2]
        print(
            f"{_hhmm(per['start_minute']):>6} {per['period']:>6} "
            f"{per['min_site_power_w'] / 1e3:9.2f} {per['unconstrained_power_w'] / 1e3:8.2f} "
            f"{pts[-1]['served_value_usd_per_h']:14.2f} {mid['served_value_usd_per_h']:21.2f}"
        )


def cmd_flex(a: argparse.Namespace) -> dict[str, Any] | None:
    from formulation.whatif.flex import flexibility_curve

    check_output(_plot(a, FLEX_DEMO_PNG), "--plot")  # before the solves
    body = load_body(a)
    period = a.period
    if period is None and a.demo and not a.all:
        period = DEMO_FLEX_PERIOD
    result = flexibility_curve(body, period, a.points, host=host_from_args(a, body))
    from service.charts.dr import flex_chart
    from service.usecases.table import answer

    result = answer("flexibility", result)  # what POST /v1/flexibility answers
    return _report(a, result, "flexibility", FLEX_DEMO_PNG, flex_chart, print_flex)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dr", help="demand-response what-if: the response to a cap over a window, and its cost"
    )
    p.add_argument("file", nargs="?", help="schedule request (the body of POST /v1/schedule)")
    p.add_argument(
        "--event",
        metavar="EVENT.json",
        help='{"start_minute": .., "end_minute": .. (or start_period/end_period), and one of '
        '"cap_w", "reduction_w", "reduction_pct"}',
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="the built-in example site with a 20%% cut 12:00-14:00 (unless --event)",
    )
    p.add_argument(
        "--fleet-demo",
        action="store_true",
        help="the built-in example fleet with a 30%% cut at its eastern site over its "
        "evening peak (unless --event): the local response against re-routing",
    )
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw the what-if (default for --demo: pdwatt-dr-demo.png)",
    )
    p.add_argument(
        "--time-limit", type=float, help="override solver.time_limit_s (both solves together)"
    )
    p.add_argument("--progress", action="store_true", help="show progress also with --json")
    add_host_args(p)
    p.set_defaults(func=cmd_dr)

    f = sub.add_parser("flex", help="site flexibility curve: best served demand vs. site power cap")
    f.add_argument("file", nargs="?", help="schedule request (the body of POST /v1/schedule)")
    f.add_argument(
        "--demo",
        action="store_true",
        help=f"the built-in example site (period {DEMO_FLEX_PERIOD} unless --period or --all)",
    )
    f.add_argument("--period", type=int, help="one period (default: every period)")
    f.add_argument("--all", action="store_true", help="with --demo: every period")
    f.add_argument("--points", type=int, default=25, help="caps per period (default 25)")
    f.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")
    f.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw the curve (default for --demo: pdwatt-flex-demo.png)",
    )
    f.add_argument("--time-limit", type=float, help="override solver.time_limit_s")
    add_host_args(f)
    f.set_defaults(func=cmd_flex)
