"""The console as an operator reads it, in a real headless Chromium set to New York's
time zone against a real ``pdwatt serve`` (see test_console.py for the set-up):

* time: every time chart's axis labels give the UTC time of their ticks, the tooltip
  and the shared crosshair name the plan's UTC period under the pointer, the three
  charts of a site have one plot width at one place, the tooltip stays inside the
  window (at 1,400 x 1,000 and at a phone's width) and gives the headroom, and an
  event's start is typed as a 24-hour UTC time;
* now: a now line on every time chart, and the now strip's values (draw, cap,
  headroom, price, carbon, counts per deployment, next event with its cap) against
  ``GET /v1/sites/{id}/targets/now`` and the plan; a row per site with its draw now;
* money: the objective's terms named apart, whole request counts with separators, a
  baseline breaking a limit marked infeasible, no negative zero;
* events: bands labelled with name and cap, in the legend, their payload types named
  in words; an event posted again while in force is not re-planned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.service.test_console import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MARKS_JS,
    PAGE_TIMEOUT_MS,
    PHONE,
    REPLAN_TIMEOUT_MS,
    Console,
    register_and_plan,
)

pytestmark = [pytest.mark.servers, pytest.mark.browser]

ZONE = "America/New_York"
WIDE = {"width": 1400, "height": 1000}
CHARTS = {"power": "chart-power", "phases": "chart-phases", "unserved": "chart-unserved"}

# every axis label of a view: its tick's value (ms) and its text
AXIS_LABELS_JS = """(name) => {
  const out = [];
  const walk = (node) => {
    if (!node) return;
    if (node.marktype === "text" && node.role === "axis-label") {
      for (const i of node.items || []) out.push([+i.datum.value, i.text]);
    }
    for (const item of node.items || []) walk(item);
  };
  walk(window.pdwattViews[name].scenegraph().root);
  return out;
}"""

# the texts of a view's marks of a role (legend titles, legend labels)
ROLE_TEXTS_JS = """([name, role]) => {
  const out = [];
  const walk = (node) => {
    if (!node) return;
    if (node.marktype === "text" && node.role === role) {
      for (const i of node.items || []) out.push(i.text);
    }
    for (const item of node.items || []) walk(item);
  };
  walk(window.pdwattViews[name].scenegraph().root);
  return out;
}"""

# a view's plot on the page: left edge, width (CSS px) and the x of a time
PLOT_JS = """([name, id, t]) => {
  const v = window.pdwattViews[name];
  const r = document.querySelector(`#${id} canvas`).getBoundingClientRect();
  const [ox, oy] = v.origin();
  return { left: r.left + ox, top: r.top + oy, width: v.width(), height: v.height(),
           x: t === null ? null : r.left + ox + v.scale("x")(new Date(t)) };
}"""


@pytest.fixture(scope="module")
def zoned() -> Iterator[Any]:
    """A Chromium context in New York's time zone, shared by the module's tests."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed (Debian package chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context(viewport=WIDE, timezone_id=ZONE)
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        yield context
        context.close()
        browser.close()


@pytest.fixture(scope="module")
def site(module_live_server: Callable[..., str]) -> tuple[str, str, dict[str, Any]]:
    """A server, the demo site on it planned for the day around now: base, id, plan."""
    base = module_live_server(workers=1)
    site_id, plan = register_and_plan(base)
    return base, site_id, plan


def hhmm(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%H:%M")


def utc_label(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def test_time_is_utc_in_new_york(zoned: Any, site: tuple[str, str, dict[str, Any]]) -> None:
    base, site_id, plan = site
    console = Console(zoned, base)
    page = console.open(f"/site/{site_id}", "site")
    assert page.evaluate("new Date(Date.UTC(2026, 6, 1, 12)).getHours()") != 12  # not UTC
    periods = plan["schedule"]["periods"]
    for name in CHARTS:
        labels = page.evaluate(AXIS_LABELS_JS, name)
        times = [(ms, text) for ms, text in labels if re.fullmatch(r"\d\d:\d\d", text)]
        assert len(times) >= 4, (name, labels)
        assert [text for _, text in times] == [utc_label(ms) for ms, _ in times], name
    # the tooltip and the crosshair at the middle of a period name its UTC times
    p = periods[len(periods) // 3]
    mid = (datetime.fromisoformat(p["start"]) + timedelta(minutes=7)).isoformat()
    page.locator("#chart-power").evaluate("(el) => el.scrollIntoView({block: 'center'})")
    plot = page.evaluate(PLOT_JS, ["power", "chart-power", mid])
    page.mouse.move(plot["x"], plot["top"] + plot["height"] * 0.6)
    tip = page.locator("#vg-tooltip-element")
    tip.wait_for(state="visible")
    span = f"{hhmm(p['start'])}–{hhmm(p['end'])} UTC"
    assert span in tip.inner_text()
    cross = page.locator(".crosshair span")
    cross.wait_for(state="visible")
    assert cross.inner_text() == span
    console.clean(page)
    page.close()


def test_charts_aligned_with_a_shared_crosshair(
    zoned: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    """Reading down the page at one time reads one period: the three charts' plots have
    one left edge and one width, and the crosshair is at one x on all three."""
    base, site_id, plan = site
    console = Console(zoned, base)
    for viewport in (WIDE, PHONE):
        page = console.open(f"/site/{site_id}", "site", viewport=viewport)
        t = plan["schedule"]["periods"][40]["start"]
        page.locator("#chart-power").evaluate("(el) => el.scrollIntoView({block: 'start'})")
        plots = [page.evaluate(PLOT_JS, [n, i, t]) for n, i in CHARTS.items()]
        for q in plots[1:]:
            assert q["left"] == pytest.approx(plots[0]["left"], abs=1), (viewport, plots)
            assert q["width"] == pytest.approx(plots[0]["width"], abs=1), (viewport, plots)
            assert q["x"] == pytest.approx(plots[0]["x"], abs=1), (viewport, plots)
        if viewport is WIDE:
            page.mouse.move(plots[0]["x"] + 2, plots[0]["top"] + 10)
            lines = page.locator(".crosshair")
            lines.first.wait_for(state="visible")
            assert lines.count() == 3
            xs = [lines.nth(i).bounding_box()["x"] for i in range(3)]
            assert max(xs) - min(xs) <= 1 and abs(xs[0] - plots[0]["x"] - 2) <= 1.5, xs
        console.clean(page)
        page.close()


def test_tooltip_inside_the_window(zoned: Any, site: tuple[str, str, dict[str, Any]]) -> None:
    """Hovered at the top, middle and bottom of the power chart, at both ends, with the
    chart at the top or the bottom of the window: the tooltip lies wholly inside the
    window and gives the period's headroom."""
    base, site_id, plan = site
    console = Console(zoned, base)
    for viewport in (WIDE, PHONE):
        page = console.open(f"/site/{site_id}", "site", viewport=viewport)
        chart = page.locator("#chart-power")
        for align in ("start", "end"):
            chart.evaluate(f"(el) => el.scrollIntoView({{block: '{align}'}})")
            plot = page.evaluate(PLOT_JS, ["power", "chart-power", None])
            for fx in (0.02, 0.5, 0.98):
                for fy in (0.05, 0.5, 0.95):
                    x = plot["left"] + plot["width"] * fx
                    y = plot["top"] + plot["height"] * fy
                    if not 0 <= y < viewport["height"]:
                        continue
                    page.mouse.move(x, y)
                    tip = page.locator("#vg-tooltip-element")
                    tip.wait_for(state="visible")
                    box = tip.bounding_box()
                    where = (viewport, align, fx, fy, box)
                    assert box["x"] >= 0 and box["y"] >= 0, where
                    assert box["x"] + box["width"] <= viewport["width"], where
                    assert box["y"] + box["height"] <= viewport["height"], where
                    assert "headroom kW" in tip.inner_text(), where
        console.clean(page)
        page.close()


def test_now_strip_and_sites_row(zoned: Any, site: tuple[str, str, dict[str, Any]]) -> None:
    base, site_id, plan = site
    console = Console(zoned, base)
    page = console.open(f"/site/{site_id}", "site")
    now = httpx.get(f"{base}/v1/sites/{site_id}/targets/now", timeout=10).json()
    periods = plan["schedule"]["periods"]
    p = periods[now["period"]]
    assert p["index"] == now["period"]
    strip = page.locator("#now-strip")
    assert f"period {p['index']}, {hhmm(p['start'])}–{hhmm(p['end'])} UTC" in strip.inner_text()
    value = lambda id_: page.locator(f"#{id_} b").inner_text()  # noqa: E731
    kw_ = lambda w: f"{w / 1000:.1f} kW"  # noqa: E731
    assert value("now-draw") == f"{kw_(p['power_w'])} / {kw_(p['power_cap_w'])}"
    room = p["power_cap_w"] - p["power_w"]
    assert value("now-headroom") == f"{kw_(room)} ({100 * room / p['power_cap_w']:.1f}%)"
    assert value("now-price") == f"{p['price_usd_per_mwh']:.2f} USD/MWh"
    assert value("now-carbon") == f"{p['carbon_g_per_kwh']:.1f} g/kWh"
    for t in now["targets"]:
        row = strip.locator("tr", has=page.get_by_role("cell", name=t["deployment"], exact=True))
        assert row.locator("td").all_inner_texts()[1:4] == [
            str(t["num_prefill"]),
            str(t["num_decode"]),
            str(t["gpus"]),
        ]
    # the demo's own evening cut (24 kW, lower than the day's 32 kW) is the next event
    top = max(q["power_cap_w"] for q in periods)
    cut = [q for q in periods if q["power_cap_w"] < top]
    assert cut[0]["index"] > now["period"]
    nxt = value("next-event")
    assert f"cap {kw_(cut[0]['power_cap_w'])}" in nxt and "24.0 kW" in nxt
    assert f"{hhmm(cut[0]['start'])}–{hhmm(cut[-1]['end'])} UTC" in nxt
    # a now line on every time chart, in the period now
    for name in CHARTS:
        (line,) = page.evaluate(MARKS_JS, name)["now_marks"]
        at = datetime.fromtimestamp(line["now"] / 1000, UTC)  # parsed by Vega-Lite: ms
        assert datetime.fromisoformat(p["start"]) <= at < datetime.fromisoformat(p["end"])
        assert abs(at - datetime.now(UTC)) < timedelta(minutes=5)
    console.clean(page)
    page.close()

    # the sites list: draw now against the cap and the headroom, the next event
    page = console.open("/", "sites")
    row = page.locator("tr", has=page.get_by_role("link", name="demo-site"))
    cells = dict(
        zip(
            page.locator("thead th").all_inner_texts(),
            row.locator("td").all_inner_texts(),
            strict=True,
        )
    )
    assert cells["Draw now / cap"] == f"{kw_(p['power_w'])} / {kw_(p['power_cap_w'])}"
    assert cells["Headroom now"] == f"{kw_(room)} ({100 * room / p['power_cap_w']:.1f}%)"
    assert "24.0 kW" in cells["Next event"]
    console.clean(page)
    page.close()


def usd(x: float) -> str:
    x = 0.0 if abs(x) < 0.005 else x
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


def test_money_named_apart(zoned: Any, site: tuple[str, str, dict[str, Any]]) -> None:
    base, site_id, plan = site
    console = Console(zoned, base)
    totals = plan["schedule"]["totals"]
    page = console.open("/", "sites")
    heads = page.locator("thead th").all_inner_texts()
    assert "Cost" not in heads
    row = page.locator("tr", has=page.get_by_role("link", name="demo-site"))
    cells = dict(zip(heads, row.locator("td").all_inner_texts(), strict=True))
    assert cells["Energy cost"] == usd(totals["cost_usd"])
    assert cells["Carbon cost"] == usd(totals["carbon_cost_usd"])
    assert cells["Value of unserved demand"] == usd(totals["unserved_value_usd"])
    console.clean(page)
    page.close()

    page = console.open(f"/site/{site_id}", "site")
    baselines = page.locator("table", has=page.get_by_role("columnheader", name="Violations"))
    heads = baselines.locator("thead th").all_inner_texts()
    rows = {
        t[0]: dict(zip(heads, t, strict=True))
        for t in (r.locator("td").all_inner_texts() for r in baselines.locator("tbody tr").all())
    }
    sched = plan["schedule"]
    for name, t in [("plan", sched["totals"]), *sched["baselines"].items()]:
        shown = rows[name]
        assert shown["Objective"] == usd(t["objective_usd"])
        assert shown["Energy cost"] == usd(t["cost_usd"])
        assert shown["Carbon cost"] == usd(t["carbon_cost_usd"])
        assert shown["Value of unserved demand"] == usd(t["unserved_value_usd"])
        assert shown["Unserved requests"] == f"{round(t['unserved_requests']):,}"
        broken = sum(t.get(k, 0) for k in ("cap_violations", "limit_violations"))
        broken += t.get("inventory_violations", 0)
        assert shown["Violations"].startswith("infeasible") == (broken > 0), (name, t)
    assert "-0.00" not in page.locator("main").inner_text()
    console.clean(page)
    page.close()


def test_event_at_a_24_hour_time_banded_and_named(
    zoned: Any, site: tuple[str, str, dict[str, Any]]
) -> None:
    """An event typed at a 24-hour UTC time (past noon) in a New York browser covers
    the plan's periods from that UTC time; its band is labelled with its name and cap
    and in the legend; posted again, it is already merged and costs $0.00."""
    base, site_id, plan = site
    console = Console(zoned, base)
    page = console.open(f"/site/{site_id}", "site")
    labels = page.evaluate(MARKS_JS, "power")["band_labels_marks"]
    assert [d["label"] for d in labels] == ["cap 24.0 kW"]  # the demo's own cut
    assert "drawn by (after PUE)" in page.evaluate(ROLE_TEXTS_JS, ["power", "legend-title"])
    assert "posted event" in page.evaluate(ROLE_TEXTS_JS, ["power", "legend-label"])
    console.clean(page)
    page.close()

    periods = plan["schedule"]["periods"]
    now = datetime.now(UTC)
    pm = [
        p
        for p in periods
        if datetime.fromisoformat(p["start"]) > now and int(p["start"][11:13]) >= 13
    ]
    p = pm[0]
    page = console.open(f"/site/{site_id}/event", "event")
    start = page.get_by_label("Start (UTC)")
    assert start.get_attribute("type") == "text"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", start.input_value())
    start.fill(f"{p['start'][:10]} {hhmm(p['start'])}")
    page.get_by_label("Cap (kW)").fill("20")
    page.get_by_label("Duration (minutes)").fill("30")
    page.get_by_label("Name").fill("afternoon cut")
    page.get_by_role("button", name="Post the event and re-plan").click()
    page.wait_for_selector("body[data-replanned]", timeout=REPLAN_TIMEOUT_MS)
    events = httpx.get(f"{base}/ui/api/sites/{site_id}", timeout=10).json()["events"]
    (ev,) = [e for e in events if e["eventName"] == "afternoon cut"]
    assert (ev["first_period"], ev["end_period"]) == (p["index"], p["index"] + 2)
    assert ev["cap_w"] == 20_000
    first = page.evaluate("document.body.dataset.replanned")
    # the same event again: merged already and planned for, so not re-planned: the
    # plan unchanged, no "$-0.00"
    page.get_by_role("button", name="Post the event and re-plan").click()
    page.locator("#not-replanned").wait_for(timeout=REPLAN_TIMEOUT_MS)
    assert f"the plan {first} was made with it" in page.locator("#not-replanned").inner_text()
    assert page.locator("#replan-progress").count() == 0  # no re-plan job followed
    cost = page.locator(".card", has_text="cost of the event").inner_text()
    assert "already merged" in cost and "-" not in cost.split("\n", 1)[1], cost
    console.clean(page)
    page.close()

    page = console.open(f"/site/{site_id}", "site")
    labels = [d["label"] for d in page.evaluate(MARKS_JS, "power")["band_labels_marks"]]
    assert "afternoon cut · 20.0 kW" in labels
    events_table = page.locator("table", has=page.get_by_role("columnheader", name="Types"))
    text = events_table.inner_text()
    assert "import capacity limit" in text and "IMPORT_CAPACITY_LIMIT" not in text
    assert "20.0 kW" in text
    console.clean(page)
    page.close()
