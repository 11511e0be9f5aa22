"""The operator console in a real headless Chromium (Debian's ``chromium``, driven by
Playwright for Python; no browser is downloaded) against a real ``pdwatt serve``.

The demo site is registered and planned through the API; the console then finds it,
draws its plan (the chart's marks are checked against the plan's JSON: one cap rule
per period at the plan's cap, the stacked power of each period summing to its site
power), posts a capacity event through its form and shows the re-plan, and lists the
jobs. On every page: no console error, no request to any other host. With an API key
set, nothing is shown before the key is given.

Each page's load time, measured in the browser (navigation start to the page drawn),
and the site page's script and style weight are printed (``pytest -s``), not asserted.
``CONSOLE_SCREENSHOTS=DIR`` saves each page at 1280x800 and at a phone's width into
DIR (docs/console.md shows them).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from formulation.demo import demo_request
from tests.demo_sites import demo_three_times
from tests.service.conftest import small_schedule
from tests.service.test_fleets_persist import REGION

pytestmark = [pytest.mark.servers, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
#: a closed network otherwise sees Chromium's own background connections refused
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PAGE_TIMEOUT_MS = 30_000
REPLAN_TIMEOUT_MS = 180_000
TIME_LIMIT_S = 5.0
#: a job that runs until cancelled (the test cancels it within seconds)
LONG_SOLVE_S = 300.0
API_KEY = "console-test-key"
#: what a site document holds besides its schedule request
SITE_ONLY = {"id", "name", "version", "created", "updated", "plan_start", "replan_each_period"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A Chromium context with a fresh profile, shared by the module's tests."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed (Debian package chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra)")
    with (
        tempfile.TemporaryDirectory(prefix="pdwatt-chromium-") as profile,
        sync_api.sync_playwright() as pw,
    ):
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=DESKTOP,
        )
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        yield context
        context.close()


class Console:
    """Pages of one server's console: console errors and requests to other hosts are
    collected per page, and each page's load time is read from the browser."""

    def __init__(self, context: Any, base: str) -> None:
        self.context = context
        self.base = base
        self.host = urlsplit(base).netloc
        self.shots = os.environ.get("CONSOLE_SCREENSHOTS")

    def watch(self, page: Any) -> None:
        """Collect ``page``'s console errors (``page.errors``) and refuse and collect its
        requests to other hosts (``page.foreign``)."""
        page.errors, page.foreign = [], []

        def on_console(msg: Any) -> None:
            if msg.type == "error":
                page.errors.append(msg.text)

        def on_request(route: Any) -> None:
            if urlsplit(route.request.url).netloc != self.host:
                page.foreign.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        page.on("console", on_console)
        page.route("**/*", on_request)

    def open(self, fragment: str, ready: str, viewport: dict[str, int] | None = None) -> Any:
        """A new tab on ``/ui/#fragment``, once the page ``ready`` is drawn."""
        page = self.context.new_page()
        if viewport is not None:
            page.set_viewport_size(viewport)
        self.watch(page)
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.goto(f"{self.base}/ui/#{fragment}")
        self.wait(page, ready)
        ms = page.evaluate("window.pdwattTimings[0].ms")
        print(f"console page {ready}: loaded in {ms:.0f} ms (measured in the browser)")
        return page

    @staticmethod
    def wait(page: Any, ready: str) -> None:
        page.wait_for_selector(f"body[data-page={ready}]")

    def clean(self, page: Any) -> None:
        """No console error, no request to another host, no page wider than the window."""
        assert page.errors == [], f"console errors on {page.url}: {page.errors}"
        assert page.foreign == [], f"requests to other hosts from {page.url}: {page.foreign}"
        overflow = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{page.url} is {overflow} px wider than its window"

    def shoot(self, page: Any, name: str) -> None:
        if not self.shots:
            return
        out = Path(self.shots)
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / f"console-{name}.png"), full_page=True)
        # the same page opened at a phone's width (its charts drawn for that width)
        phone = self.context.new_page()
        phone.set_viewport_size(PHONE)
        phone.goto(page.url)
        ready = page.evaluate("document.body.dataset.page")
        if ready is not None:
            self.wait(phone, ready)
        else:
            phone.wait_for_load_state("networkidle")
        phone.screenshot(path=str(out / f"console-{name}-phone.png"), full_page=True)
        phone.close()


def demo_site(plan_start: datetime) -> dict[str, Any]:
    body = demo_request() | {"name": "demo-site", "plan_start": plan_start.isoformat()}
    body["solver"]["time_limit_s"] = TIME_LIMIT_S
    return body


def register_and_plan(base: str, headers: dict[str, str] | None = None) -> tuple[str, dict]:
    """The demo site, its clock set so that now lies in its horizon, registered and
    planned through the API; its id and plan."""
    now = datetime.now(UTC)
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    start -= timedelta(hours=8)
    r = httpx.post(f"{base}/v1/sites", json=demo_site(start), headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    site_id = r.json()["id"]
    r = httpx.post(f"{base}/v1/sites/{site_id}/plan", headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return site_id, r.json()


# the marks a Vega view drew, by mark name: each item's datum (the scenegraph)
MARKS_JS = """(name) => {
  const out = {};
  const walk = (node) => {
    if (!node) return;
    if (node.marktype && node.name) {  // a mark per series (e.g. per colour): all of them
      out[node.name] = (out[node.name] || []).concat((node.items || []).map((i) => i.datum));
    }
    for (const item of node.items || []) walk(item);
  };
  walk(window.pdwattViews[name].scenegraph().root);
  return out;
}"""

WEIGHT_JS = """() => performance.getEntriesByType("resource")
  .filter((e) => e.initiatorType === "script" || e.initiatorType === "link"
                 || e.name.endsWith(".js") || e.name.endsWith(".css"))
  .map((e) => [e.name, e.encodedBodySize, e.decodedBodySize])"""


def check_plan_chart(page: Any, plan: dict[str, Any]) -> None:
    """The power chart's marks against the plan: one cap rule per period at its cap (kW),
    and per period the stacked layers (each deployment's prefill and decode instances,
    and idle GPUs, after PUE) summing to the period's site power, each phase's layer at
    the plan's power of that phase."""
    periods = plan["schedule"]["periods"]
    marks = page.evaluate(MARKS_JS, "power")
    caps = sorted(marks["cap_marks"], key=lambda d: d["period"])
    assert [d["period"] for d in caps] == [p["index"] for p in periods]
    assert [d["cap_kw"] for d in caps] == pytest.approx(
        [p["power_cap_w"] / 1000 for p in periods], rel=1e-12
    )
    layers = 2 * len(periods[0]["deployments"]) + 1
    stack = marks["power_marks"]
    assert len(stack) == len(periods) * layers
    top: dict[int, float] = {}
    for d in stack:
        top[d["period"]] = max(top.get(d["period"], 0.0), d["y1"])
    for p in periods:
        assert math.isclose(top[p["index"]], p["power_w"] / 1000, rel_tol=1e-9), p["index"]
    pue = demo_request()["site"]["pue"]
    drawn = {(d["period"], d["layer"]): d for d in stack}
    for p in periods:
        for name, x in p["deployments"].items():
            for phase in ("prefill", "decode"):
                d = drawn[p["index"], f"{name} {phase}"]
                assert (d["deployment"], d["phase"]) == (name, phase)
                assert d["kw"] == pytest.approx(pue * x[f"{phase}_power_w"] / 1000, rel=1e-12)
    # one hover band per period
    assert len(marks["periods_marks"]) == len(periods)


def test_console_sites_site_event_jobs(
    live_server: Callable[..., str], browser: Any, tmp_path: Path
) -> None:
    base = live_server(workers=2)
    site_id, plan = register_and_plan(base)
    console = Console(browser, base)

    # the sites list: the site with its plan in brief; open it from there
    page = console.open("/", "sites")
    link = page.get_by_role("link", name="demo-site")
    assert link.count() == 1
    row = page.locator("tr", has=link).inner_text()
    assert plan["status"] in row and "64 × h200" in row
    assert "chat, code, long-context" in row
    console.clean(page)
    console.shoot(page, "sites")
    link.click()
    console.wait(page, "site")
    check_plan_chart(page, plan)
    console.clean(page)
    page.close()

    # the site page on its own: load time, weight, the replica targets now
    page = console.open(f"/site/{site_id}", "site")
    weights = page.evaluate(WEIGHT_JS)
    total = sum(w[1] for w in weights)
    print(
        f"site page scripts and styles: {total / 1000:.0f} kB over {len(weights)} files ("
        + ", ".join(f"{urlsplit(u).path} {b / 1000:.1f} kB" for u, b, _ in weights)
        + ")"
    )
    check_plan_chart(page, plan)
    now = httpx.get(f"{base}/v1/sites/{site_id}/targets/now", timeout=10).json()
    assert f"Period {now['period']}" in page.locator("main").inner_text()
    for t in now["targets"]:
        row = page.locator("tr", has=page.get_by_role("cell", name=t["deployment"], exact=True))
        assert row.locator("td").all_inner_texts()[1:4] == [
            str(t["num_prefill"]),
            str(t["num_decode"]),
            str(t["gpus"]),
        ]
    # the GPU power the orchestrator is handed for this period (the demo lists no
    # settings, so no setting columns)
    limit_kw = now["periods"][0]["total_gpu_power_limit_w"] / 1000
    assert page.locator("#gpu-power-limit").inner_text().endswith(f"{limit_kw:.1f} kW")
    assert page.get_by_role("columnheader", name="Prefill setting").count() == 0
    # the plan against the baselines: one that breaks a constraint is marked infeasible,
    # naming what it breaks and in how many periods
    for name, b in plan["schedule"]["baselines"].items():
        broken = {
            "cap": b["cap_violations"],
            "transition limit": b["limit_violations"],
            "GPU inventory": b["inventory_violations"],
        }
        assert not (any(broken.values()) and b["feasible"])
        cell = page.get_by_role("cell", name=name, exact=True)
        last = page.locator("tr", has=cell).locator("td").all_inner_texts()[-1]
        if b["feasible"]:
            assert last == "none", (name, last)
        else:
            assert last.startswith("infeasible"), (name, last)
            for what, n in broken.items():
                assert (f"{what}: {n} period" in last) == (n > 0), (name, last)
    # hover shows the period's numbers
    page.locator("#chart-power canvas").scroll_into_view_if_needed()
    box = page.locator("#chart-power canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    tooltip = page.locator("#vg-tooltip-element")
    tooltip.wait_for(state="visible")
    assert "site power kW" in tooltip.inner_text() and "cap kW" in tooltip.inner_text()
    assert "headroom kW" in tooltip.inner_text()
    chat = tooltip.locator("tr", has_text="chat").inner_text()
    assert "prefill" in chat and "decode" in chat  # one line per deployment, both phases
    # and the keyboard reaches the same numbers: a slider over the periods
    page.get_by_text("A period's numbers").click()
    slider = page.get_by_label("Period", exact=True)
    slider.focus()
    page.keyboard.press("ArrowRight")
    shown = periods_by_index(plan)[int(slider.input_value())]
    details = page.locator("details")
    assert details.get_by_role("row", name="site power kW").locator("td").all_inner_texts() == [
        "site power kW",
        f"{shown['power_w'] / 1000:.2f}",
    ]
    console.clean(page)
    console.shoot(page, "site")
    page.close()

    # on a phone's width the sites and site pages fit it: wide tables scroll in their box
    for fragment, ready in (("/", "sites"), (f"/site/{site_id}", "site")):
        page = console.open(fragment, ready, viewport=PHONE)
        console.clean(page)
        page.close()

    # an event through the form: a cap at 80% of the peak, over the peak's hour
    periods = plan["schedule"]["periods"]
    peak = max(periods, key=lambda p: p["power_w"])
    cap_kw = round(0.8 * peak["power_w"] / 1000, 1)
    page = console.open(f"/site/{site_id}/event", "event")
    page.get_by_label("Cap (kW)").fill(str(cap_kw))
    page.get_by_label("Start (UTC)").fill(peak["start"][:16])
    page.get_by_label("Duration (minutes)").fill("60")
    page.get_by_role("button", name="Post the event and re-plan").click()
    # the re-plan runs as a job: its progress shows while it runs, then the new plan
    progress = page.locator("#replan-progress")
    progress.locator(".card").first.wait_for(timeout=REPLAN_TIMEOUT_MS)
    page.wait_for_selector("body[data-replanned]", timeout=REPLAN_TIMEOUT_MS)
    after = httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=10).json()
    assert page.evaluate("document.body.dataset.replanned") == str(after["plan_id"])
    job = httpx.get(f"{base}/v1/jobs/{progress.get_attribute('data-job')}", timeout=10).json()
    assert job["kind"] == "site_plan" and job["status"] == "succeeded"
    assert job["result"]["plan_id"] == after["plan_id"]
    shown = dict(card.split("\n", 1) for card in progress.locator(".card").all_inner_texts())
    reported = job["progress"]
    assert shown["job"] == "succeeded" and shown["phase"] == reported["phase"]
    assert shown["best schedule"] == f"${reported['objective_usd']:.2f}"
    assert shown["bound"] == f"${reported['lower_bound_usd']:.2f}"
    gap = reported["gap"]
    assert shown["gap"] == ("–" if gap is None else f"{100 * gap:.2f}%")
    drawn = page.evaluate(MARKS_JS, "replan")["trace_marks"]
    trace = job["result"]["schedule"]["solver"]["trace"]
    assert sorted((d["s"], d["usd"]) for d in drawn) == sorted(
        (t, v) for t, *values in trace for v in values if v is not None
    )
    assert after["plan_id"] != plan["plan_id"] and not after["stale"]
    before_caps = {p["index"]: p["power_cap_w"] for p in periods}
    hit = [p for p in after["schedule"]["periods"] if p["power_cap_w"] != before_caps[p["index"]]]
    assert [p["index"] for p in hit] == list(range(peak["index"], peak["index"] + 4))
    for p in hit:
        assert p["power_cap_w"] == pytest.approx(min(cap_kw * 1000, before_caps[p["index"]]))
        assert p["power_w"] <= p["power_cap_w"] * (1 + 1e-9)
    cost = after["schedule"]["objective_usd"] - plan["schedule"]["objective_usd"]
    shown_cost = f"${abs(cost):,.2f}" if abs(cost) >= 0.005 else "$0.00"
    assert shown_cost in page.locator(".card", has_text="cost of the event").inner_text()
    console.clean(page)
    console.shoot(page, "event")

    # a pasted OpenADR 3.1 event: a wrong one is refused naming the field (the browser
    # logs the 422 response, the only console message allowed here), a right one merged
    event: dict[str, Any] = {
        "programID": "grid-operator",
        "eventName": "pasted",
        "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": periods[10]["start"], "duration": "PT30M"},
        "intervals": [{"id": 0, "payloads": [{"type": "EXPORT_PRICE", "values": [cap_kw]}]}],
    }
    page.get_by_label("Or an OpenADR 3.1 event").fill(json.dumps(event))
    page.get_by_role("button", name="Post the event and re-plan").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "event.intervals[0].payloads[0].type" in alert.inner_text()
    assert len(page.errors) == 1 and "422" in page.errors[0], page.errors
    page.errors.clear()
    event["intervals"][0]["payloads"][0]["type"] = "IMPORT_CAPACITY_LIMIT"
    page.get_by_label("Or an OpenADR 3.1 event").fill(json.dumps(event))
    page.get_by_role("button", name="Post the event and re-plan").click()
    page.wait_for_function(
        "(id) => document.body.dataset.replanned !== id",
        arg=str(after["plan_id"]),
        timeout=REPLAN_TIMEOUT_MS,
    )
    pasted = httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=10).json()
    capped = periods_by_index(pasted)
    assert [capped[t]["power_cap_w"] for t in (10, 11)] == [cap_kw * 1000] * 2
    console.clean(page)
    after = pasted
    page.close()

    # the site page now draws the new plan, the event listed and shaded
    page = console.open(f"/site/{site_id}", "site")
    check_plan_chart(page, after)
    assert "capacity limit" in page.locator("main").inner_text()
    console.clean(page)
    page.close()

    # jobs: a site plan queued through the API, listed until it has finished
    r = httpx.post(
        f"{base}/v1/jobs", json={"kind": "site_plan", "request": {"site_id": site_id}}, timeout=10
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    page = console.open("/jobs", "jobs")
    row = page.locator("tr", has=page.get_by_role("cell", name=job_id, exact=True))
    assert row.count() == 1
    page.locator("tr", has_text=job_id).get_by_text("succeeded").wait_for(timeout=REPLAN_TIMEOUT_MS)
    page.get_by_role("button", name=f"Progress of job {job_id}").click()
    page.wait_for_selector("#chart-trace canvas")
    job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
    drawn = page.evaluate(MARKS_JS, "trace")["trace_marks"]
    trace = job["result"]["schedule"]["solver"]["trace"]
    assert sorted((d["s"], d["usd"]) for d in drawn) == sorted(
        (t, v) for t, *values in trace for v in values if v is not None
    )
    # a long solve, cancelled from the page while it runs
    r = httpx.post(
        f"{base}/v1/jobs",
        json={"kind": "schedule", "request": demo_three_times(LONG_SOLVE_S)},
        timeout=10,
    )
    assert r.status_code == 202, r.text
    long_id = r.json()["id"]
    page.locator("tr", has_text=long_id).get_by_text("running").wait_for()
    page.get_by_role("button", name=f"Cancel job {long_id}").click()
    page.locator("tr", has_text=long_id).get_by_text("cancelled").wait_for()
    assert httpx.get(f"{base}/v1/jobs/{long_id}", timeout=10).json()["status"] == "cancelled"
    console.clean(page)
    console.shoot(page, "jobs")
    page.close()

    # flexibility: the period now by default, periods as UTC clock times; the curve of
    # the peak period and the what-if of a cut there, both run as jobs whose progress
    # the page shows; the curve with a legend, the plan's draw marked and each cap's
    # configurations, as /v1/flexibility answers it
    page = console.open(f"/site/{site_id}/flex", "flex")
    brief = httpx.get(f"{base}/ui/api/sites/{site_id}", timeout=10).json()
    picked = page.get_by_label("Period (UTC)")
    assert picked.input_value() == str(brief["now"]["period"])
    start, end = brief["now"]["start"], brief["now"]["end"]
    assert picked.evaluate("e => e.options[e.selectedIndex].text") == (
        f"{start[:10]} {start[11:16]}–{end[11:16]} UTC (now)"
    )
    picked.select_option(str(peak["index"]))
    page.get_by_role("button", name="Compute").click()
    page.wait_for_selector("body[data-flex-done]", timeout=REPLAN_TIMEOUT_MS)
    flex_job = httpx.get(
        f"{base}/v1/jobs/{page.evaluate('document.body.dataset.flexJob')}", timeout=10
    ).json()
    assert flex_job["kind"] == "flexibility" and flex_job["status"] == "succeeded"
    q = flex_job["progress"]
    assert q["done"] == q["total"] == 15 and q["elapsed_s"] >= 0
    shown = dict(c.split("\n", 1) for c in page.locator("#flex-progress .card").all_inner_texts())
    assert shown["done"] == "15 of 15" and shown["time"].endswith(" s")
    dr_job = httpx.get(
        f"{base}/v1/jobs/{page.evaluate('document.body.dataset.drJob')}", timeout=10
    ).json()
    assert dr_job["kind"] == "demand_response" and dr_job["progress"]["total"] == 2
    assert page.locator("#dr-progress").get_by_text("2 of 2").count() == 1
    page.get_by_text("cost of the cut").wait_for()
    curve = page.evaluate(MARKS_JS, "flex")
    served = page.evaluate(MARKS_JS, "flex_served")
    site = httpx.get(f"{base}/v1/sites/{site_id}", timeout=10).json()
    request = {k: v for k, v in site.items() if k not in SITE_ONLY}
    r = httpx.post(
        f"{base}/v1/flexibility",
        json={"request": request, "period": peak["index"], "points": 15},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    points = r.json()["periods"][0]["points"]
    value = [d for d in curve["curve_marks"] if d["series"] == "value of demand served"]
    cost = [d for d in curve["curve_marks"] if d["series"] != "value of demand served"]
    assert [d["cap kW"] for d in value] == pytest.approx([q["cap_w"] / 1000 for q in points])
    assert [d["usd"] for d in value] == pytest.approx(
        [q["served_value_usd_per_h"] for q in points], rel=1e-12
    )
    assert [d["usd"] for d in cost] == pytest.approx(
        [q["energy_cost_usd_per_h"] + q["unserved_value_usd_per_h"] for q in points], rel=1e-12
    )
    assert [d["served req/s"] for d in served["served_marks"]] == pytest.approx(
        [q["total_served_rps"] for q in points], rel=1e-12
    )
    # each cap's configurations, as `pdwatt flex` labels them
    assert [d["configurations"] for d in served["configs_marks"]] == [
        " ".join(f"{c['n_p']}P{c['n_d']}D" for c in q["configurations"].values()) for q in points
    ]
    # the latest plan's draw in that period, marked on both charts
    latest = httpx.get(f"{base}/v1/sites/{site_id}/plan", timeout=10).json()
    draw_w = periods_by_index(latest)[peak["index"]]["power_w"]
    for marks in (curve, served):
        (mark,) = marks["plan_draw_marks"]
        assert mark["kw"] == pytest.approx(draw_w / 1000, rel=1e-12)
    # a legend names the two lines (the view's colour scale, drawn as its legend)
    assert page.evaluate("window.pdwattViews.flex.scale('color').domain()") == [
        "value of demand served",
        "cost (energy + unserved)",
    ]
    # where the requests served fall as the cap rises, the page says why
    falls = any(
        b["total_served_rps"] < a["total_served_rps"] - 1e-9 for a, b in itertools.pairwise(points)
    )
    assert page.locator("#flex-why").count() == (1 if falls else 0)
    console.clean(page)
    console.shoot(page, "flex")
    page.close()
    # both jobs listed on the jobs page with their progress
    page = console.open("/jobs", "jobs")
    row = page.locator("tr", has_text=flex_job["id"]).inner_text()
    assert "flexibility" in row and "(15 of 15)" in row
    console.clean(page)
    page.close()

    # a site registered by uploading its request file
    upload = tmp_path / "uploaded.json"
    upload.write_text(json.dumps(demo_site(datetime.now(UTC)) | {"name": "uploaded-site"}))
    page = console.open("/", "sites")
    page.get_by_label("Request file").set_input_files(str(upload))
    page.get_by_label("plan it once registered").uncheck()
    page.get_by_role("button", name="Register").click()
    console.wait(page, "site")
    assert "This site has no plan yet." in page.locator("main").inner_text()
    listed = httpx.get(f"{base}/v1/sites", timeout=10).json()["sites"]
    assert sorted(x["name"] for x in listed) == ["demo-site", "uploaded-site"]
    assert page.url.endswith(f"#/site/{listed[1]['id']}")
    console.clean(page)
    page.close()


def periods_by_index(plan: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["index"]: p for p in plan["schedule"]["periods"]}


def test_console_sites_list_shows_fleet_shares(
    live_server: Callable[..., str], browser: Any
) -> None:
    """Two registered sites planned as one fleet: each site's row gives its share of the
    fleet's region in the plan's period now, as the plan has it."""
    base = live_server(workers=1)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = (hour - timedelta(hours=1)).isoformat()
    ids = []
    for name in ("east", "west"):
        body = small_schedule(time_limit_s=10) | {"name": name, "plan_start": start}
        r = httpx.post(f"{base}/v1/sites", json=body, timeout=30)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    fleet = {"name": "two", "sites": ids, "regions": [REGION], "solver": {"time_limit_s": 20}}
    r = httpx.post(f"{base}/v1/fleets", json=fleet, timeout=30)
    assert r.status_code == 201, r.text
    plan = httpx.post(f"{base}/v1/fleets/{r.json()['id']}/plan", timeout=120).json()
    console = Console(browser, base)
    page = console.open("/", "sites")
    t = (datetime.now(UTC) - hour) // timedelta(hours=1) + 1  # the period now
    served = {s["site"]: s["share"] for s in plan["plan"]["regions"][0]["shares"]}
    for name in ("east", "west"):
        link = page.get_by_role("link", name=name, exact=True)
        cell = page.locator("tr", has=link).locator(".fleets").inner_text()
        share = served[name][t]
        assert cell == f"two: r1 {100 * share:.2f}%"
    # the fleets table: its sites and plan; "Plan now" plans it again and redraws
    row = page.locator("#fleets tbody tr").first
    text = row.inner_text()
    assert "two" in text and "east, west" in text and "current" in text, text
    assert f"{plan['plan']['status']}, gap" in text
    fleet_id = plan["fleet_id"]
    row.get_by_role("button", name="Plan fleet two now").click()
    page.wait_for_function(
        f"fetch('/v1/fleets/{fleet_id}/plan').then(r => r.json()).then(p => p.plan_id === 2)"
    )
    console.wait(page, "sites")
    console.clean(page)
    page.close()


def test_console_asks_for_the_key_first(live_server: Callable[..., str], browser: Any) -> None:
    base = live_server(api_key=API_KEY)
    headers = {"X-API-Key": API_KEY}
    r = httpx.post(
        f"{base}/v1/sites", json=demo_site(datetime.now(UTC)), headers=headers, timeout=30
    )
    assert r.status_code == 201, r.text
    console = Console(browser, base)
    page = console.open("/", "gate")
    assert page.locator("#main").is_hidden()
    assert "demo-site" not in page.content()
    api_calls = page.evaluate(
        "performance.getEntriesByType('resource').filter(e => e.initiatorType === 'fetch')"
        ".map(e => new URL(e.name).pathname)"
    )
    assert api_calls == ["/ui/api/config"]  # nothing asked of the API without the key
    console.shoot(page, "key")
    page.get_by_label("Key", exact=True).fill(API_KEY)
    page.get_by_role("button", name="Continue").click()
    console.wait(page, "sites")
    assert page.get_by_role("link", name="demo-site").count() == 1
    console.clean(page)
    page.close()


def test_docs_in_the_browser(live_server: Callable[..., str], browser: Any) -> None:
    base = live_server()
    console = Console(browser, base)
    page = browser.new_page()
    console.watch(page)
    page.goto(f"{base}/docs")
    page.locator(".swagger-ui .info .title", has_text="pdwatt").wait_for()
    page.get_by_text("/v1/sites/{site_id}/events").first.wait_for()
    console.clean(page)
    console.shoot(page, "docs")
    page.close()
