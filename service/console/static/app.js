// The console's pages (hash routes) over the JSON API: #/ sites, #/site/ID, #/site/ID/event,
// #/site/ID/flex, #/jobs. Each page, once drawn, sets body[data-page] and records its
// load time (ms, measured here) in window.pdwattTimings.
import { api, ApiError, formMessage, key, requestOf, whenUnauthorized } from "./api.js";
import * as charts from "./charts.js";

window.pdwattTimings = window.pdwattTimings || [];
const main = document.getElementById("main");
const gate = document.getElementById("gate");
let timers = [];
let config = null;
// a line the next site page shows once at its top (what an action just did)
let flash = null;

// ------------------------------------------------------------------ helpers

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const missing = (x) => x === null || x === undefined;
// a number as text, never "-0.00": what rounds to zero is 0
const unsign = (x, d) => (Math.abs(x) < 0.5 * 10 ** -d ? 0 : x);
const num = (x, d = 2) => (missing(x) ? "–" : unsign(Number(x), d).toFixed(d));
const pct = (x) => (missing(x) ? "–" : `${unsign(100 * x, 2).toFixed(2)}%`);
const kwText = (w) => (missing(w) ? "–" : `${num(w / 1000, 1)} kW`);
const USD = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" });
const WHOLE = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const usd = (x) => (missing(x) ? "–" : USD.format(unsign(Number(x), 2)));
// a value per request: to the tenth of a cent and beyond (0.005 is not "$0.01")
const PER_REQUEST = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", maximumFractionDigits: 4 });
// a change of money: its sign always shown ("+$1.20", "−$0.40", "$0.00")
const usdChange = (x) => {
  if (missing(x)) return "–";
  const v = unsign(Number(x), 2);
  return v === 0 ? USD.format(0) : `${v > 0 ? "+" : "−"}${USD.format(Math.abs(v))}`;
};
// a count of requests: whole, with thousands separators
const count = (x) => (missing(x) ? "–" : WHOLE.format(Math.round(Number(x)) || 0));
// seconds as "12.3 s", or "4 min 05 s" from a minute
const duration = (s) => {
  if (missing(s)) return "–";
  if (s < 60) return `${num(s, 1)} s`;
  const whole = Math.round(s);
  return `${Math.floor(whole / 60)} min ${String(whole % 60).padStart(2, "0")} s`;
};
const when = (iso) => (iso ? new Date(iso).toISOString().slice(0, 16).replace("T", " ") + " UTC" : "–");
const hhmm = (iso) => new Date(iso).toISOString().slice(11, 16);
// the next event as text: name, cap, window (UTC)
function eventText(ev, withDate = true) {
  if (!ev) return "none ahead in the horizon";
  const name = ev.eventName || ev.programID;
  const cap = missing(ev.cap_w) ? "" : `, cap ${kwText(ev.cap_w)}`;
  const started = Date.parse(ev.start) <= Date.now();
  const span = withDate ? `${when(ev.start)} – ${hhmm(ev.end)} UTC` : `${hhmm(ev.start)}–${hhmm(ev.end)} UTC`;
  const mins = Math.round((Date.parse(ev.start) - Date.now()) / 60000);
  const lead = started ? "under way" : `in ${mins >= 60 ? `${Math.floor(mins / 60)} h ` : ""}${mins % 60} min`;
  return `${name}${cap}, ${span} (${lead})`;
}

// a site's fleets with its shares of their regions in the latest fleet plan's period now
function fleetText(fleets) {
  if (!fleets || !fleets.length) return "–";
  return fleets.map((f) => {
    const p = f.plan;
    if (!p) return `${f.name}: no plan`;
    const stale = p.stale ? " (stale)" : "";
    if (!p.shares) return `${f.name}${stale}: plan does not cover now`;
    const regions = Object.entries(p.shares);
    const text = regions.length ? regions.map(([r, x]) => `${r} ${pct(x)}`).join(", ") : "serves no region";
    return `${f.name}${stale}: ${text}`;
  }).join("; ");
}

function table(head, rows, numeric = []) {
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : null }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c)))))));
}
const card = (label, value) => h("div", { class: "card" }, label, h("b", {}, value));
const errorBox = (e) => h("p", { class: "error", role: "alert" }, e instanceof ApiError ? e.message : String(e));
// an error of a form: each field at fault named by the form's label for it, once
const formError = (e, fields) => h("p", { class: "error", role: "alert" }, formMessage(e, fields));
// a form's number field: its value, or an error naming it when empty or not a number
function numberOf(input, label, { min = -Infinity } = {}) {
  const text = input.value.trim();
  const x = Number(text);
  if (text === "" || !Number.isFinite(x)) throw new Error(`${label}: a number is required`);
  if (x < min) throw new Error(`${label}: must be ${min} or more, got ${text}`);
  return x;
}

function every(ms, fn) { const t = setInterval(fn, ms); timers.push(() => clearInterval(t)); }
function stopTimers() { for (const stop of timers) stop(); timers = []; }

function done(page, t0) {
  const ms = performance.now() - t0;
  window.pdwattTimings.push({ page, ms });
  document.body.dataset.page = page;
}

// ------------------------------------------------------------------ key gate

function showGate(message) {
  stopTimers();
  main.replaceChildren();
  main.hidden = true;
  gate.hidden = false;
  document.getElementById("forget-key").hidden = true;
  document.getElementById("gate-error").textContent = message || "";
  document.body.dataset.page = "gate";
  document.getElementById("gate-key").focus();
}
whenUnauthorized(showGate);

gate.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const given = document.getElementById("gate-key").value;
  key.set(given);
  try {
    await api("ui/api/sites");  // a route behind the key: 401 for a wrong one
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) document.getElementById("gate-error").textContent = e.message;
    return;
  }
  document.getElementById("gate-key").value = "";
  route();
});
document.getElementById("forget-key").addEventListener("click", () => { key.clear(); showGate(""); });

// ------------------------------------------------------------------ sites

// the fleets: their sites and latest plan, and a button that plans each now
function fleetsPanel(fleets) {
  if (!fleets.length) return null;
  const status = h("p", { role: "status" });
  const rows = fleets.map((f) => {
    const p = f.plan;
    const plan = h("button", { type: "button", class: "secondary", "aria-label": `Plan fleet ${f.name} now`, onclick: async () => {
      plan.disabled = true;
      status.replaceChildren(h("progress", { "aria-label": "planning" }), ` planning ${f.name}…`);
      try { await api(`v1/fleets/${f.id}/plan`, { method: "POST" }); route(); } catch (e) { status.replaceChildren(errorBox(e)); plan.disabled = false; }
    } }, "Plan now");
    return [
      f.name,
      f.sites.map((s) => s.name).join(", "),
      p ? `${p.status}, gap ${pct(p.mip_gap)}` : "no plan",
      p ? (p.stale ? `stale: ${p.changed_sites.length} site(s) changed` : "current") : "–",
      p ? usd(p.objective_usd) : "–",
      plan,
    ];
  });
  return h("section", { class: "panel", "aria-labelledby": "fleets-title", id: "fleets" },
    h("h2", { id: "fleets-title" }, "Fleets"),
    table(["Fleet", "Sites", "Latest plan", "Since", "Objective", ""], rows, [4]), status);
}

async function sitesPage(t0) {
  const [{ doc }, { doc: fleetDoc }] = await Promise.all([api("ui/api/sites"), api("ui/api/fleets")]);
  const rows = doc.sites.map((s) => {
    const p = s.plan;
    const gpus = Object.entries(s.gpu_inventory).map(([g, n]) => `${n} × ${g}`).join(", ");
    const n = s.now;
    return [
      h("a", { href: `#/site/${s.id}` }, s.name),
      gpus,
      s.deployments.map((d) => d.name).join(", "),
      p ? `${p.status}${p.stale ? " (stale)" : ""}, gap ${pct(p.mip_gap)}` : "no plan",
      n ? `${kwText(n.power_w)} / ${kwText(n.cap_w)}` : (p ? "plan does not cover now" : "–"),
      n ? h("span", { class: n.headroom_w < 0 ? "bad" : null }, `${kwText(n.headroom_w)} (${num(n.headroom_pct, 1)}%)`) : "–",
      p ? usd(p.energy_cost_usd) : "–",
      p ? usd(p.carbon_cost_usd) : "–",
      p ? usd(p.unserved_value_usd) : "–",
      p ? `${kwText(p.peak_power_w)} / ${kwText(p.cap_at_peak_w)}` : "–",
      eventText(s.next_event),
      h("span", { class: "fleets" }, fleetText(s.fleets)),
    ];
  });
  const status = h("p", { role: "status" });
  const file = h("input", { id: "site-file", type: "file", accept: ".json,application/json", required: true });
  const planAfter = h("input", { id: "plan-after", type: "checkbox", checked: true });
  const form = h("form", { class: "panel", "aria-labelledby": "register-title" },
    h("h2", { id: "register-title" }, "Register a site"),
    h("p", { class: "muted" }, "A JSON site request (a schedule request with name and plan_start), as POST /v1/sites takes."),
    h("label", { for: "site-file" }, "Request file"), file,
    h("div", {}, planAfter, " ", h("label", { for: "plan-after" }, "plan it once registered")),
    h("div", {}, h("button", { type: "submit" }, "Register")), status);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    status.replaceChildren("Reading…");
    let body;
    try { body = JSON.parse(await file.files[0].text()); } catch (e) {
      status.replaceChildren(errorBox(`the file is not JSON: ${e.message}`)); return;
    }
    try {
      const { doc: site } = await api("v1/sites", { method: "POST", body });
      if (planAfter.checked) {
        status.replaceChildren(h("progress", { "aria-label": "planning" }), ` planning ${site.name}…`);
        await api(`v1/sites/${site.id}/plan`, { method: "POST" });
      }
      location.hash = `#/site/${site.id}`;
    } catch (e) { status.replaceChildren(errorBox(e)); }
  });
  main.replaceChildren(
    h("h1", {}, "Sites"),
    rows.length ? table(["Site", "GPUs", "Deployments", "Latest plan", "Draw now / cap", "Headroom now",
      "Energy cost", "Carbon cost", "Value of unserved demand", "Peak / cap there", "Next event",
      "Fleets: shares of regions now"], rows, [4, 5, 6, 7, 8, 9])
      : h("p", {}, "No site registered yet."),
    rows.length ? h("p", { class: "muted note" }, "Costs are those of the latest plan over its horizon; the plan "
      + "minimises their sum (with instance starts and stops), its objective.") : null,
    fleetsPanel(fleetDoc.fleets),
    form);
  done("sites", t0);
}

// ------------------------------------------------------------------ a site

async function loadSite(id) {
  charts.loadVega();  // the charts' scripts load while the data comes
  return (await api(`ui/api/sites/${id}/page`)).doc;  // { summary, site, plan, targets_now }
}

function nowPeriod(summary) {
  const t = Math.floor((Date.now() - Date.parse(summary.plan_start)) / (summary.period_minutes * 60000));
  return t >= 0 && t < summary.n_periods ? t : null;
}

function flashLine() {
  const line = flash ? h("p", { class: "flash", role: "status", id: "flash" }, flash) : null;
  flash = null;
  return line;
}

function siteNav(id, here) {
  const links = [["", "Plan"], ["/event", "Post an event"], ["/flex", "Flexibility"]];
  return h("nav", { class: "actions", "aria-label": "Site" }, links.map(([p, label]) =>
    h("a", { href: `#/site/${id}${p}`, "aria-current": here === p ? "page" : null }, label)));
}

// What a schedule breaks: periods over the cap, periods over a transition limit,
// periods short of GPUs; a schedule that breaks any is infeasible (as the server says
// when it says, otherwise from its counts)
function violations(t) {
  const parts = [["cap", t.cap_violations], ["transition limit", t.limit_violations],
                 ["GPU inventory", t.inventory_violations]]
    .filter(([, n]) => n > 0).map(([what, n]) => `${what}: ${n} period${n === 1 ? "" : "s"}`);
  const infeasible = t.feasible === false || t.infeasible === true || parts.length > 0;
  return infeasible ? h("span", { class: "bad" }, `infeasible${parts.length ? ` (${parts.join(", ")})` : ""}`) : "none";
}

function baselineTable(plan) {
  const s = plan.schedule;
  const rows = [["plan", s.totals], ...Object.entries(s.baselines)].map(([name, t]) => [
    name, usd(t.objective_usd), usd(t.cost_usd), usd(t.carbon_cost_usd), usd(t.unserved_value_usd),
    usd(t.transition_cost_usd), num(t.energy_kwh, 1), num(t.carbon_kg, 1), count(t.unserved_requests),
    count(t.instance_starts), violations(t),
  ]);
  return h("div", {}, table(["Schedule", "Objective", "Energy cost", "Carbon cost", "Value of unserved demand",
    "Transitions", "Energy kWh", "Carbon kg", "Unserved requests", "Starts", "Violations"], rows, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
  h("p", { class: "muted note" }, "Objective = energy cost + carbon cost + value of unserved demand + transitions. "
    + "A schedule that breaks the cap, a transition limit or the GPU inventory in some period is infeasible: "
    + "its objective is not comparable to the plan's."));
}

// The replica targets of the period now: counts per role and, for a deployment that
// lists GPU settings, each role's setting; under them the GPU power the site's instances
// are held to (total_gpu_power_limit_w, the value handed to the orchestrator).
function targetsNow(now, drawNow) {
  const named = now.targets.some((x) => "prefill_setting" in x);
  const head = ["Deployment", "Prefill", "Decode", "GPUs", ...(named ? ["Prefill setting", "Decode setting"] : []),
                "Power now (after PUE)", "Served / demand (req/s)"];
  const rows = now.targets.map((x) => {
    const d = drawNow?.deployments?.[x.deployment];
    return [x.deployment, x.num_prefill, x.num_decode, x.gpus,
      ...(named ? [x.prefill_setting ?? "full clock", x.decode_setting ?? "full clock"] : []),
      d ? kwText(d.power_w) : "–", d ? `${num(d.served_rps)} / ${num(d.demand_rps)}` : "–"];
  });
  const limit = now.periods?.[0]?.total_gpu_power_limit_w;
  return h("div", {}, h("p", {}, `Period ${now.period} (${when(now.targets[0]?.start)} – ${when(now.targets[0]?.end)})`),
    table(head, rows, [1, 2, 3, head.length - 2, head.length - 1]),
    limit === undefined ? null : h("p", { id: "gpu-power-limit" }, `GPU power the instances are held to: ${kwText(limit)}`));
}

// The site now, at the top of its page: the plan's period now, its draw against the
// cap, the headroom, price and carbon, the next event with its cap, and the replica
// targets (counts and settings per deployment) the orchestrator holds now.
function nowStrip(summary, plan, targets, shed = null) {
  const n = summary.now;
  const next = card("next event", eventText(summary.next_event, false));
  next.id = "next-event";
  if (!n) {
    const s = plan.schedule;
    return h("section", { class: "now-strip", id: "now-strip", "aria-labelledby": "now-title" },
      h("h2", { id: "now-title" }, "Now"),
      h("p", {}, `The plan does not cover now (it runs from ${when(s.periods[0].start)} to ${when(s.periods.at(-1).end)}).`),
      h("div", { class: "cards" }, next));
  }
  const c = (id, label, value, cls) => { const el = card(label, value); el.id = id; if (cls) el.querySelector("b").className = cls; return el; };
  return h("section", { class: "now-strip", id: "now-strip", "aria-labelledby": "now-title", "data-period": String(n.period) },
    h("h2", { id: "now-title" }, `Now: period ${n.period}, ${hhmm(n.start)}–${hhmm(n.end)} UTC`),
    h("div", { class: "cards" },
      c("now-draw", "planned draw / cap", `${kwText(n.power_w)} / ${kwText(n.cap_w)}`),
      c("now-headroom", "headroom", `${kwText(n.headroom_w)} (${num(n.headroom_pct, 1)}%)`, n.headroom_w < 0 ? "bad" : null),
      c("now-price", "price now", `${num(n.price_usd_per_mwh)} USD/MWh`),
      c("now-carbon", "carbon now", `${num(n.carbon_g_per_kwh, 1)} g/kWh`),
      next),
    targets ? targetsNow(targets, n) : null,
    shed);
}

// "Shed now": a site power target in kW, first answered by POST .../shed as a dry run
// (what it would do: the settings per deployment for the counts running now, the power
// shed, the limits it would store, the cost per hour and its change from the plan;
// nothing recorded), then, once confirmed, posted again without the flag and at the
// preview's time (recorded as an event, the site re-planned
// from the next boundary in a job, followed as an event's re-plan is).
const SHED_FIELDS = [["target_kw", "Shed to (kW)"], ["at", "Shed to (kW)"], ["duration", "Shed to (kW)"]];
function shedPanel(siteId, n) {
  const target = h("input", { id: "shed-target", type: "number", min: "0", step: "any", required: true,
                              value: num(Math.max(0, 0.9 * n.power_w) / 1000, 1) });
  const status = h("div", { role: "status", id: "shed-status" });
  const out = h("div", { id: "shed-result" });
  const progressEl = h("div", {});
  const preview = h("button", { type: "submit", id: "shed-preview" }, "Preview the shed");
  const form = h("form", { class: "shed", id: "shed", "aria-labelledby": "shed-title", novalidate: true },
    h("h3", { id: "shed-title" }, "Shed now"),
    h("p", { class: "muted" }, "A site power target (kW, after PUE) met at once by GPU settings on the "
      + "instances running now. Previewed first (nothing recorded), then applied on confirmation: kept as "
      + "a capacity limit to the horizon's end and the site re-planned from the next period."),
    h("div", { class: "row" }, h("div", {}, h("label", { for: "shed-target" }, "Shed to (kW)"), target),
      h("div", {}, preview)),
    status, out, progressEl);
  const fail = (e) => { status.replaceChildren(e instanceof ApiError ? formError(e, SHED_FIELDS) : errorBox(e)); };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    let kw;
    try { kw = numberOf(target, "Shed to (kW)", { min: 0 }); } catch (e) { fail(e.message); return; }
    preview.disabled = true;
    status.replaceChildren(h("progress", { "aria-label": "asking" }), " asking what the shed would do…");
    try {
      const { doc } = await api(`v1/sites/${siteId}/shed`, { method: "POST", body: { target_kw: kw, dry_run: true } });
      document.body.dataset.shedAt = doc.at;
      status.replaceChildren();
      const apply = h("button", { type: "button", id: "shed-apply", onclick: async () => {
        apply.disabled = true; discard.disabled = true;
        status.replaceChildren(h("progress", { "aria-label": "shedding" }), ` shedding to ${num(kw, 1)} kW…`);
        try {
          // applied at the time the preview answered for, not at the moment of the click
          const { doc: done_ } = await api(`v1/sites/${siteId}/shed`, { method: "POST", body: { target_kw: kw, at: doc.at } });
          out.replaceChildren(shedAnswer(done_, false));
          document.body.dataset.shed = String(done_.event.id);
          const job = done_.replan?.job_id;
          if (!job) { status.replaceChildren(`Shed applied (event ${done_.event.id}); no period left to re-plan.`); return; }
          status.replaceChildren(`Shed applied (event ${done_.event.id}); re-planning from period ${done_.replan.from_period} in job `,
            h("a", { href: "#/jobs" }, job), "…");
          const after = await followReplan(job, progressEl);
          document.body.dataset.replanned = String(after.plan_id);
          flash = `Shed to ${num(kw, 1)} kW applied (event ${done_.event.id}, ${kwText(done_.shed_w)} shed now); re-planned: plan ${after.plan_id}.`;
          route();
        } catch (e) { fail(e); apply.disabled = false; discard.disabled = false; }
      } }, "Apply the shed and re-plan");
      const discard = h("button", { type: "button", class: "secondary", onclick: () => { out.replaceChildren(); status.replaceChildren(); } }, "Discard");
      out.replaceChildren(shedAnswer(doc, true), h("div", { class: "actions" }, apply, discard));
    } catch (e) { fail(e); } finally { preview.disabled = false; }
  });
  return form;
}

// a shed's answer: met or short, power before and after, the limits stored (or that
// would be), the settings and loads per deployment, the cost per hour and its terms
function shedAnswer(d, dry) {
  const short = d.met ? "met" : `not met: ${kwText(d.shortfall_w)} short (every deployment at its least power)`;
  const limits = (d.stored_limits || []).map((x) => `${when(x.start)}: ${num(x.limit_kw, 1)} kW`).join("; ");
  const rows = Object.entries(d.deployments).map(([name, x]) => [name, x.n_p, x.n_d, x.prefill_setting, x.decode_setting,
    `${num(x.served_rps)} / ${num(x.demand_rps)}`, kwText(x.power_w)]);
  const nb = d.next_boundary;
  // settings alone short of the target: the instance changes the next boundary brings
  const changes = (c) => Object.entries(c).map(([k, v]) => `${k} ${v.from.n_p}/${v.from.n_d} → ${v.to.n_p}/${v.to.n_d}`).join(", ");
  const boundary = !nb ? null : h("p", { id: "shed-boundary" }, `At the next period (${nb.period}): `
    + (nb.feasible === true ? `${changes(nb.instance_changes) || "no instance change"}, site power ${kwText(nb.site_power_w)}`
      : nb.feasible === false ? `no schedule meets the target (${nb.reason})` : `not solved now (${nb.reason}); the re-plan gives the instance changes`));
  return h("div", { class: "panel", id: dry ? "shed-dry-run" : "shed-applied" },
    h("h4", {}, dry ? `Dry run: nothing recorded (period ${d.period}, ${when(d.at)})` : `Applied: event ${d.event?.id} (period ${d.period})`),
    h("div", { class: "cards" },
      card("target", `${num(d.target_w / 1000, 1)} kW, ${short}`),
      card("site power: planned → after", `${kwText(d.site_power_before_w)} → ${kwText(d.site_power_w)}`),
      card("shed", kwText(d.shed_w)),
      card("cost per hour: change from the plan", `${usdChange(d.cost_change_usd_per_h)} (${usd(d.planned_cost_usd_per_h)} planned → ${usd(d.cost_usd_per_h)}: energy ${usd(d.energy_usd_per_h)}, carbon ${usd(d.carbon_usd_per_h)}, unserved demand ${usd(d.unserved_usd_per_h)})`),
      card(dry ? "limit it would store" : "limit stored", limits || "–")),
    d.stored_target_reason ? h("p", { class: "muted note" }, d.stored_target_reason) : null,
    table(["Deployment", "Prefill", "Decode", "Prefill setting", "Decode setting", "Served / demand (req/s)", "GPU power (before PUE)"],
      rows, [1, 2, 5, 6]),
    boundary);
}

async function sitePage(t0, id) {
  const { summary, site, plan, targets_now: now } = await loadSite(id);
  const head = [h("h1", {}, `Site ${summary.name}`), siteNav(id, "")];
  if (!plan) {
    const status = h("p", { role: "status" });
    const button = h("button", { type: "button", onclick: async () => {
      button.disabled = true;
      status.replaceChildren(h("progress", { "aria-label": "planning" }), " planning…");
      try { await api(`v1/sites/${id}/plan`, { method: "POST" }); route(); } catch (e) { status.replaceChildren(errorBox(e)); button.disabled = false; }
    } }, "Plan now");
    main.replaceChildren(...head, h("p", {}, "This site has no plan yet."), button, status);
    done("site", t0);
    return;
  }
  const s = plan.schedule;
  const rows = charts.planRows(plan, site);
  const b = summary.plan;
  const shed = summary.now ? shedPanel(id, summary.now) : null;
  const second = h("select", { id: "second-axis" }, h("option", { value: "price USD/MWh" }, "price (USD/MWh)"),
    h("option", { value: "carbon g/kWh" }, "carbon (g/kWh)"));
  const chartEl = (id, label) => h("div", { class: "chart", id, role: "img", "aria-label": label });
  const powerEl = chartEl("chart-power", `Site power per deployment, prefill and decode apart, against the cap over ${s.periods.length} periods`);
  const phasesEl = chartEl("chart-phases", "Prefill and decode instances per deployment");
  const unservedEl = chartEl("chart-unserved", "Unserved demand and periods at the cap");
  const wrap = (el) => h("div", { class: "chart-wrap" }, el);
  main.replaceChildren(...head,
    flashLine(),
    nowStrip(summary, plan, now, shed),
    h("div", { class: "cards" },
      card("status", `${plan.status}${plan.stale ? " (stale: site changed since)" : ""}`),
      card("objective", usd(s.objective_usd)),
      card("energy cost", usd(s.totals.cost_usd)), card("carbon cost", usd(s.totals.carbon_cost_usd)),
      card("value of unserved demand", usd(s.totals.unserved_value_usd)), card("gap", pct(s.mip_gap)),
      card("peak / cap there", `${kwText(b.peak_power_w)} / ${kwText(b.cap_at_peak_w)}`),
      card("periods at the cap", `${b.periods_at_cap} of ${s.periods.length}`),
      card("periods", `${plan.first_period}–${plan.n_periods - 1} × ${plan.period_minutes} min`)),
    h("div", { class: "row" }, h("div", {}, h("label", { for: "second-axis" }, "Second axis"), second)),
    wrap(powerEl), wrap(phasesEl), wrap(unservedEl), periodDetails(rows.hover, plan),
    h("h2", {}, "Plan against the baselines"), baselineTable(plan),
    h("h2", {}, "Events"), eventsTable(id, summary.events));
  const bandRows = charts.bands(plan, summary);
  const nowAt = charts.nowRows(s.periods[0].start, s.periods.at(-1).end);
  const drawPower = () => charts.draw(powerEl, "power", charts.powerSpec(rows, bandRows, second.value,
    charts.nowRows(s.periods[0].start, s.periods.at(-1).end)));
  second.addEventListener("change", drawPower);
  await Promise.all([drawPower(), charts.draw(phasesEl, "phases", charts.phasesSpec(rows, nowAt)),
                     charts.draw(unservedEl, "unserved", charts.unservedSpec(rows, nowAt))]);
  charts.crosshair([powerEl, phasesEl, unservedEl], s.periods);
  // now moves: the strip is read again every minute, and the charts' now line drawn
  // again when the period now changes (a new plan: the whole page)
  let shownPeriod = summary.now?.period ?? null;
  every(60000, async () => {
    try {
      const fresh = await loadSite(id);
      if (fresh.plan?.plan_id !== plan.plan_id) { route(); return; }
      document.getElementById("now-strip")?.replaceWith(nowStrip(fresh.summary, fresh.plan, fresh.targets_now,
        fresh.summary.now ? shed : null));  // the shed form kept as it is
      const period = fresh.summary.now?.period ?? null;
      if (period !== shownPeriod) {
        shownPeriod = period;
        const at = charts.nowRows(s.periods[0].start, s.periods.at(-1).end);
        await Promise.all([charts.draw(powerEl, "power", charts.powerSpec(rows, bandRows, second.value, at)),
                           charts.draw(phasesEl, "phases", charts.phasesSpec(rows, at)),
                           charts.draw(unservedEl, "unserved", charts.unservedSpec(rows, at))]);
      }
    } catch { /* the next minute tries again */ }
  });
  done("site", t0);
}

// The events posted to the site: each one's cap, periods, and its effect between the
// plan before it and the plan its re-plan made (the power it shed at most over its
// periods, the energy shed there, the change of the objective), whether it is in force
// or was retracted (and when), and a retraction: asked, confirmed, then posted as
// DELETE .../events/ID?replan=job, whose re-plan is followed as an event's is.
function eventsTable(siteId, events) {
  if (!events.length) return h("p", {}, "No event posted.");
  const progressEl = h("div", {});
  const status = h("div", { role: "status", id: "retract-status" });
  const effect = (e, f) => (e.effect ? f(e.effect) : h("span", { title: e.effect_note || "" }, "–"));
  const retract = (e, cell) => {
    const name = e.eventName || e.programID;
    const ask = h("button", { type: "button", class: "secondary", "aria-label": `Retract event ${name}`, onclick: () => {
      const go = h("button", { type: "button", "aria-label": `Confirm: retract event ${name} and re-plan`, onclick: async () => {
        go.disabled = true;
        keep.disabled = true;
        status.replaceChildren(h("progress", { "aria-label": "re-planning" }), ` retracting ${name}…`);
        try {
          const { doc } = await api(`v1/sites/${siteId}/events/${e.id}?replan=job`, { method: "DELETE" });
          status.replaceChildren(`Event ${name} retracted at ${when(doc.event.retracted)}; re-planning in job `,
            h("a", { href: "#/jobs" }, doc.job.id), "…");
          const after = await followReplan(doc.job.id, progressEl);
          document.body.dataset.retracted = String(e.id);
          document.body.dataset.replanned = String(after.plan_id);
          route();
        } catch (err) { status.replaceChildren(errorBox(err)); cell.replaceChildren(ask); }
      } }, "Retract and re-plan");
      const keep = h("button", { type: "button", class: "secondary", onclick: () => cell.replaceChildren(ask) }, "Keep");
      cell.replaceChildren(h("span", { class: "actions" }, go, keep));
    } }, "Retract");
    return ask;
  };
  const rows = events.map((e) => {
    const action = h("span", {});
    if (e.retracted === null) action.append(retract(e, action));
    return [
      e.eventName || e.programID, when(e.received), e.types.map(charts.payloadName).join(", "),
      missing(e.cap_w) ? "–" : kwText(e.cap_w),
      e.first_period === null ? (e.note || "outside the horizon") : `${e.first_period}–${e.end_period - 1} (${when(e.start)} – ${when(e.end)})`,
      effect(e, (x) => kwText(x.max_shed_w)), effect(e, (x) => `${num(x.window_energy_shed_kwh, 1)} kWh`),
      effect(e, (x) => usdChange(x.cost_delta_usd)),
      e.retracted === null ? "in force" : `retracted ${when(e.retracted)}`, action,
    ];
  });
  return h("div", { id: "events" },
    table(["Event", "Received", "Types", "Cap", "Periods", "Shed at most", "Energy shed", "Cost", "Status", ""], rows, [3, 5, 6, 7]),
    h("p", { class: "muted note" }, "Shed and cost: between the plan before the event and the plan its re-plan "
      + "made; the power shed at most in one of its periods, the energy shed over them, and the change of "
      + "the plan's objective (energy, carbon, unserved demand, transitions) over the horizon. A retracted "
      + "event stays listed with what it did while in force."),
    status, progressEl);
}

// a period's numbers, as hover shows them, for the keyboard: a slider over the periods
function periodDetails(hover, plan) {
  const first = plan.schedule.periods[0].index;
  const startAt = Math.max(0, hover.findIndex((r) => r["at cap"] === "yes"));
  const slider = h("input", { id: "period-pick", type: "range", min: String(first),
                              max: String(first + hover.length - 1), step: "1", value: String(first + startAt) });
  const out = h("div", { class: "scroll", "aria-live": "polite" });
  const show = () => {
    const row = hover[Number(slider.value) - first];
    out.replaceChildren(table(["", ""], Object.entries(row).filter(([k]) => k !== "start" && k !== "end")
      .map(([k, v]) => [k, String(v)])));
  };
  slider.addEventListener("input", show);
  show();
  return h("details", {}, h("summary", {}, "A period's numbers"),
    h("div", { class: "row" }, h("div", {}, h("label", { for: "period-pick" }, "Period"), slider)), out);
}

// ------------------------------------------------------------------ an event

function capEvent(capKw, startIso, minutes, name) {
  return {
    programID: "pdwatt-console", eventName: name || "capacity limit",
    payloadDescriptors: [{ payloadType: "IMPORT_CAPACITY_LIMIT", units: "KW" }],
    intervalPeriod: { start: startIso, duration: `PT${minutes}M` },
    intervals: [{ id: 0, payloads: [{ type: "IMPORT_CAPACITY_LIMIT", values: [capKw] }] }],
  };
}

const START_PATTERN = /^\d{4}-\d{2}-\d{2}[ T]([01]\d|2[0-3]):[0-5]\d$/;

// the plan's periods a window of [startMs, endMs) touches
const periodsIn = (plan, startMs, endMs) => (plan ? plan.schedule.periods.filter(
  (p) => Date.parse(p.end) > startMs && Date.parse(p.start) < endMs) : []);

// the form's fields, as the API names what they make of the event
// (an interval's payload is the cap typed; the interval itself, its span: the window)
const EVENT_FIELDS = [["event.intervals[0].payloads", "Cap (kW)"], ["event.intervals", "Start (UTC)"],
                      ["event.intervalPeriod.duration", "Duration (minutes)"], ["event.intervalPeriod", "Start (UTC)"],
                      ["event.eventName", "Name"]];

async function eventPage(t0, id) {
  const loaded = await loadSite(id);
  const { summary } = loaded;
  let { plan } = loaded;  // the plan before the next post: the latest once one is made
  const nextStart = new Date(Math.max(Date.parse(summary.plan_start), Date.now()));
  const step = summary.period_minutes * 60000;
  const aligned = new Date(Date.parse(summary.plan_start) + Math.ceil((nextStart - Date.parse(summary.plan_start)) / step) * step);
  const span = 4 * summary.period_minutes;
  // by default a cap that binds: 80% of the least the plan draws in the default window
  const drawn = periodsIn(plan, aligned.getTime(), aligned.getTime() + span * 60000).map((p) => p.power_w);
  const defaultCap = drawn.length ? Math.floor(8 * Math.min(...drawn) / 1000) / 10 : null;
  const cap = h("input", { id: "ev-cap", type: "number", min: "0", step: "any", value: defaultCap === null ? "" : defaultCap.toFixed(1) });
  // a 24-hour UTC time as text (a datetime-local input is drawn in the browser's locale,
  // with AM/PM in many)
  const start = h("input", { id: "ev-start", type: "text", inputmode: "numeric", autocomplete: "off", size: "16",
                             pattern: START_PATTERN.source.slice(1, -1), placeholder: "YYYY-MM-DD HH:MM",
                             "aria-describedby": "ev-start-hint", value: aligned.toISOString().slice(0, 16).replace("T", " ") });
  const minutes = h("input", { id: "ev-minutes", type: "number", min: "1", step: "1", value: String(span) });
  const name = h("input", { id: "ev-name", type: "text", value: "capacity limit" });
  const pasted = h("textarea", { id: "ev-json", spellcheck: "false", placeholder: "{\"programID\": …, \"intervals\": […]}" });
  const status = h("div", { role: "status" });
  const progressEl = h("div", {});
  const result = h("div", {});
  // the preview: the plan's draw in the window typed, against the cap typed
  const previewText = h("p", { id: "ev-preview", "aria-live": "polite" });
  const previewEl = h("div", { class: "chart", id: "chart-preview", role: "img", "aria-label": "The plan's draw and cap, the window and the cap typed" });
  let previewTimer = null;
  const preview = () => {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const t = START_PATTERN.test(start.value.trim()) ? Date.parse(`${start.value.trim().replace(" ", "T")}:00Z`) : NaN;
      const m = Number(minutes.value), c = Number(cap.value);
      const inside = Number.isFinite(t) && m > 0 ? periodsIn(plan, t, t + m * 60000) : [];
      if (!plan) { previewText.replaceChildren("No plan yet: nothing to preview."); return; }
      if (!inside.length) {
        previewText.replaceChildren("The window typed lies outside the plan's periods.");
        await charts.draw(previewEl, "preview", charts.previewSpec(plan, null, null));
        return;
      }
      const top = Math.max(...inside.map((p) => p.power_w)), low = Math.min(...inside.map((p) => p.power_w));
      const ok = cap.value.trim() !== "" && Number.isFinite(c);
      const below = ok ? inside.filter((p) => p.power_w > c * 1000).length : 0;
      previewText.replaceChildren(`The plan draws ${kwText(low)} to ${kwText(top)} in the ${inside.length} period`
        + `${inside.length === 1 ? "" : "s"} of this window (${hhmm(inside[0].start)}–${hhmm(inside.at(-1).end)} UTC). `
        + (!ok ? "" : below ? `A cap of ${num(c, 1)} kW is below that draw in ${below} of them, by up to ${kwText(top - c * 1000)}: the plan must change.`
          : `A cap of ${num(c, 1)} kW is above that draw throughout: the plan need not change.`));
      await charts.draw(previewEl, "preview", charts.previewSpec(plan,
        { start: inside[0].start, end: inside.at(-1).end }, ok ? c : null));
    }, 200);
  };
  for (const el of [cap, start, minutes]) el.addEventListener("input", preview);
  const form = h("form", { class: "panel", "aria-labelledby": "event-title", novalidate: true },
    h("h2", { id: "event-title" }, "A capacity limit"),
    h("div", { class: "row" },
      h("div", {}, h("label", { for: "ev-cap" }, "Cap (kW)"), cap),
      h("div", {}, h("label", { for: "ev-start" }, "Start (UTC)"), start,
        h("small", { id: "ev-start-hint", class: "muted" }, "24-hour, UTC: YYYY-MM-DD HH:MM")),
      h("div", {}, h("label", { for: "ev-minutes" }, "Duration (minutes)"), minutes),
      h("div", {}, h("label", { for: "ev-name" }, "Name"), name)),
    previewText,
    h("label", { for: "ev-json" }, "Or an OpenADR 3.1 event (JSON; used instead of the fields above when given)"), pasted,
    h("div", {}, h("button", { type: "submit", id: "ev-submit" }, "Post the event and re-plan")), status);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let event;
    const fromForm = !pasted.value.trim();
    try {
      if (fromForm) {
        const capKw = numberOf(cap, "Cap (kW)", { min: 0 });
        if (!START_PATTERN.test(start.value.trim())) throw new Error("Start (UTC): a 24-hour UTC time, YYYY-MM-DD HH:MM");
        const mins = numberOf(minutes, "Duration (minutes)", { min: 1 });
        if (!Number.isInteger(mins)) throw new Error(`Duration (minutes): a whole number of minutes, got ${minutes.value.trim()}`);
        event = capEvent(capKw, `${start.value.trim().replace(" ", "T")}:00Z`, mins, name.value);
      } else {
        try { event = JSON.parse(pasted.value); } catch (err) { throw new Error(`the pasted event is not JSON: ${err.message}`); }
      }
    } catch (err) { status.replaceChildren(errorBox(err.message)); return; }
    const button = document.getElementById("ev-submit");
    button.disabled = true;
    const began = performance.now();
    const bar = h("progress", { "aria-label": "re-planning" });
    const secs = h("span", {}, "");
    status.replaceChildren(bar, " re-planning… ", secs);
    const tick = setInterval(() => { secs.textContent = `${((performance.now() - began) / 1000).toFixed(0)} s`; }, 250);
    try {
      // the re-plan runs as a site_plan job, whose progress is polled and shown; an
      // event already in force and planned for is answered at once, not re-planned
      const { doc } = await api(`v1/sites/${id}/events?replan=job`, { method: "POST", body: { event } });
      const periodsText = `periods ${doc.event.periods[0]}–${doc.event.periods.at(-1)}`;
      if (doc.replanned === false) {
        clearInterval(tick);
        progressEl.replaceChildren();
        status.replaceChildren(h("p", { id: "not-replanned" }, `Event already merged (${periodsText}) and in force: `
          + `not re-planned, the plan ${doc.plan.plan_id} was made with it.`));
        plan = doc.plan;
        await showBeforeAfter(result, plan, plan, true);
        return;
      }
      status.replaceChildren(bar, " re-planning in job ", h("a", { href: "#/jobs" }, doc.job.id), "… ", secs);
      const after = await followReplan(doc.job.id, progressEl);
      clearInterval(tick);
      status.replaceChildren(h("p", {}, `Event ${doc.event.duplicate ? "already merged" : "merged"} (${periodsText}); re-planned in ${((performance.now() - began) / 1000).toFixed(1)} s.`));
      // what the event did, as `pdwatt dr` tells it: from the site's page (its effect)
      const { doc: page } = await api(`ui/api/sites/${id}/page`);
      const logged = page.summary.events.find((x) => x.id === doc.event.id) ?? null;
      await showBeforeAfter(result, plan, after, doc.event.duplicate, logged);
      plan = after;
    } catch (err) {
      clearInterval(tick);
      status.replaceChildren(fromForm && err instanceof ApiError ? formError(err, EVENT_FIELDS) : errorBox(err));
    } finally { button.disabled = false; }
  });
  main.replaceChildren(h("h1", {}, `Site ${summary.name}: post an event`), siteNav(id, "/event"), form,
    h("div", { class: "chart-wrap" }, previewEl), progressEl, result);
  preview();
  done("event", t0);
}

// a re-plan job followed to its end: its progress (phase, best schedule, bound, gap) and
// the best schedule and bound over time shown in el as it goes; its plan, or its error
async function followReplan(jobId, el) {
  const samples = [];  // [seconds, best, bound] seen while polling
  const values = h("div", { class: "cards", id: "replan-progress", "aria-live": "polite", "data-job": jobId });
  const chartEl = h("div", { class: "chart", id: "chart-replan", role: "img", "aria-label": `Best schedule and bound of job ${jobId}` });
  el.replaceChildren(h("h2", {}, "Re-plan progress"), values, chartEl);
  let drawn = 0;
  for (;;) {
    const { doc: job } = await api(`v1/jobs/${jobId}`);
    const q = job.progress;
    if (!q) values.replaceChildren(card("job", job.status));  // queued: every solver worker busy
    else {
      values.replaceChildren(card("job", job.status), card("phase", q.phase ?? "–"), card("best schedule", q.objective_usd === null ? "–" : `$${num(q.objective_usd)}`),
        card("bound", q.lower_bound_usd === null ? "–" : `$${num(q.lower_bound_usd)}`), card("gap", pct(q.gap)),
        card("solve time", `${num(q.elapsed_s, 1)} s`));
      if (!samples.length || samples.at(-1)[0] !== q.elapsed_s) samples.push([q.elapsed_s, q.objective_usd, q.lower_bound_usd]);
    }
    if (["succeeded", "failed", "cancelled"].includes(job.status)) {
      const trace = job.result?.schedule?.solver?.trace || samples;
      if (trace.length) await charts.draw(chartEl, "replan", charts.traceSpec(trace));
      if (job.status === "succeeded") return job.result;
      throw new Error(job.error ? `${job.error.title}: ${job.error.detail}` : `the re-plan job was ${job.status}`);
    }
    if (samples.length > drawn) { drawn = samples.length; await charts.draw(chartEl, "replan", charts.traceSpec(samples)); }
    await new Promise((r) => setTimeout(r, 500));
  }
}

// Before and after an event: the plans' totals, then what the event did as `pdwatt dr`
// reports a cut (its effect between the plan before it and the plan its re-plan made,
// from the site's page: the power shed at most and on average in its window, the energy
// shed there and over the periods both plans cover, the cost and its terms, the demand
// lost per deployment), and both plans' power and cap with the window shaded.
async function showBeforeAfter(el, before, after, duplicate = false, logged = null) {
  const tb = before?.schedule.totals, ta = after.schedule.totals;
  const money = (x) => usd(x), change = (x) => usdChange(x);
  const keys = [["objective_usd", "Objective", money, change], ["cost_usd", "Energy cost", money, change],
                ["carbon_cost_usd", "Carbon cost", money, change],
                ["unserved_value_usd", "Value of unserved demand", money, change],
                ["transition_cost_usd", "Transitions", money, change],
                ["energy_kwh", "Energy (kWh)", (x) => num(x, 1), (x) => num(x, 1)],
                ["unserved_requests", "Unserved requests", count, count]];
  const rows = keys.map(([k, label, f, d]) => [label, tb ? f(tb[k]) : "–", f(ta[k]), tb ? d(ta[k] - tb[k]) : "–"]);
  const costOf = tb ? ta.objective_usd - tb.objective_usd : null;
  const chartEl = h("div", { class: "chart", id: "chart-compare", role: "img", "aria-label": "Site power and cap before and after the event" });
  const x = logged?.effect;
  const effect = !logged ? null : !x ? h("p", { class: "muted", id: "event-effect" }, `What the event did: – (${logged.effect_note || "no pair of plans"})`)
    : h("div", { class: "dr-result", id: "event-effect" }, h("h3", {}, "What the event did"),
      h("div", { class: "cards" },
        card("shed at most", kwText(x.max_shed_w)), card("shed on average in the window", kwText(x.mean_shed_w)),
        card("energy shed in the window", `${num(x.window_energy_shed_kwh, 1)} kWh`),
        card("energy shed over the horizon", `${num(x.energy_shed_kwh, 1)} kWh`),
        card("cost", x.cost_delta_usd === null ? "–" : usdChange(x.cost_delta_usd))),
      x.cost_delta_breakdown ? h("p", { class: "note" }, `Cost: energy ${usdChange(x.cost_delta_breakdown.energy_usd)}, `
        + `carbon ${usdChange(x.cost_delta_breakdown.carbon_usd)}, unserved demand ${usdChange(x.cost_delta_breakdown.unserved_value_usd)}, `
        + `transitions ${usdChange(x.cost_delta_breakdown.transition_usd)}.`) : null,
      table(["Deployment", "Requests lost", "Value lost"],
        Object.entries(x.demand_lost || {}).map(([n, d]) => [n, count(d.requests), usdChange(d.value_usd)]), [1, 2]),
      h("p", { class: "muted note" }, "Requests lost: unserved with the event less without it, over the periods both "
        + "plans cover; negative where the re-plan serves a deployment more than before."));
  const windows = logged?.start ? [{ start: logged.start, end: logged.end, label: `${logged.eventName || logged.programID}`
    + (missing(logged.cap_w) ? "" : ` · ${num(logged.cap_w / 1000, 1)} kW`) }] : [];
  el.replaceChildren(h("h2", {}, "Before and after"),
    h("div", { class: "cards" }, card("cost of the event", costOf === null ? "–"
      : `${usdChange(costOf)}${duplicate ? " (already merged: the plan is unchanged)" : ""}`),
      card("plan after", `${after.status}, gap ${pct(after.schedule.mip_gap)}`)),
    table(["", "Before", "After", "Change"], rows, [1, 2, 3]), effect, h("div", { class: "chart-wrap" }, chartEl));
  await charts.draw(chartEl, "compare", charts.compareSpec(before, after, windows));
  document.body.dataset.replanned = String(after.plan_id);
}

// ------------------------------------------------------------------ flexibility

// a job followed to its end, its progress shown in el (status, phase, evaluations or
// solves done of the total, time since it started); its result, or its error
async function followJob(jobId, el, what, every_ = 400) {
  for (;;) {
    const { doc: job } = await api(`v1/jobs/${jobId}`);
    const q = job.progress || {};
    el.replaceChildren(h("div", { class: "cards", "data-job": jobId },
      card(what, h("a", { href: "#/jobs" }, `job ${jobId}: ${job.status}`)),
      card("phase", q.phase ?? "–"),
      card("done", missing(q.total) ? "–" : `${q.done} of ${q.total}`),
      card("time", missing(q.elapsed_s) ? "–" : `${num(q.elapsed_s, 1)} s`)));
    if (job.status === "succeeded") return job.result;
    if (["failed", "cancelled"].includes(job.status)) {
      const err = job.error;
      throw new ApiError(422, err ? { title: err.title, detail: err.detail,
        errors: err.field ? [{ field: err.field, reason: err.detail }] : [] } : { title: `the ${what} job was ${job.status}` });
    }
    await new Promise((r) => setTimeout(r, every_));
  }
}

// the flexibility form's fields, as POST /v1/jobs names them
const FLEX_FIELDS = [["request.period", "Period (UTC)"], ["request.points", "Caps on the curve"],
                     ["request.event.reduction_w", "Cut (kW below the planned draw)"], ["request.event.end_period", "Cut lasts (periods)"],
                     ["request.event.start_period", "Period (UTC)"], ["request.event", "Cut (kW below the planned draw)"]];

async function flexPage(t0, id) {
  const { summary, site, plan } = await loadSite(id);
  const start0 = Date.parse(summary.plan_start), step = summary.period_minutes * 60000;
  const at = (t) => new Date(start0 + t * step).toISOString();
  const clock = (t) => `${hhmm(at(t))}–${hhmm(at(t + 1))} UTC`;
  // the period now by default (before: the first at the cap), each shown as its UTC times
  const nowT = nowPeriod(summary);
  const chosen = nowT ?? plan?.schedule.periods[0].index ?? 0;
  const period = h("select", { id: "flex-period" }, Array.from({ length: summary.n_periods }, (_, t) =>
    h("option", { value: String(t), selected: t === chosen }, `${at(t).slice(0, 10)} ${clock(t)}${t === nowT ? " (now)" : ""}`)));
  const points = h("input", { id: "flex-points", type: "number", min: "2", max: "200", step: "1", value: "15" });
  // the cut: kW below the plan's draw in each period of the window (a cut of the cap
  // above the draw would be no cut); by default a fifth of the draw in the period chosen
  const drawAt = (t) => plan?.schedule.periods.find((q) => q.index === t)?.power_w ?? null;
  const cutDefault = (t) => (drawAt(t) === null ? "" : num(drawAt(t) / 5000, 1));
  const cut = h("input", { id: "dr-cut", type: "number", min: "0", step: "any", value: cutDefault(chosen) });
  period.addEventListener("change", () => { cut.value = cutDefault(Number(period.value)); });
  const span = h("input", { id: "dr-periods", type: "number", min: "1", step: "1", value: "4" });
  const status = h("div", { role: "status" });
  const flexProgress = h("div", { id: "flex-progress", "aria-live": "polite" });
  const drProgress = h("div", { id: "dr-progress", "aria-live": "polite" });
  const flexEl = h("div", { class: "chart", id: "chart-flex", role: "img", "aria-label": "Flexibility curve: value served and cost against the cap" });
  const servedEl = h("div", { class: "chart", id: "chart-flex-served", role: "img", "aria-label": "Served demand per deployment and configurations against the cap" });
  const curveEl = h("div", {});
  const drEl = h("div", {});
  const form = h("form", { class: "panel", "aria-labelledby": "flex-title", novalidate: true },
    h("h2", { id: "flex-title" }, "A period's flexibility and a cut's what-if"),
    h("div", { class: "row" },
      h("div", {}, h("label", { for: "flex-period" }, "Period (UTC)"), period),
      h("div", {}, h("label", { for: "flex-points" }, "Caps on the curve"), points),
      h("div", {}, h("label", { for: "dr-cut" }, "Cut (kW below the planned draw)"), cut),
      h("div", {}, h("label", { for: "dr-periods" }, "Cut lasts (periods)"), span)),
    h("p", { class: "muted note" }, "Both run as jobs (listed on the Jobs page): the curve evaluates the period "
      + "at each cap; the what-if solves the plan twice, without and with the cut."),
    h("div", {}, h("button", { type: "submit", id: "flex-submit" }, "Compute")), status, flexProgress, drProgress);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const request = requestOf(site);
    const p = Number(period.value);
    let body;
    try {
      const n = numberOf(points, "Caps on the curve", { min: 2 });
      const cutKw = numberOf(cut, "Cut (kW below the planned draw)", { min: 0 });
      const lasts = numberOf(span, "Cut lasts (periods)", { min: 1 });
      body = { n, cutKw, lasts };
    } catch (err) { status.replaceChildren(errorBox(err.message)); return; }
    const button = document.getElementById("flex-submit");
    button.disabled = true;
    status.replaceChildren();
    curveEl.replaceChildren(); drEl.replaceChildren();
    const end = Math.min(summary.n_periods, p + body.lasts);
    try {
      const [{ doc: fj }, { doc: dj }] = await Promise.all([
        api("v1/jobs", { method: "POST", body: { kind: "flexibility", request: { request, period: p, points: body.n } } }),
        api("v1/jobs", { method: "POST", body: { kind: "demand_response", request: { request, event: {
          name: "console what-if", start_period: p, end_period: end, reduction_w: 1000 * body.cutKw } } } }),
      ]);
      document.body.dataset.flexJob = fj.id;
      document.body.dataset.drJob = dj.id;
      await Promise.all([
        followJob(fj.id, flexProgress, "flexibility").then((flex) => showCurve(flex.periods[0], plan, site, clock, curveEl, flexEl, servedEl)),
        followJob(dj.id, drProgress, "what-if").then((dr) => showWhatIf(dr, drEl, `${num(body.cutKw, 1)} kW below the planned draw, ${clock(p).slice(0, 5)}–${hhmm(at(end))} UTC`)),
      ]);
      document.body.dataset.flexDone = "1";
    } catch (err) { status.replaceChildren(err instanceof ApiError ? formError(err, FLEX_FIELDS) : errorBox(err)); }
    finally { button.disabled = false; }
  });
  main.replaceChildren(h("h1", {}, `Site ${summary.name}: flexibility`), siteNav(id, "/flex"), form, curveEl,
    h("div", { class: "chart-wrap" }, flexEl), h("div", { class: "chart-wrap" }, servedEl), drEl);
  done("flex", t0);
}

// The curve of a period: value served and cost against the cap (legend, the plan's draw
// marked), the served demand per deployment with the configurations at each cap (as
// `pdwatt flex`'s chart labels them), the same in a table, and why the requests served
// may fall as the cap rises.
async function showCurve(curve, plan, site, clock, el, flexEl, servedEl) {
  const names = Object.keys(curve.points[0]?.served_rps || {});
  const planned = plan?.schedule.periods.find((q) => q.index === curve.period) ?? null;
  const draw = planned ? planned.power_w : null;
  const pts = curve.points;
  const penalty = Object.fromEntries(site.deployments.map((d) => [d.name, d.unserved_penalty_usd_per_request]));
  let why = null;
  const i = pts.findIndex((q, k) => k > 0 && q.total_served_rps < pts[k - 1].total_served_rps - 1e-9);
  if (i > 0) {
    const a = pts[i - 1], b = pts[i];
    const moved = names.map((n) => [n, b.served_rps[n] - a.served_rps[n]]);
    const gain = moved.filter(([, d]) => d > 1e-9).map(([n]) => `${n} (${PER_REQUEST.format(penalty[n])} a request)`);
    const loss = moved.filter(([, d]) => d < -1e-9).map(([n]) => `${n} (${PER_REQUEST.format(penalty[n])} a request)`);
    why = h("p", { class: "note", id: "flex-why" }, `The requests served fall from ${num(a.total_served_rps)} to `
      + `${num(b.total_served_rps)} req/s as the cap rises from ${num(a.cap_w / 1000, 1)} to ${num(b.cap_w / 1000, 1)} kW: `
      + "at each cap the curve takes the period's plan of least cost (energy and carbon of the draw plus the value of "
      + "the demand left unserved), not the most requests; the power a higher cap allows goes to "
      + `${gain.join(", ") || "other deployments"}${loss.length ? `, taken from ${loss.join(", ")}` : ""}. `
      + "The value of the demand served never falls as the cap rises, and the cost never rises.");
  }
  const rows = pts.map((q) => [num(q.cap_w / 1000, 1), num(q.site_power_w / 1000, 1), usd(q.served_value_usd_per_h),
    usd(q.energy_cost_usd_per_h + q.unserved_value_usd_per_h),
    ...names.map((n) => `${q.configurations[n].n_p}P${q.configurations[n].n_d}D · ${num(q.served_rps[n])}`)]);
  el.replaceChildren(h("h2", {}, `Flexibility of ${clock(curve.period)} (period ${curve.period})`),
    h("div", { class: "cards" }, card("least draw", kwText(curve.min_site_power_w)),
      card("draw without a cap", kwText(curve.unconstrained_power_w)), card("cap now", kwText(curve.request_cap_w)),
      card("plan's draw", kwText(draw))),
    why,
    h("details", { id: "flex-table" }, h("summary", {}, "The curve's points"),
      table(["Cap (kW)", "Site power (kW)", "Value served (USD/h)", "Cost (USD/h)", ...names.map((n) => `${n}: config · req/s`)],
        rows, [0, 1, 2, 3])));
  await Promise.all([charts.draw(flexEl, "flex", charts.flexSpec(curve, draw)),
                     charts.draw(servedEl, "flex_served", charts.flexServedSpec(curve, names, draw))]);
}

function showWhatIf(dr, el, window) {
  el.replaceChildren(h("h2", {}, `What-if: the cut, ${window}`),
    h("div", { class: "cards" }, card("cost of the cut", usdChange(dr.cost_delta_usd)),
      card("largest shed", kwText(dr.max_shed_w)), card("energy shed in the window", `${num(dr.window_energy_shed_kwh)} kWh`)),
    table(["Deployment", "Requests lost to the cut", "Value lost"],
      Object.entries(dr.demand_lost).map(([n, d]) => [n, count(d.requests), usdChange(d.value_usd)]), [1, 2]),
    h("p", { class: "muted note", id: "lost-sign" }, "Requests lost: the requests left unserved over the whole horizon "
      + "with the cut, less those without it. Positive: the cut leaves more unserved. Negative: with the cut "
      + "this deployment serves more than without it, the re-plan moving GPUs or power to it from the others, "
      + "or serving it before or after the window."));
}

// ------------------------------------------------------------------ jobs

async function jobsPage(t0) {
  const list = h("div", {});
  const detail = h("div", {});
  const samples = new Map();  // job id -> [seconds, best, bound] seen while polling
  let shown = null;
  async function refresh() {
    const { doc } = await api("ui/api/jobs");
    for (const j of doc.jobs) {
      if (j.status === "running" && j.progress) {
        const s = samples.get(j.id) || [];
        const q = j.progress;
        if (!s.length || s.at(-1)[0] !== q.elapsed_s) s.push([q.elapsed_s, q.objective_usd, q.lower_bound_usd]);
        samples.set(j.id, s);
      }
    }
    // a site by its name (its id where it has none: deleted since)
    const site = (x) => (x.site_id ? h("a", { href: `#/site/${x.site_id}`, title: x.site_id }, x.site_name ?? x.site_id) : "");
    const jobRows = doc.jobs.map((j) => {
      const p = j.progress || {};
      const cancel = ["queued", "running"].includes(j.status)
        ? h("button", { type: "button", class: "secondary", "aria-label": `Cancel job ${j.id}`, onclick: async () => {
          await api(`v1/jobs/${j.id}`, { method: "DELETE" }); refresh(); } }, "Cancel") : "";
      const show = h("button", { type: "button", class: "secondary", "aria-label": `Progress of job ${j.id}`, onclick: () => { shown = j.id; refresh(); } }, "Progress");
      // a flexibility curve's evaluations, a what-if's solves: done of the total
      const phase = `${p.phase || ""}${missing(p.total) ? "" : ` (${p.done} of ${p.total})`}`;
      return [j.created, [j.id, j.kind, site(j), j.trigger ?? "–", j.status, phase, pct(p.gap),
              when(j.created), duration(j.duration_s), h("span", { class: "actions" }, show, cancel)]];
    });
    // the plans synchronous requests made (no job lists them)
    const planRows = doc.plans.map((q) => [q.created, [`plan ${q.plan_id}`, "site plan, synchronous", site(q),
      q.trigger ?? "–", "succeeded", q.status, "–", when(q.created), duration(q.duration_s), ""]]);
    const rows = [...jobRows, ...planRows].sort((a, b) => (a[0] < b[0] ? 1 : a[0] > b[0] ? -1 : 0)).map(([, r]) => r);
    list.replaceChildren(rows.length ? table(["Job", "Kind", "Site", "Trigger", "Status", "Phase", "Gap", "Created", "Duration", ""], rows, [8])
      : h("p", {}, "No job yet."));
    if (shown) {
      const j = doc.jobs.find((x) => x.id === shown);
      const trace = j?.trace || samples.get(shown) || [];
      const el = h("div", { class: "chart", id: "chart-trace", role: "img", "aria-label": `Best schedule and bound of job ${shown}` });
      detail.replaceChildren(h("h2", {}, `Job ${shown}`), trace.length ? el : h("p", {}, "No progress recorded yet."));
      if (trace.length) await charts.draw(el, "trace", charts.traceSpec(trace));
    }
    return doc.jobs;
  }
  main.replaceChildren(h("h1", {}, "Jobs"), h("p", { class: "muted" }, "Queued, running and the latest finished jobs, "
    + "and the plans made at once by a request (synchronous); refreshed every 2 s. Trigger: what asked for it "
    + "(an event, a retraction, a forecast, a shed, the site's clock entering a period, or a user's request). "
    + "Duration: from the start to the end (to now while it runs)."), list, detail);
  await refresh();
  every(2000, () => refresh().catch((e) => list.replaceChildren(errorBox(e))));
  done("jobs", t0);
}

// ------------------------------------------------------------------ router

async function route() {
  stopTimers();
  const t0 = window.pdwattTimings.length ? performance.now() : 0;  // first page: from navigation
  if (config.api_key_required && !key.get()) { showGate(""); done("gate", t0); return; }
  gate.hidden = true;
  main.hidden = false;
  document.getElementById("forget-key").hidden = !config.api_key_required;
  delete document.body.dataset.page;
  const path = location.hash.replace(/^#/, "") || "/";
  let m;
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  try {
    if (path === "/") await sitesPage(t0);
    else if (path === "/jobs") await jobsPage(t0);
    else if ((m = path.match(/^\/site\/([A-Za-z0-9_-]+)$/))) await sitePage(t0, m[1]);
    else if ((m = path.match(/^\/site\/([A-Za-z0-9_-]+)\/event$/))) await eventPage(t0, m[1]);
    else if ((m = path.match(/^\/site\/([A-Za-z0-9_-]+)\/flex$/))) await flexPage(t0, m[1]);
    else { main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Sites"))); done("none", t0); }
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return;
    main.replaceChildren(errorBox(e));
    document.body.dataset.page = "error";
  }
}

// a site's page draws its charts at once: their scripts start loading first
const SITE_PAGE = /^#\/site\/[A-Za-z0-9_-]+$/;

async function start() {
  if (SITE_PAGE.test(location.hash)) charts.loadVega();
  const r = await fetch(new URL("api/config", document.baseURI));
  config = await r.json();
  window.addEventListener("hashchange", route);
  await route();
}
start();
