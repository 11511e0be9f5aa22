"""Events and jobs as an operator acts on them, in a real headless Chromium against a
real ``pdwatt serve`` (see test_console.py for the set-up), and through the API:

* an event retracted from the site page's events table (asked, confirmed), the site
  re-planned, and the event kept in the log marked retracted with its time; through
  the API, an unknown or already retracted event is a problem naming ``event_id``;
* the events table gives each event's cap, the power it shed at most, the energy it
  shed and its cost, between the plan before it and the plan its re-plan made;
* the same event posted again while in force is answered at once, not re-planned;
* the jobs page names each job's site, what asked for it and how long it ran, and
  lists the plans synchronous requests made.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.service.test_console import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MARKS_JS,
    PAGE_TIMEOUT_MS,
    REPLAN_TIMEOUT_MS,
    Console,
    register_and_plan,
)

pytestmark = [pytest.mark.servers, pytest.mark.browser]

WIDE = {"width": 1400, "height": 1000}
#: the events table's columns
HEADS = ["Event", "Received", "Types", "Cap", "Periods", "Shed at most", "Energy shed", "Cost"]


@pytest.fixture(scope="module")
def context() -> Iterator[Any]:
    """A Chromium context shared by the module's tests."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed (Debian package chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        ctx = browser.new_context(viewport=WIDE)
        ctx.set_default_timeout(PAGE_TIMEOUT_MS)
        yield ctx
        ctx.close()
        browser.close()


@pytest.fixture(scope="module")
def site(module_live_server: Callable[..., str]) -> tuple[str, str, dict[str, Any]]:
    """A server, the demo site on it planned for the day around now: base, id, plan."""
    base = module_live_server(workers=1)
    site_id, plan = register_and_plan(base)
    return base, site_id, plan


def cap_event(name: str, start: str, minutes: int, kw: float) -> dict[str, Any]:
    return {
        "programID": "grid-operator",
        "eventName": name,
        "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": start, "duration": f"PT{minutes}M"},
        "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [kw]}]}],
    }


def future_window(plan: dict[str, Any], n: int = 4) -> list[dict[str, Any]]:
    """``n`` periods from the first that starts an hour from now or later: the event
    caps what is still to come."""
    periods = plan["schedule"]["periods"]
    soon = datetime.now(UTC).timestamp() + 3600
    k = next(
        i for i, p in enumerate(periods) if datetime.fromisoformat(p["start"]).timestamp() >= soon
    )
    return periods[k : k + n]


def post(base: str, site_id: str, event: dict[str, Any], query: str = "") -> httpx.Response:
    return httpx.post(
        f"{base}/v1/sites/{site_id}/events{query}", json={"event": event}, timeout=300
    )


def latest(base: str, site_id: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def by_index(plan: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["index"]: p for p in plan["schedule"]["periods"]}


def ms(iso: str) -> float:
    """An ISO time as Vega holds a parsed one: milliseconds since 1970."""
    return datetime.fromisoformat(iso).timestamp() * 1000


def usd_change(x: float) -> str:
    """As the console writes a change of money: its sign always, U+2212 for minus."""
    if abs(x) < 0.005:
        return "$0.00"
    return f"{'+' if x > 0 else '−'}${abs(x):,.2f}"


def table_rows(page: Any, table: Any) -> list[dict[str, str]]:
    heads = table.locator("thead th").all_inner_texts()
    return [
        dict(zip(heads, r.locator("td").all_inner_texts(), strict=True))
        for r in table.locator("tbody tr").all()
    ]


def test_an_event_shown_with_its_shed_and_cost_then_retracted_from_the_console(
    context: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    base, site_id, _ = site
    before = latest(base, site_id)
    window = future_window(before)
    draw = min(p["power_w"] for p in window)
    cap_kw = round(0.8 * draw / 1000, 1)
    event = cap_event("evening cut", window[0]["start"], 15 * len(window), cap_kw)
    r = post(base, site_id, event)
    assert r.status_code == 200, r.text
    posted = r.json()
    after = posted["plan"]
    event_id = posted["event"]["id"]
    idx = [p["index"] for p in window]
    b, a = by_index(before), by_index(after)
    shed = [b[t]["power_w"] - a[t]["power_w"] for t in idx]
    assert max(shed) > 0  # the cap binds

    console = Console(context, base)
    page = console.open(f"/site/{site_id}", "site")
    table = page.locator("#events table")
    (row,) = [x for x in table_rows(page, table) if x["Event"] == "evening cut"]
    assert row["Cap"] == f"{cap_kw:.1f} kW"
    assert row["Shed at most"] == f"{max(shed) / 1000:.1f} kW"
    assert row["Energy shed"] == f"{sum(shed) * 0.25 / 1000:.1f} kWh"
    cost = after["schedule"]["objective_usd"] - before["schedule"]["objective_usd"]
    assert row["Cost"] == usd_change(cost)
    assert row["Status"] == "in force"

    # retracted from its row: asked, then confirmed; the re-plan followed, the page redrawn
    page.get_by_role("button", name="Retract event evening cut").click()
    page.get_by_role("button", name="Confirm: retract event evening cut and re-plan").click()
    page.wait_for_function(
        "(id) => document.body.dataset.retracted === id",
        arg=str(event_id),
        timeout=REPLAN_TIMEOUT_MS,
    )
    console.wait(page, "site")
    replanned = latest(base, site_id)
    assert replanned["plan_id"] != after["plan_id"] and not replanned["stale"]
    assert page.evaluate("document.body.dataset.replanned") == str(replanned["plan_id"])
    # recorded: kept in the log, marked retracted with its time and the version it made
    events = httpx.get(f"{base}/v1/sites/{site_id}/events", timeout=30).json()["events"]
    (logged,) = [e for e in events if e["id"] == event_id]
    assert (
        logged["retracted"] is not None and logged["retracted_version"] == replanned["site_version"]
    )
    # the re-plan lifts the cap back to the one before the event
    c = by_index(replanned)
    assert [c[t]["power_cap_w"] for t in idx] == [b[t]["power_cap_w"] for t in idx]
    table = page.locator("#events table")
    (row,) = [x for x in table_rows(page, table) if x["Event"] == "evening cut"]
    assert row["Status"].startswith("retracted ")
    assert page.get_by_role("button", name="Retract event evening cut").count() == 0
    console.clean(page)
    page.close()

    # the re-plan was a job asked for by the retraction
    jobs = httpx.get(f"{base}/ui/api/jobs", timeout=30).json()["jobs"]
    (job,) = [j for j in jobs if j["trigger"] == "retraction"]
    assert job["site_id"] == site_id and job["status"] == "succeeded"


def test_retracting_through_the_api(site: tuple[str, str, dict[str, Any]]) -> None:
    """Recorded and re-planned as an event post is; an unknown or already retracted
    event is a problem naming the field, and changes nothing."""
    base, site_id, _ = site
    window = future_window(latest(base, site_id))
    event = cap_event("api cut", window[0]["start"], 30, 20.0)
    r = post(base, site_id, event, "?replan=job")
    assert r.status_code == 202, r.text
    event_id = r.json()["event"]["id"]
    _wait_job(base, r.json()["job"]["id"])
    r = httpx.delete(f"{base}/v1/sites/{site_id}/events/{event_id}", timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["event"]["id"] == event_id and out["event"]["retracted"] is not None
    assert out["plan"]["site_version"] == out["site_version"] == out["event"]["retracted_version"]
    assert latest(base, site_id)["plan_id"] == out["plan"]["plan_id"]
    site_doc = httpx.get(f"{base}/v1/sites/{site_id}", timeout=30).json()
    for event_id_, status, kind in (
        (event_id, 409, "/problems/event-retracted"),
        (987_654, 404, "/problems/no-such-event"),
    ):
        r = httpx.delete(f"{base}/v1/sites/{site_id}/events/{event_id_}", timeout=30)
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["type"] == kind and problem["errors"][0]["field"] == "event_id"
    assert httpx.get(f"{base}/v1/sites/{site_id}", timeout=30).json() == site_doc
    # the retracted event posted again is refused naming the event
    r = post(base, site_id, event)
    assert r.status_code == 409 and r.json()["errors"][0]["field"] == "event"


def _wait_job(base: str, job_id: str, timeout_s: float = REPLAN_TIMEOUT_MS / 1000) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=30).json()
        if job["status"] in {"succeeded", "failed", "cancelled"}:
            assert job["status"] == "succeeded", job
            return dict(job)
        time.sleep(0.25)
    raise AssertionError(f"job {job_id} did not end")


def test_a_duplicate_event_is_not_re_planned(site: tuple[str, str, dict[str, Any]]) -> None:
    base, site_id, _ = site
    window = future_window(latest(base, site_id))
    event = cap_event("twice", window[-1]["start"], 15, 21.0)
    t0 = time.perf_counter()
    r = post(base, site_id, event)
    first_s = time.perf_counter() - t0
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["event"]["duplicate"] is False and "replanned" not in first
    jobs_before = httpx.get(f"{base}/ui/api/jobs", timeout=30).json()["jobs"]
    for query in ("", "?replan=job"):
        t0 = time.perf_counter()
        r = post(base, site_id, event, query)
        again_s = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        again = r.json()
        assert again["event"]["duplicate"] is True and again["replanned"] is False
        assert "not re-planned" in again["detail"] and "job" not in again
        assert again["plan"]["plan_id"] == first["plan"]["plan_id"]
        assert again["site_version"] == first["site_version"]
        print(f"duplicate event{query}: answered in {again_s:.2f} s, the re-plan {first_s:.1f} s")
        assert again_s < first_s
    assert latest(base, site_id)["plan_id"] == first["plan"]["plan_id"]  # no plan made
    assert httpx.get(f"{base}/ui/api/jobs", timeout=30).json()["jobs"] == jobs_before


def test_the_jobs_page_names_site_trigger_and_duration(
    context: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    base, site_id, _ = site
    window = future_window(latest(base, site_id))
    r = post(base, site_id, cap_event("jobs page", window[1]["start"], 15, 22.0), "?replan=job")
    assert r.status_code == 202, r.text
    job = _wait_job(base, r.json()["job"]["id"])
    r = httpx.post(f"{base}/v1/sites/{site_id}/plan", timeout=300)  # synchronous, by a user
    assert r.status_code == 200, r.text
    sync_plan = r.json()

    console = Console(context, base)
    page = console.open("/jobs", "jobs")
    table = page.locator("table", has=page.get_by_role("columnheader", name="Trigger"))
    rows = {x["Job"]: x for x in table_rows(page, table)}
    row = rows[job["id"]]
    assert row["Site"] == "demo-site" and site_id not in row["Site"]
    assert row["Trigger"] == "event" and row["Kind"] == "site_plan"
    took = (
        datetime.fromisoformat(job["finished"]) - datetime.fromisoformat(job["started"])
    ).total_seconds()
    assert row["Duration"] == (
        f"{took:.1f} s" if took < 60 else f"{int(round(took)) // 60} min {round(took) % 60:02d} s"
    )
    row = rows[f"plan {sync_plan['plan_id']}"]
    assert row["Site"] == "demo-site" and row["Trigger"] == "user"
    assert row["Kind"] == "site plan, synchronous" and row["Phase"] == sync_plan["status"]
    assert row["Duration"].endswith(" s") and row["Duration"] != "–"
    listed = httpx.get(f"{base}/ui/api/jobs", timeout=30).json()["plans"]
    (mine,) = [q for q in listed if q["plan_id"] == sync_plan["plan_id"]]
    assert 0 < mine["duration_s"] < 300 and mine["site_name"] == "demo-site"
    console.clean(page)
    page.close()


def test_the_event_form_binds_by_default_previews_and_reports_what_the_event_did(
    context: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    """The event page's default cap lies below the plan's draw in its default window,
    with a preview of that draw against the cap typed; once posted and re-planned, the
    page reports what ``pdwatt dr`` reports of a cut (power and energy shed, cost, the
    demand lost per deployment) as the site's page gives the event's effect, the window
    shaded on the before-and-after chart; a window outside the horizon is refused once,
    naming the form's field."""
    base, site_id, _ = site
    before = latest(base, site_id)
    console = Console(context, base)
    page = console.open(f"/site/{site_id}/event", "event")
    start = datetime.fromisoformat(page.get_by_label("Start (UTC)").input_value() + ":00+00:00")
    minutes = int(page.get_by_label("Duration (minutes)").input_value())
    end = start.timestamp() + 60 * minutes
    window = [
        p
        for p in before["schedule"]["periods"]
        if datetime.fromisoformat(p["end"]).timestamp() > start.timestamp()
        and datetime.fromisoformat(p["start"]).timestamp() < end
    ]
    assert len(window) == 4
    least = min(p["power_w"] for p in window)
    cap = float(page.get_by_label("Cap (kW)").input_value())
    assert cap == math.floor(8 * least / 1000) / 10 and cap * 1000 < least
    preview = page.locator("#ev-preview")
    preview.get_by_text("below that draw in 4 of them").wait_for()
    top = max(p["power_w"] for p in window)
    assert f"The plan draws {least / 1000:.1f} kW to {top / 1000:.1f} kW" in preview.inner_text()
    page.wait_for_function("() => window.pdwattViews.preview !== undefined")
    (typed,) = page.evaluate(MARKS_JS, "preview")["typed_marks"]
    assert typed["kw"] == cap and typed["start"] == ms(window[0]["start"])
    # a cap that binds is the default: the plan changes
    page.get_by_label("Cap (kW)").fill(f"{top / 1000 + 1:.1f}")
    preview.get_by_text("above that draw throughout").wait_for()
    page.get_by_label("Cap (kW)").fill(f"{cap:.1f}")

    # refused naming the form's field, once
    page.get_by_label("Start (UTC)").fill("2030-01-01 00:00")
    page.get_by_role("button", name="Post the event and re-plan").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    text = alert.inner_text().strip()
    assert text.startswith("Start (UTC): spans ") and "event.intervals" not in text, text
    assert len(text.splitlines()) == 1, text
    page.errors.clear()  # the browser logs the 422 answer
    page.get_by_label("Start (UTC)").fill(start.strftime("%Y-%m-%d %H:%M"))

    page.get_by_role("button", name="Post the event and re-plan").click()
    effect_el = page.locator("#event-effect")
    effect_el.wait_for(timeout=REPLAN_TIMEOUT_MS)
    brief = httpx.get(f"{base}/ui/api/sites/{site_id}/page", timeout=30).json()["summary"]
    ev = max(brief["events"], key=lambda e: e["id"])
    x = ev["effect"]
    assert x is not None and x["max_shed_w"] > 0
    shown = dict(c.split("\n", 1) for c in effect_el.locator(".card").all_inner_texts())
    assert shown["shed at most"] == f"{x['max_shed_w'] / 1000:.1f} kW"
    assert shown["energy shed in the window"] == f"{x['window_energy_shed_kwh']:.1f} kWh"
    assert shown["energy shed over the horizon"] == f"{x['energy_shed_kwh']:.1f} kWh"
    assert shown["cost"] == usd_change(x["cost_delta_usd"])
    lost = {r["Deployment"]: r for r in table_rows(page, effect_el.locator("table"))}
    assert set(lost) == set(x["demand_lost"])
    for name, d in x["demand_lost"].items():
        assert lost[name]["Requests lost"] == f"{round(d['requests']):,}"
        assert lost[name]["Value lost"] == usd_change(d["value_usd"])
    # the demand lost is the plans' unserved requests after less before, per deployment
    after = latest(base, site_id)
    seconds = 60 * after["period_minutes"]
    b = by_index(before)
    for name, d in x["demand_lost"].items():
        miss = sum(
            max(p["deployments"][name]["demand_rps"] - p["deployments"][name]["served_rps"], 0)
            - max(
                b[p["index"]]["deployments"][name]["demand_rps"]
                - b[p["index"]]["deployments"][name]["served_rps"],
                0,
            )
            for p in after["schedule"]["periods"]
            if p["index"] in b
        )
        assert d["requests"] == pytest.approx(miss * seconds, abs=1e-6)
    (band,) = page.evaluate(MARKS_JS, "compare")["window_marks"]
    assert (band["start"], band["end"]) == (ms(ev["start"]), ms(ev["end"]))
    console.clean(page)
    page.close()
