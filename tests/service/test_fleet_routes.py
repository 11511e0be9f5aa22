"""Several sites over HTTP and on the command line (docs/fleet.md): ``POST
/v1/fleet/schedule`` answers the solve's document, a job of kind ``fleet_schedule``
answers the same, ``pdwatt plan fleet.json`` prints it, and bad input is an RFC 9457
problem naming the field."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from formulation.fleet.dr import fleet_demand_response
from formulation.fleet.problem import fleet_from_dict
from formulation.fleet.results import fleet_response
from formulation.fleet.solve import solve_fleet
from tests.formulation.test_fleet import PERIODS, larger_fleet, random_fleet
from tests.formulation.test_fleet_dr import EVENT
from tests.service.test_jobs import wait_final
from tests.service.test_routes import assert_problem


def test_the_route_answers_the_solves_document(client: TestClient) -> None:
    body = random_fleet(1)
    r = client.post("/v1/fleet/schedule", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    want = fleet_response(solve_fleet(fleet_from_dict(body)))
    assert got["status"] == want["status"] == "optimal"
    assert got["objective_usd"] == pytest.approx(want["objective_usd"], rel=1e-9)
    assert [s["name"] for s in got["sites"]] == ["east", "west"]
    # the split between sites may be any of several optimal ones: each answer serves
    # the region's demand less what it leaves unserved, from the sites it names
    for doc in (got, want):
        region = doc["regions"][0]
        assert [(s["site"], s["deployment"]) for s in region["shares"]] == [
            ("east", "d"),
            ("west", "d"),
        ]
        served = np.sum([s["served_rps"] for s in region["shares"]], axis=0)
        np.testing.assert_allclose(
            served + np.asarray(region["unserved_rps"]), body["regions"][0]["demand_rps"], rtol=1e-6
        )
    # a site's document is a site schedule's, less the fleet's own fields
    assert "periods" in got["sites"][0] and "status" not in got["sites"][0]


def test_a_fleet_job_answers_what_the_route_answers(client: TestClient) -> None:
    body = larger_fleet(1)
    r = client.post("/v1/jobs", json={"kind": "fleet_schedule", "request": body})
    assert r.status_code == 202, r.text
    doc = wait_final(client, r.json()["id"])
    assert doc["status"] == "succeeded", doc
    sync = client.post("/v1/fleet/schedule", json=body).json()
    assert doc["result"]["objective_usd"] == pytest.approx(sync["objective_usd"], rel=1e-9)
    assert doc["result"]["method"] == sync["method"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["regions"][0].update(served_by=[]), "regions[0].served_by"),
        (
            lambda b: b["regions"][0]["served_by"][1].update(site="north"),
            "regions[0].served_by[1].site",
        ),
        (
            lambda b: b["sites"][1]["deployments"][0].update(gpu="h900"),
            "sites[1].deployments[0].gpu",
        ),
        (lambda b: b["regions"][0].update(demand_rps=[1.0] * 7), "regions[0].demand_rps"),
        (lambda b: b["solver"].update(time_limit_s=1e9), "solver.time_limit_s"),
    ],
)
def test_bad_fleet_requests_are_problems_naming_the_field(
    client: TestClient, mutate: Any, field: str
) -> None:
    body = random_fleet(0)
    mutate(body)
    assert_problem(client.post("/v1/fleet/schedule", json=body), 422, field)
    job = assert_problem(
        client.post("/v1/jobs", json={"kind": "fleet_schedule", "request": body}), 422
    )
    # a schema error of a job names the field under its kind's tag, as every kind's does
    assert job["errors"][0]["field"].endswith(f"request.{field}"), job


def test_the_fleet_what_if_route_answers_the_three_plans(client: TestClient) -> None:
    body = {"request": random_fleet(3), "event": dict(EVENT)}
    r = client.post("/v1/fleet/demand-response", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    want = fleet_demand_response(random_fleet(3), EVENT)
    for label in ("baseline", "local", "rerouted"):
        assert got[label]["objective_usd"] == pytest.approx(want[label]["objective_usd"], rel=1e-9)
    assert got["saving_usd"] == pytest.approx(want["saving_usd"], rel=1e-9, abs=1e-9)
    bad = {"request": random_fleet(3), "event": {**EVENT, "site": "north"}}
    assert_problem(client.post("/v1/fleet/demand-response", json=bad), 422, "event.site")
    late = {"request": random_fleet(3), "event": {**EVENT, "end_period": 9}}
    assert_problem(client.post("/v1/fleet/demand-response", json=late), 422, "event.end_period")


def test_pdwatt_plan_reads_a_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(random_fleet(2)))
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    want = fleet_response(solve_fleet(fleet_from_dict(random_fleet(2))))
    assert doc["objective_usd"] == pytest.approx(want["objective_usd"], rel=1e-9)
    text = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert text.returncode == 0, text.stderr
    assert "region r0 (qwen3-32b): east/d" in text.stdout
    table, chart = tmp_path / "fleet.csv", tmp_path / "fleet.png"
    files = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(path)]
        + ["--csv", str(table), "--plot", str(chart)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert files.returncode == 0, files.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(table.open()))
    # a row per site, period and deployment, each site's in its own schedule's order
    assert [(r["site"], r["deployment"], int(r["period"])) for r in rows] == [
        (s["name"], n, t) for s in doc["sites"] for t in range(PERIODS) for n in ("d",)
    ]
    region = doc["regions"][0]
    for t in range(PERIODS):
        # the region's column: what each site's deployment serves of the region's demand
        sent = {r["site"]: float(r["region_r0_rps"]) for r in rows if int(r["period"]) == t}
        assert sent["east"] + sent["west"] + region["unserved_rps"][t] == pytest.approx(
            region["demand_rps"][t], rel=1e-6, abs=1e-6
        )
        for r in rows:
            if int(r["period"]) == t:
                # a deployment serves its own demand and what the region sends it
                assert float(r["served_rps"]) <= float(r["demand_rps"]) + 1e-6
                assert float(r["region_r0_rps"]) <= float(r["demand_rps"]) + 1e-6


def test_pdwatt_dr_reads_a_fleet_file_and_draws_its_chart(tmp_path: Path) -> None:
    fleet, event = tmp_path / "fleet.json", tmp_path / "event.json"
    fleet.write_text(json.dumps(random_fleet(3)))
    event.write_text(json.dumps(EVENT))
    chart = tmp_path / "dr.png"
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "dr", str(fleet), "--event", str(event)]
        + ["--plot", str(chart)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "saving" in out.stdout and f"chart written to {chart}" in out.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a chart that cannot be drawn is refused before the solves, naming the option
    bad = subprocess.run(
        [sys.executable, "-m", "service.cli", "dr", str(fleet), "--event", str(event)]
        + ["--plot", str(tmp_path / "dr.txt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "--plot" in bad.stderr


@pytest.mark.slow
def test_the_fleet_demo_runs_from_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", "--fleet-demo", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [s["name"] for s in doc["sites"]] == ["virginia", "texas", "oregon"]
    assert doc["method"] == "compact MILP over the fleet"
    assert doc["lower_bound_usd"] <= doc["objective_usd"]
    both = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", "--fleet-demo", "--demo"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 2 and "--fleet-demo" in both.stderr


def test_sites_sharing_demand_are_held_to_the_budget_together(make_client: Any) -> None:
    """The sites of a fleet are solved together when they share demand, their tables
    held at once: each may fit the memory budget alone and all of them not (4 sites of
    30 deployments over 2,016 periods passed a check per site against 4,096 MB and
    needed about 12 GB together). Refused before any solve, naming ``sites``; the same
    sites without the shared region are solved one after another and pass."""
    import copy
    import dataclasses

    from formulation.data import check_memory
    from formulation.demo import demo_request
    from formulation.fleet.request import parse_fleet
    from formulation.problem import Host
    from model.errors import InputError
    from service.requests.limits import check_fleet, check_fleet_memory
    from service.runtime.settings import Settings

    dep = demo_request()["deployments"][0] | {"demand_rps": [1.0] * 288, "max_gpus": 64}
    dep["initial"] = {"n_p": 0, "n_d": 0}
    sites = [
        {
            "name": f"s{i}",
            "site": {"gpu_inventory": {"h200": 1024}},
            "deployments": [copy.deepcopy(dep) | {"name": f"d{j}"} for j in range(8)],
            "grid": {"power_cap_w": 1e9, "price_usd_per_mwh": 50},
        }
        for i in range(2)
    ]
    served = [{"site": f"s{i}", "deployment": f"d{j}"} for i in range(2) for j in range(8)]
    region = {"name": "r", "model": dep["model"], "demand_rps": [50.0] * 288, "served_by": served}
    body = {"period_minutes": 5, "sites": sites, "regions": [region]}

    def least(check: Any) -> float:
        """The least budget (MB) ``check(budget)`` passes at, by bisection."""
        lo, hi = 1.0, 1e5
        for _ in range(40):
            mid = (lo + hi) / 2
            try:
                check(mid)
                hi = mid
            except InputError:
                lo = mid
        return hi

    def alone(mb: float) -> None:
        for site in fleet_from_dict(body, Host(memory_budget_mb=mb)).sites:
            check_memory(dataclasses.replace(site, host=Host(memory_budget_mb=mb)))

    one = least(alone)
    both = least(lambda mb: check_fleet_memory(fleet_from_dict(body, Host(memory_budget_mb=mb))))
    assert both > one * 1.2
    budget = (one + both) / 2  # each site alone fits; the two together do not
    client = make_client(workers=1, max_solve_memory_mb=budget)
    r = client.post("/v1/fleet/schedule", json=body)
    assert_problem(r, 422, "sites")
    assert "16 deployments of 2 sites sharing demand" in r.json()["detail"]
    uncoupled = {**body, "regions": []}
    check_fleet(parse_fleet(uncoupled), Settings(max_solve_memory_mb=budget))
