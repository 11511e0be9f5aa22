"""A demand-response event at one site of a fleet (docs/fleet.md, section 4): the local
response moves no demand, the re-routed one is never dearer, and on the demo fleet
re-routing saves what the bounds prove."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.fleet.demo import DEMO_FLEET_EVENT, fleet_demo_request
from formulation.fleet.dr import fleet_demand_response
from model.errors import InputError
from tests.formulation.test_fleet import random_fleet

EVENT = {"site": "east", "start_period": 1, "end_period": 3, "reduction_pct": 40}


def flows(doc: dict) -> np.ndarray:
    return np.array([s["served_rps"] for r in doc["regions"] for s in r["shares"]])


@pytest.mark.parametrize("seed", range(4))
def test_the_local_response_moves_no_demand_and_rerouting_is_never_dearer(seed: int) -> None:
    r = fleet_demand_response(random_fleet(seed), EVENT)
    base, local, moved = r["baseline"], r["local"], r["rerouted"]
    assert {base["status"], local["status"], moved["status"]} == {"optimal"}
    assert (flows(local) <= flows(base) + 1e-6).all()
    tol = 1e-6 * max(abs(local["objective_usd"]), 1.0)
    assert moved["objective_usd"] <= local["objective_usd"] + tol
    assert r["saving_usd"] == pytest.approx(local["objective_usd"] - moved["objective_usd"])
    assert 0.0 <= r["saving_at_least_usd"] <= r["saving_usd"] + tol
    # the event's caps: 40% below the request's in the window, at the named site
    assert r["event"]["cap_w"] == pytest.approx(
        [0.6 * c for c in r["event"]["request_cap_w"]], rel=1e-12
    )
    site = next(s for s in local["sites"] if s["name"] == "east")
    for t in range(1, 3):
        assert site["periods"][t]["power_w"] <= r["event"]["cap_w"][t - 1] * (1 + 1e-6)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({**EVENT, "site": "north"}, "event.site"),
        ({**EVENT, "end_period": 9}, "event.end_period"),
        ({k: v for k, v in EVENT.items() if k != "site"}, "event.site"),
    ],
)
def test_a_bad_fleet_event_names_its_field(event: dict, field: str) -> None:
    with pytest.raises(InputError) as e:
        fleet_demand_response(random_fleet(0), event)
    assert e.value.field == field


@pytest.mark.slow
def test_on_the_demo_fleet_rerouting_saves_what_the_bounds_prove() -> None:
    """The README's fleet what-if: a 30% cut at the eastern site over its evening peak
    costs less when the fleet re-routes part of its region's demand than when the site
    answers alone, by a margin the solves' bounds prove."""
    r = fleet_demand_response(fleet_demo_request(), DEMO_FLEET_EVENT)
    assert r["saving_at_least_usd"] > 0, r["saving_usd"]
    assert r["moved_requests"] > 0
    assert r["rerouted_cost_usd"] < r["local_cost_usd"]
