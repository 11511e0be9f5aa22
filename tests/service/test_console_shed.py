"""Shedding now from the site page's now strip, in a real headless Chromium against a
real ``pdwatt serve`` (see test_console.py for the set-up):

* a target in kW answered by ``POST /v1/sites/{id}/shed`` as a dry run: the page shows
  what the endpoint answers (site power before and after, the power shed, the limit it
  would store, each deployment's counts and settings, the cost per hour and its change
  from the plan) and nothing is recorded;
* confirmed, the shed is applied from the time the preview answered for (an event
  kept, the site re-planned in a job whose progress the page follows) and the page
  drawn again from the new plan;
* a target the endpoint refuses is shown once, naming the form's field.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.service.test_console import REPLAN_TIMEOUT_MS, Console
from tests.service.test_console_events import context as context  # noqa: F401 (a fixture)
from tests.service.test_console_now import site as site  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.servers, pytest.mark.browser]


def kw(w: float) -> str:
    return f"{w / 1000:.1f} kW"


def cards(el: Any) -> dict[str, str]:
    return dict(c.split("\n", 1) for c in el.locator(".card").all_inner_texts())


def rows(table: Any) -> dict[str, list[str]]:
    out = {}
    for r in table.locator("tbody tr").all():
        cells = r.locator("td").all_inner_texts()
        out[cells[0]] = cells[1:]
    return out


@pytest.fixture
def page(context: Any, site: tuple[str, str, dict[str, Any]]) -> Iterator[Any]:
    base, site_id, _ = site
    console = Console(context, base)
    p = console.open(f"/site/{site_id}", "site")
    yield p
    p.close()


def test_shed_previewed_as_a_dry_run_then_applied(
    page: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    base, site_id, plan = site
    now = httpx.get(f"{base}/ui/api/sites/{site_id}", timeout=30).json()["now"]
    assert now is not None
    events_before = httpx.get(f"{base}/v1/sites/{site_id}/events", timeout=30).json()["events"]
    target = round(0.8 * now["power_w"] / 1000, 1)
    strip = page.locator("#now-strip")
    strip.get_by_label("Shed to (kW)").fill(str(target))
    strip.get_by_role("button", name="Preview the shed").click()
    dry = page.locator("#shed-dry-run")
    dry.wait_for()
    # what the endpoint answers for the same target as a dry run
    r = httpx.post(
        f"{base}/v1/sites/{site_id}/shed",
        json={"target_kw": target, "dry_run": True},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    ref = r.json()
    shown = cards(dry)
    assert shown["shed"] == kw(ref["shed_w"])
    assert shown["site power: planned → after"] == (
        f"{kw(ref['site_power_before_w'])} → {kw(ref['site_power_w'])}"
    )
    assert shown["target"].startswith(f"{target:.1f} kW, met" if ref["met"] else f"{target:.1f} kW")
    change = ref["cost_change_usd_per_h"]
    assert ref["planned_cost_usd_per_h"] + change == pytest.approx(ref["cost_usd_per_h"])
    money = f"${abs(change):,.2f}"
    sign = "" if money == "$0.00" else ("+" if change > 0 else "\u2212")
    cost = shown["cost per hour: change from the plan"]
    assert cost.startswith(f"{sign}{money} (${ref['planned_cost_usd_per_h']:,.2f} planned → "
                           f"${ref['cost_usd_per_h']:,.2f}"), cost  # fmt: skip
    limits = shown["limit it would store"]
    for step in ref["stored_limits"]:
        assert f"{step['limit_kw']:.1f} kW" in limits
    drawn = rows(dry.locator("table"))
    assert set(drawn) == set(ref["deployments"])
    for name, d in ref["deployments"].items():
        assert drawn[name][:4] == [
            str(d["n_p"]),
            str(d["n_d"]),
            d["prefill_setting"],
            d["decode_setting"],
        ]
        assert drawn[name][4] == f"{d['served_rps']:.2f} / {d['demand_rps']:.2f}"
    assert "Dry run: nothing recorded" in dry.inner_text()
    # nothing recorded by the preview
    events = httpx.get(f"{base}/v1/sites/{site_id}/events", timeout=30).json()["events"]
    assert events == events_before
    assert (
        httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=30).json()["plan_id"]
        == (plan["plan_id"])
    )

    # applied on confirmation: kept as an event, re-planned in a job, the page redrawn
    page.get_by_role("button", name="Apply the shed and re-plan").click()
    page.wait_for_function(
        "() => document.body.dataset.replanned !== undefined", timeout=REPLAN_TIMEOUT_MS
    )
    Console.wait(page, "site")
    events = httpx.get(f"{base}/v1/sites/{site_id}/events", timeout=30).json()["events"]
    (shed,) = [e for e in events if e["id"] == int(page.evaluate("document.body.dataset.shed"))]
    assert shed["event"]["programID"] == "pdwatt-shed"
    # applied from the time the preview answered for, not from the moment of the click
    previewed = datetime.fromisoformat(page.evaluate("document.body.dataset.shedAt"))
    assert datetime.fromisoformat(shed["event"]["intervalPeriod"]["start"]) == previewed
    latest = httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=30).json()
    assert page.evaluate("document.body.dataset.replanned") == str(latest["plan_id"])
    assert latest["plan_id"] != plan["plan_id"]
    assert latest["schedule"]["periods"][0]["applied"] == "shed"
    jobs = httpx.get(f"{base}/ui/api/jobs", timeout=30).json()["jobs"]
    assert any(j["trigger"] == "shed" and j["status"] == "succeeded" for j in jobs)
    flash = page.locator("#flash").inner_text()
    assert f"Shed to {target:.1f} kW applied" in flash and f"plan {latest['plan_id']}" in flash
    # the site as it now runs: the now strip shows the shed's draw against its cap
    brief = httpx.get(f"{base}/ui/api/sites/{site_id}", timeout=30).json()["now"]
    assert cards(page.locator("#now-strip"))["planned draw / cap"] == (
        f"{kw(brief['power_w'])} / {kw(brief['cap_w'])}"
    )
    name = shed["event"].get("eventName") or "pdwatt-shed"
    assert page.locator("#events tr", has_text=name).count() >= 1


def test_a_refused_target_shown_once_naming_the_field(page: Any) -> None:
    strip = page.locator("#now-strip")
    field = strip.get_by_label("Shed to (kW)")
    # refused by the endpoint (above its bound): one line, the form's label, no API path
    field.fill("2000000000")
    strip.get_by_role("button", name="Preview the shed").click()
    alert = strip.get_by_role("alert")
    alert.wait_for()
    text = alert.inner_text().strip()
    assert text.startswith("Shed to (kW): ") and "target_kw" not in text, text
    assert len(text.splitlines()) == 1 and text.count("less than or equal") == 1, text
    page.errors.clear()  # the browser logs the 422 answer
    # empty and negative: refused before any request, naming the field
    for value, reason in (("", "a number is required"), ("-3", "must be 0 or more")):
        field.fill(value)
        strip.get_by_role("button", name="Preview the shed").click()
        assert strip.get_by_role("alert").inner_text().strip() == f"Shed to (kW): {reason}" + (
            "" if value == "" else f", got {value}"
        )
    assert page.locator("#shed-dry-run").count() == 0
