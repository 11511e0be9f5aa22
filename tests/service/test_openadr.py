"""OpenADR 3.1.0 events -> per-period grid signals (service.sites.openadr), and the 422
problems a malformed event gets over HTTP."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from model.errors import InputError
from service.requests.schemas import MAX_JSON_DEPTH, json_depth
from service.sites.openadr import parse_duration
from service.sites.signals import event_to_signals, merge_signals
from tests.service.conftest import small_schedule

START = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)  # plan_start; four hourly periods


def oadr_event() -> dict[str, Any]:
    """An event in the shape of the OpenADR 3.1.0 schema (as a VTN sends it)."""
    return {
        "id": "evt-42",
        "createdDateTime": "2026-07-01T08:00:00Z",
        "modificationDateTime": "2026-07-01T08:00:00Z",
        "objectType": "EVENT",
        "programID": "dr-program-1",
        "eventName": "afternoon-peak",
        "priority": 0,
        "targets": ["site-dc-east"],
        "payloadDescriptors": [
            {
                "objectType": "EVENT_PAYLOAD_DESCRIPTOR",
                "payloadType": "IMPORT_CAPACITY_LIMIT",
                "units": "KW",
            },
            {
                "objectType": "EVENT_PAYLOAD_DESCRIPTOR",
                "payloadType": "PRICE",
                "units": "KWH",
                "currency": "USD",
            },
        ],
        "intervalPeriod": {"start": "2026-07-01T13:00:00Z", "duration": "PT1H"},
        "intervals": [
            {
                "id": 0,
                "payloads": [
                    {"type": "IMPORT_CAPACITY_LIMIT", "values": [2.6]},
                    {"type": "PRICE", "values": [0.25]},
                ],
            },
            {
                "id": 1,
                "payloads": [
                    {"type": "IMPORT_CAPACITY_LIMIT", "values": [2.8, 2.4]},
                    {"type": "GHG", "values": [420.0]},
                ],
            },
        ],
    }


def signals(ev: dict[str, Any], n: int = 4, minutes: float = 60) -> dict[str, Any]:
    return event_to_signals(ev, START, minutes, n)


def field_of(ev: dict[str, Any], n: int = 4) -> str:
    with pytest.raises(InputError) as e:
        signals(ev, n)
    return e.value.field


# ---------------------------------------------------------------- translation


def test_example_event_maps_onto_periods() -> None:
    s = signals(oadr_event())
    # interval 1 splits into 14:00-14:30 at 2.8 kW and 14:30-15:00 at 2.4 kW: the
    # period takes the most restrictive
    assert s["power_cap_w"]["values"] == [None, 2600.0, 2400.0, None]
    assert s["power_cap_w"]["coverage"] == [0.0, 1.0, 1.0, 0.0]
    assert s["price_usd_per_mwh"]["values"] == [None, 250.0, None, None]  # 0.25 $/kWh
    assert s["carbon_g_per_kwh"]["values"] == [None, None, 420.0, None]
    assert s["periods"] == [1, 2]
    assert s["types"] == ["GHG", "IMPORT_CAPACITY_LIMIT", "PRICE"]
    assert s["notes"] == []


def test_partial_periods_take_the_lowest_cap_and_the_time_weighted_price() -> None:
    ev = oadr_event()
    ev["intervalPeriod"] = {"start": "2026-07-01T13:30:00Z", "duration": "PT30M"}
    ev["intervals"] = [
        {
            "id": 0,
            "payloads": [
                {"type": "IMPORT_CAPACITY_LIMIT", "values": [3.0]},
                {"type": "PRICE", "values": [0.10, 0.30]},  # 13:30-13:45, 13:45-14:00
            ],
        },
        {
            "id": 1,
            "payloads": [
                {"type": "IMPORT_CAPACITY_LIMIT", "values": [2.5]},
                {"type": "PRICE", "values": [0.40]},  # 14:00-14:30
            ],
        },
    ]
    s = signals(ev)
    assert s["power_cap_w"]["values"] == [None, 3000.0, 2500.0, None]
    price = s["price_usd_per_mwh"]
    assert price["values"][1] == pytest.approx(200.0)  # mean of 100 and 300 over 30 min
    assert price["coverage"][1] == pytest.approx(0.5)
    assert price["values"][2] == pytest.approx(400.0)
    assert price["coverage"][2] == pytest.approx(0.5)

    grid = {"power_cap_w": 20_000, "price_usd_per_mwh": [50, 60, 80, 40], "carbon_g_per_kwh": 0}
    merged = merge_signals(grid, s, 4)
    assert merged["power_cap_w"] == [20_000, 3000.0, 2500.0, 20_000]
    assert merged["price_usd_per_mwh"] == pytest.approx([50, 0.5 * 200 + 0.5 * 60, 240.0, 40])
    assert merged["carbon_g_per_kwh"] == [0.0] * 4


def test_merge_never_raises_a_cap() -> None:
    s = signals(oadr_event())
    merged = merge_signals({"power_cap_w": [20_000, 2_000, 20_000, 20_000]}, s, 4)
    assert merged["power_cap_w"] == [20_000, 2_000, 2_400, 20_000]


def test_price_per_mwh_and_own_interval_periods() -> None:
    ev = oadr_event()
    ev["payloadDescriptors"][1]["units"] = "MWH"
    ev["intervals"] = [
        {
            "id": 7,
            "intervalPeriod": {"start": "2026-07-01T15:00:00Z", "duration": "PT1H"},
            "payloads": [{"type": "PRICE", "values": [90.0]}],
        },
        {
            "id": 3,
            "intervalPeriod": {"start": "2026-07-01T12:00:00Z"},  # takes the event's PT1H
            "payloads": [{"type": "PRICE", "values": [30]}],
        },
    ]
    s = signals(ev)
    assert s["price_usd_per_mwh"]["values"] == [30.0, None, None, 90.0]
    assert s["power_cap_w"]["values"] == [None] * 4


def test_intervals_cut_at_the_horizon_are_reported() -> None:
    ev = oadr_event()
    ev["intervalPeriod"] = {"start": "2026-07-01T15:00:00Z", "duration": "PT2H"}
    ev["intervals"] = [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [2]}]}]
    s = signals(ev)
    assert s["power_cap_w"]["values"] == [None, None, None, 2000.0]
    assert len(s["notes"]) == 1 and "event.intervals[0]" in s["notes"][0]


def test_event_duration_repeats_and_cuts_intervals() -> None:
    ev = oadr_event()
    ev["intervalPeriod"] = {"start": "2026-07-01T12:00:00Z", "duration": "PT1H"}
    ev["intervals"] = [
        {"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [2]}]},
        {"id": 1, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [3]}]},
    ]
    ev["duration"] = "P9999Y"  # repeat indefinitely
    assert signals(ev, n=6)["power_cap_w"]["values"] == [2000.0, 3000.0] * 3
    ev["duration"] = "PT90M"  # cut: the second interval only half
    s = signals(ev, n=6)
    assert s["power_cap_w"]["values"] == [2000.0, 3000.0, None, None, None, None]
    assert s["power_cap_w"]["coverage"][1] == pytest.approx(0.5)
    assert s["notes"] == []  # cut, not dropped
    ev["duration"] = "PT30M"  # the second interval's value begins after the event ends
    s = signals(ev, n=6)
    assert s["power_cap_w"]["values"] == [2000.0, None, None, None, None, None]
    assert s["notes"] == ["event.duration PT30M: 1 values not planned"]


def test_an_event_says_what_of_it_is_not_applied() -> None:
    """randomizeStart is not applied (the site is one resource): the answer's notes say
    so instead of dropping it without a word."""
    ev = oadr_event()
    ev["intervalPeriod"]["randomizeStart"] = "PT5M"
    assert signals(ev)["notes"] == [
        "randomizeStart PT5M is not applied: the site is planned as one resource from the "
        "nominal start"
    ]
    ev["intervalPeriod"]["randomizeStart"] = "PT0S"
    assert signals(ev)["notes"] == []


def test_durations() -> None:
    assert parse_duration("d", "PT15M").time.total_seconds() == 900
    assert parse_duration("d", "P1W").time.days == 7
    assert parse_duration("d", "P1M").after(datetime(2026, 1, 31, tzinfo=UTC)) == datetime(
        2026, 2, 28, tzinfo=UTC
    )
    with pytest.raises(InputError):
        parse_duration("d", "-PT1H")
    with pytest.raises(InputError):
        parse_duration("d", "1 hour")


# ---------------------------------------------------------------- errors name the field


def _set(path: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    ev = oadr_event()
    path(ev)
    return ev


BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "unsupported payload type",
        lambda e: e["intervals"][1]["payloads"][0].update(type="SIMPLE"),
        "event.intervals[1].payloads[0].type",
    ),
    (
        "cap not in KW",
        lambda e: e["payloadDescriptors"][0].update(units="KVA"),
        "event.payloadDescriptors[0].units",
    ),
    (
        "no descriptor for the cap",
        lambda e: e["payloadDescriptors"].pop(0),
        "event.payloadDescriptors",
    ),
    (
        "price in EUR",
        lambda e: e["payloadDescriptors"][1].update(currency="EUR"),
        "event.payloadDescriptors[1].currency",
    ),
    (
        "price per therm",
        lambda e: e["payloadDescriptors"][1].update(units="THERMS"),
        "event.payloadDescriptors[1].units",
    ),
    (
        "GHG in another unit",
        lambda e: e["payloadDescriptors"].append({"payloadType": "GHG", "units": "KWH"}),
        "event.payloadDescriptors[2].units",
    ),
    (
        "duplicate descriptor",
        lambda e: e["payloadDescriptors"].append({"payloadType": "PRICE", "units": "KWH"}),
        "event.payloadDescriptors[2].payloadType",
    ),
    (
        "a string value",
        lambda e: e["intervals"][1]["payloads"][0].update(values=[2.8, "low"]),
        "event.intervals[1].payloads[0].values[1]",
    ),
    (
        "a negative cap",
        lambda e: e["intervals"][0]["payloads"][0].update(values=[-1]),
        "event.intervals[0].payloads[0].values[0]",
    ),
    (
        "no values",
        lambda e: e["intervals"][0]["payloads"][1].update(values=[]),
        "event.intervals[0].payloads[1].values",
    ),
    (
        "the same type twice in an interval",
        lambda e: e["intervals"][0]["payloads"].append({"type": "PRICE", "values": [1]}),
        "event.intervals[0].payloads[2].type",
    ),
    (
        "no interval period anywhere",
        lambda e: e.pop("intervalPeriod"),
        "event.intervals[0].intervalPeriod",
    ),
    (
        "zero duration",
        lambda e: e["intervalPeriod"].update(duration="PT0S"),
        "event.intervalPeriod.duration",
    ),
    (
        "not a duration",
        lambda e: e["intervalPeriod"].update(duration="1h"),
        "event.intervalPeriod.duration",
    ),
    (
        "a duration in Arabic-Indic digits",
        lambda e: e["intervalPeriod"].update(duration="PT\u0661H"),
        "event.intervalPeriod.duration",
    ),
    (
        "a duration in full-width digits",
        lambda e: e["intervalPeriod"].update(duration="PT\uff11H"),
        "event.intervalPeriod.duration",
    ),
    (
        "a duration with T and no time after it",
        lambda e: e["intervalPeriod"].update(duration="P1DT"),
        "event.intervalPeriod.duration",
    ),
    (
        "an event duration with no component",
        lambda e: e.update(duration="P"),
        "event.duration",
    ),
    (
        "start as seconds since 1970",
        lambda e: e["intervalPeriod"].update(start=1782910800),
        "event.intervalPeriod.start",
    ),
    (
        "start without offset",
        lambda e: e["intervalPeriod"].update(start="2026-07-01T13:00:00"),
        "event.intervalPeriod.start",
    ),
    (
        "an interval after the horizon",
        lambda e: e["intervals"].extend(
            [
                {"id": 2, "payloads": [{"type": "GHG", "values": [1]}]},  # 15:00-16:00
                {"id": 3, "payloads": [{"type": "GHG", "values": [1]}]},  # 16:00-17:00
            ]
        ),
        "event.intervals[3]",
    ),
    (
        "unknown field",
        lambda e: e["intervals"][0].update(payload=[]),
        "event.intervals[0].payload",
    ),
    ("no programID", lambda e: e.pop("programID"), "event.programID"),
    (
        "overlapping prices",
        lambda e: e["intervals"].append(
            {
                "id": 9,
                "intervalPeriod": {"start": "2026-07-01T13:30:00Z"},
                "payloads": [{"type": "PRICE", "values": [0.5]}],
            }
        ),
        "event.intervals[2].payloads[0]",
    ),
]


@pytest.mark.parametrize(("why", "edit", "field"), BAD, ids=[b[0] for b in BAD])
def test_malformed_events_name_the_field(
    why: str, edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    assert field_of(_set(edit)) == field, why


def test_event_wholly_before_the_horizon() -> None:
    ev = oadr_event()
    ev["intervalPeriod"]["start"] = "2026-06-30T12:00:00Z"
    assert field_of(ev) == "event.intervals[0]"


# ---------------------------------------------------------------- over HTTP


@pytest.fixture
def site_client(make_client: Callable[..., TestClient], tmp_path: Path) -> tuple[TestClient, str]:
    client = make_client(workers=1, database_url=f"sqlite:///{tmp_path / 'sites.db'}")
    body = {**small_schedule(time_limit_s=10), "name": "s", "plan_start": START.isoformat()}
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    return client, r.json()["id"]


HTTP_CASES = [
    "unsupported payload type",
    "a duration in Arabic-Indic digits",
    "start as seconds since 1970",
    "cap not in KW",
    "an interval after the horizon",
    "start without offset",
    "unknown field",
]


@pytest.mark.parametrize("why", HTTP_CASES)
def test_http_malformed_event_is_a_422_problem(
    site_client: tuple[TestClient, str], why: str
) -> None:
    _, edit, field = next(b for b in BAD if b[0] == why)
    client, site_id = site_client
    before = client.get(f"/v1/sites/{site_id}").json()
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": _set(edit)})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["errors"][0]["field"] == field
    assert field in body["detail"]
    after = client.get(f"/v1/sites/{site_id}").json()
    assert after == before  # nothing merged, nothing logged
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == []


def test_http_event_on_unknown_site_is_404(site_client: tuple[TestClient, str]) -> None:
    client, _ = site_client
    r = client.post("/v1/sites/nope/events", json={"event": copy.deepcopy(oadr_event())})
    assert r.status_code == 404
    assert r.json()["status"] == 404


# ---------------------------------------------------------------- free-form fields' depth


def nested(depth: int) -> Any:
    """A value of lists ``depth`` deep: ``nested(2) == [[1]]``."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


#: where an event holds JSON it does not type, and how to put a value there
FREE_FORM: list[tuple[str, Callable[[dict[str, Any], Any], None]]] = [
    ("event.targets", lambda e, v: e.update(targets=v)),
    ("event.reportDescriptors", lambda e, v: e.update(reportDescriptors=[{"x": v[0]}])),
    (
        "event.intervals[0].payloads[0].values",
        lambda e, v: e["intervals"][0]["payloads"][0].update(values=v),
    ),
]


def test_json_depth_counts_without_recursion() -> None:
    cases = [(1, 0), ("x", 0), ([], 1), ([1, 2], 1), ({"a": [1]}, 2), ([[1], [[2]]], 3)]
    for value, depth in cases:
        assert json_depth(value) == depth, value
    assert json_depth(nested(MAX_JSON_DEPTH)) == MAX_JSON_DEPTH
    assert json_depth(nested(100_000)) > MAX_JSON_DEPTH  # deeper than Python's recursion


@pytest.mark.parametrize(("field", "put"), FREE_FORM, ids=[f[0] for f in FREE_FORM])
def test_a_free_form_field_nested_too_deep_is_a_422_naming_it(
    site_client: tuple[TestClient, str], field: str, put: Callable[[dict[str, Any], Any], None]
) -> None:
    """Found by an adversarial test: nested 300 deep these were a 500 (the event could
    not be written out); ``targets`` 253 deep was stored, and every later ``GET
    .../events`` of the site a 500."""
    client, site_id = site_client
    for depth in (MAX_JSON_DEPTH + 1, 254, 300):
        ev = oadr_event()
        put(ev, nested(depth))
        r = client.post(f"/v1/sites/{site_id}/events", json={"event": ev})
        assert r.status_code == 422, (depth, r.text[:300])
        assert r.headers["content-type"].startswith("application/problem+json")
        (error,) = r.json()["errors"]
        assert error["field"] == field and str(MAX_JSON_DEPTH) in error["reason"], error
    events = client.get(f"/v1/sites/{site_id}/events")
    assert events.status_code == 200 and events.json()["events"] == []


def test_targets_at_the_depth_limit_are_stored_as_sent(
    site_client: tuple[TestClient, str],
) -> None:
    client, site_id = site_client
    ev = oadr_event()
    ev["targets"] = nested(MAX_JSON_DEPTH)
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": ev})
    assert r.status_code == 200, r.text[:300]
    events = client.get(f"/v1/sites/{site_id}/events")
    assert events.status_code == 200
    assert events.json()["events"][0]["event"]["targets"] == nested(MAX_JSON_DEPTH)
    limits = client.get("/openapi.json").json()["info"]["x-pdwatt-limits"]
    assert limits["max_json_depth"] == MAX_JSON_DEPTH  # published for clients


def test_an_event_stored_deeper_than_the_limit_is_still_listed(
    site_client: tuple[TestClient, str], tmp_path: Path
) -> None:
    """An event stored before the depth limit existed (``targets`` 254 deep, as an
    adversarial test stored them) is listed: ``GET .../events`` answered 500 for that
    site for good before."""
    from service.runtime.records import Update
    from service.runtime.store import store_for

    client, site_id = site_client
    deep: Any = "x"
    for _ in range(254):
        deep = [deep]
    doc = {"programID": "old", "eventName": "deep", "targets": deep}
    store = store_for(f"sqlite:///{tmp_path / 'sites.db'}")
    store.update_site(site_id, lambda s: Update(s.name, s.body, doc))
    r = client.get(f"/v1/sites/{site_id}/events")
    assert r.status_code == 200, r.text[:300]
    (listed,) = r.json()["events"]
    assert listed["event"]["eventName"] == "deep"


def test_an_event_holds_no_nul_and_a_bounded_number_of_values() -> None:
    """An event is stored as sent: a NUL character in any of its texts (PostgreSQL's
    text cannot hold one) is refused naming where it is; and an event whose payloads
    hold more values than the service maps (450,000 in one payload took 4.7 s and
    stalled the server's health check) is refused naming the payload."""
    from pydantic import ValidationError

    from service.sites.openadr import MAX_SEGMENTS, OadrEvent

    for where, change in (
        ("eventName", lambda e: e.update(eventName="after\x00noon")),
        ("targets[0]", lambda e: e.update(targets=["site\x00"])),
        ("intervals[1].payloads[0].type", lambda e: e["intervals"][1]["payloads"][0].update(
            type="IMPORT_CAPACITY_LIMIT\x00")),
    ):  # fmt: skip
        ev = oadr_event()
        change(ev)
        with pytest.raises(ValidationError, match=rf"{re.escape(where)} holds the NUL"):
            OadrEvent.model_validate(ev)
    ev = oadr_event()
    ev["intervals"][0]["payloads"][0]["values"] = [2.6] * (MAX_SEGMENTS + 1)
    assert field_of(ev) == "event.intervals[0].payloads[0].values"
