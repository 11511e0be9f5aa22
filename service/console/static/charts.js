// Vega-Lite charts of plans, flexibility and solver progress. Every embedded view is
// kept in window.pdwattViews under its name, so its marks can be read (tests).

window.pdwattViews = window.pdwattViews || {};
const AT_CAP_RTOL = 1e-6;
// Vega's tableau10, so that a deployment has the same colour on every chart
const PALETTE = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2",
                 "#ff9da6", "#9d755d", "#bab0ac"];

export const kw = (w) => w / 1000;
const fmt = (x, d = 2) => (x === null || x === undefined ? "" : Number(x).toFixed(d));

// Vega, Vega-Lite and vega-embed, loaded once, by the first page that draws a chart
const VEGA = ["vendor/vega/vega.min.js", "vendor/vega-lite/vega-lite.min.js",
              "vendor/vega-embed/vega-embed.min.js"];
// (fetched in parallel, run in this order: async = false)
let vegaLoaded = null;
export function loadVega() {
  vegaLoaded ??= Promise.all(VEGA.map((src) => new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.async = false;
    s.onload = resolve;
    s.onerror = () => reject(new Error(`could not load ${src}`));
    document.head.append(s);
  })));
  return vegaLoaded;
}

// A chart at its element's width: the width is given in pixels, not as "container",
// which costs Vega a second layout pass on every draw (about a quarter of a chart's
// drawing time); the chart is drawn again when its element's width changes.
//
// A chart over time (spec.aligned) has its plot at a fixed place and width: its left
// axis a fixed extent, the plot's width the element's less fixed gutters on either
// side, and what lies right of the plot (a right axis, the legends) in the right
// gutter. Every such chart of a page thus puts one time at one x: reading down the
// page at one time reads one period.
const drawn = new WeakMap();  // element -> { view, width, observer }
// left: padding + the y axis' fixed extent + its title; right: a right axis and the
// legends (below the plot on a phone's width)
export const GUTTER = { left: 62, get right() { return narrow() ? 62 : 250; } };
export async function draw(el, name, spec) {
  await loadVega();
  const width = el.clientWidth;
  const { aligned, ...rest } = spec;
  const sized = aligned
    ? { ...rest, width: Math.max(120, width - GUTTER.left - GUTTER.right), autosize: { type: "pad" } }
    : { ...rest, width };
  const { view } = await window.vegaEmbed(el, sized, { actions: false, renderer: "canvas", tooltip });
  const before = drawn.get(el);
  before?.view.finalize();
  const observer = before?.observer ?? new ResizeObserver(() => {
    const now = drawn.get(el);
    if (now && el.isConnected && el.clientWidth !== now.width) {
      clearTimeout(now.timer);
      now.timer = setTimeout(() => draw(el, now.name, now.spec), 100);
    }
  });
  drawn.set(el, { view, width, observer, name, spec });
  observer.observe(el);
  window.pdwattViews[name] = view;
  return view;
}

// on a phone's width the legends go below the plot, which keeps the page's width
const narrow = () => window.innerWidth < 700;
const BASE = {
  $schema: "https://vega.github.io/schema/vega-lite/v6.json",
  autosize: { type: "fit-x", contains: "padding" },
  get config() {
    return { legend: { orient: narrow() ? "bottom" : "right", columns: narrow() ? 2 : undefined,
                       labelLimit: 150, titleLimit: 150 },
             title: { anchor: "start", limit: narrow() ? 340 : 0 } };
  },
};
// a chart over time: its plot placed as every other one's (see draw); y axes of a
// fixed extent
const TIME_BASE = {
  ...BASE,
  aligned: true,
  padding: { left: 5, top: 5, right: 5, bottom: 5 },
  get config() {
    return { ...BASE.config, axisY: { minExtent: 40, maxExtent: 40 } };
  },
};

// Time is drawn in UTC: a temporal field on a "utc" scale (Vega-Lite otherwise reads
// and labels it in the browser's time zone), and the axis labels with it.
const UTC = { type: "utc" };
export const utcX = (fieldName = "start", extra = {}) => ({ field: fieldName, type: "temporal", scale: UTC, ...extra });
function periodX(title = "time (UTC)") {
  return utcX("start", { title, axis: { format: "%H:%M", labelOverlap: true } });
}
// "12:00" of an ISO time, in UTC
export const hhmm = (iso) => new Date(iso).toISOString().slice(11, 16);

// The tooltip: a compact table kept inside the window (beside the pointer, on the side
// with room, never above the top or below the bottom), in place of vega-tooltip's,
// which a long tooltip near the top of the window pushes above it.
const MARGIN = 8;
function tipElement() {
  let el = document.getElementById("vg-tooltip-element");
  if (!el) {
    el = document.createElement("div");
    el.id = "vg-tooltip-element";
    el.className = "tip";
    el.setAttribute("role", "tooltip");
    document.body.append(el);
  }
  return el;
}
export function placeTip(el, x, y) {
  const w = el.offsetWidth, hgt = el.offsetHeight;
  const vw = document.documentElement.clientWidth, vh = window.innerHeight;
  let left = x + 14;
  if (left + w > vw - MARGIN) left = x - 14 - w;
  left = Math.max(MARGIN, Math.min(left, vw - MARGIN - w));
  let top = y + 14;
  if (top + hgt > vh - MARGIN) top = y - 14 - hgt;
  top = Math.max(MARGIN, Math.min(top, vh - MARGIN - hgt));
  el.style.left = `${left}px`;
  el.style.top = `${top}px`;
}
function tooltip(handler, event, item, value) {
  const el = tipElement();
  if (value === null || value === undefined || value === "") { el.hidden = true; return; }
  const rows = typeof value === "object" ? Object.entries(value) : [["", value]];
  const table = document.createElement("table");
  for (const [k, v] of rows) {
    const tr = table.insertRow();
    const th = document.createElement("th");
    th.textContent = k;
    tr.append(th);
    tr.insertCell().textContent = v instanceof Date ? v.toISOString() : String(v);
  }
  el.replaceChildren(table);
  el.hidden = false;
  placeTip(el, event.clientX, event.clientY);
}

// a colour mixed with white: a deployment's decode layer beside its prefill one
function lighter(hex, share = 0.45) {
  const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return `#${c.map((v) => Math.round(v + (255 - v) * share).toString(16).padStart(2, "0")).join("")}`;
}

// rows of one plan: per period, per stacked layer (each deployment's prefill and decode
// instances' power after PUE, then the idle GPUs', stacked here: y0 to y1), and per
// period the hover row with the numbers. A plan stored before its periods gave power by
// phase stacks one layer per deployment.
export function planRows(plan, site) {
  const periods = plan.schedule.periods;
  const pue = site.site.pue;
  const idleW = site.site.idle_gpu_power_w;
  const penalty = Object.fromEntries(
    site.deployments.map((d) => [d.name, d.unserved_penalty_usd_per_request]));
  const seconds = plan.period_minutes * 60;
  const stack = [], phases = [], unserved = [], hover = [], cap = [], signal = [];
  for (const p of periods) {
    const time = `${hhmm(p.start)}–${hhmm(p.end)}`;
    const at = { start: p.start, end: p.end, period: p.index, time };
    const room = p.power_cap_w - p.power_w;
    // the hover row: compact (one line per deployment), headroom with it
    const h = { period: p.index, start: p.start, end: p.end, time: `${time} UTC`,
                "site power kW": fmt(kw(p.power_w)), "cap kW": fmt(kw(p.power_cap_w)),
                "headroom kW": `${fmt(kw(room))} (${fmt(p.power_cap_w ? (100 * room) / p.power_cap_w : 0, 1)}% of the cap)`,
                "price USD/MWh": fmt(p.price_usd_per_mwh), "carbon g/kWh": fmt(p.carbon_g_per_kwh, 1),
                "at cap": p.power_w >= p.power_cap_w * (1 - AT_CAP_RTOL) ? "yes" : "no" };
    let lost = 0, lostRps = 0, top = 0;
    for (const [name, d] of Object.entries(p.deployments)) {
      const split = {};
      const parts = d.prefill_power_w === undefined ? [[name, null, d.power_w]]
        : [[`${name} prefill`, "prefill", d.prefill_power_w], [`${name} decode`, "decode", d.decode_power_w]];
      for (const [layer, phase, watts] of parts) {
        const w = kw(watts * pue);
        stack.push({ ...at, layer, deployment: name, phase, kw: w, y0: top, y1: top + w });
        top += w;
        if (phase) split[phase] = fmt(w);
      }
      phases.push({ ...at, deployment: name, phase: "prefill", n: d.n_p });
      phases.push({ ...at, deployment: name, phase: "decode", n: d.n_d });
      const u = Math.max(0, d.demand_rps - d.served_rps);
      const value = u * seconds * penalty[name];
      // periods that serve all their demand draw no bar (most of them: fewer marks to draw)
      if (u > 0) unserved.push({ ...at, deployment: name, rps: u, usd: value, y0: lostRps, y1: lostRps + u });
      lost += value; lostRps += u;
      const phaseKw = split.prefill === undefined ? "" : ` (prefill ${split.prefill}, decode ${split.decode})`;
      h[name] = `nP/nD ${d.n_p}/${d.n_d} · ${fmt(kw(d.power_w * pue))} kW${phaseKw} · `
        + `served ${fmt(d.served_rps)} of ${fmt(d.demand_rps)} req/s`;
    }
    const idle = kw(p.idle_gpus * idleW * pue);
    stack.push({ ...at, layer: "idle GPUs", kw: idle, y0: top, y1: top + idle });
    h["unserved rps"] = fmt(lostRps);
    h["value lost USD"] = fmt(lost);
    hover.push(h);
    cap.push({ ...at, cap_kw: kw(p.power_cap_w), at_cap: h["at cap"] === "yes" });
    signal.push({ ...at, "price USD/MWh": p.price_usd_per_mwh, "carbon g/kWh": p.carbon_g_per_kwh });
  }
  const names = Object.keys(periods[0].deployments);
  const layers = [], colours = [];
  names.forEach((name, i) => {
    const colour = PALETTE[i % PALETTE.length];
    if (periods[0].deployments[name].prefill_power_w === undefined) {
      layers.push(name); colours.push(colour);
    } else {
      layers.push(`${name} prefill`, `${name} decode`); colours.push(colour, lighter(colour));
    }
  });
  layers.push("idle GPUs"); colours.push("#b8bcc2");
  return { stack, phases, unserved, hover, cap, signal, layers, colours, names };
}

// an OpenADR payload type as words: IMPORT_CAPACITY_LIMIT -> "import capacity limit"
const PAYLOADS = { IMPORT_CAPACITY_LIMIT: "import capacity limit", EXPORT_CAPACITY_LIMIT: "export capacity limit",
                   PRICE: "price", GHG: "carbon intensity", IMPORT_CAPACITY_SUBSCRIPTION: "import capacity subscription" };
export const payloadName = (t) => PAYLOADS[t] || String(t).toLowerCase().replaceAll("_", " ");

export const EVENT_KINDS = ["posted event", "cap lowered (grid signals)"];
const EVENT_COLOURS = ["#f0a500", "#c9a0dc"];

// windows to shade, each labelled with its name and cap: the site's events (periods
// they touch) and every run of periods whose cap is below the horizon's highest that
// no posted event covers (a cut written into the site's own grid signals)
export function bands(plan, summary) {
  const periods = plan.schedule.periods;
  const out = [];
  const covered = new Set();
  for (const e of summary.events || []) {
    if (e.first_period === null || e.retracted) continue;
    for (let t = e.first_period; t < e.end_period; t++) covered.add(t);
    const cap = e.cap_w === null || e.cap_w === undefined ? "" : ` · ${fmt(kw(e.cap_w), 1)} kW`;
    out.push({ start: e.start, end: e.end, kind: EVENT_KINDS[0], label: `${e.eventName || e.programID}${cap}`,
               what: `${e.eventName || e.programID} (${e.types.map(payloadName).join(", ")})${cap}` });
  }
  const top = Math.max(...periods.map((p) => p.power_cap_w));
  let run = null;
  for (const p of periods) {
    if (p.power_cap_w < top && !covered.has(p.index)) {
      if (run && run.last === p.index - 1) { run.end = p.end; run.last = p.index; run.cap = Math.min(run.cap, p.power_cap_w); }
      else { run = { start: p.start, end: p.end, last: p.index, cap: p.power_cap_w }; out.push(run); }
    } else run = null;
  }
  return out.map((b) => (b.kind ? b : {
    start: b.start, end: b.end, kind: EVENT_KINDS[1], label: `cap ${fmt(kw(b.cap), 1)} kW`,
    what: `cap lowered to ${fmt(kw(b.cap), 1)} kW (site's grid signals)` }));
}

// the now line: a rule at now, when now lies in the chart's time span
export function nowRows(startIso, endIso, now = Date.now()) {
  return now >= Date.parse(startIso) && now < Date.parse(endIso)
    ? [{ now: new Date(now).toISOString(), label: `now ${new Date(now).toISOString().slice(11, 16)} UTC` }] : [];
}
const nowLayer = (rows, withLabel = false) => ({
  layer: [
    { name: "now", data: { values: rows }, mark: { type: "rule", color: "#1b1f24", strokeWidth: 2, strokeDash: [6, 3] },
      encoding: { x: utcX("now") } },
    ...(withLabel ? [{ data: { values: rows }, mark: { type: "text", align: "left", baseline: "bottom", dx: 4, y: 0, dy: -2, fontWeight: "bold", fontSize: 11 },
      encoding: { x: utcX("now"), text: { field: "label" } } }] : []),
  ],
});

// a field name as Vega-Lite reads it (dots and brackets would be paths)
const field = (k) => k.replace(/[.[\]\\]/g, "\\$&");

const hoverLayer = (rows) => ({
  name: "periods", data: { values: rows },
  params: [{ name: "hover", select: { type: "point", on: "pointerover", clear: "pointerout" } }],
  mark: { type: "rect" },
  encoding: {
    x: utcX(), x2: { field: "end" },
    tooltip: Object.keys(rows[0] || {}).filter((k) => k !== "start" && k !== "end")
      .map((k) => ({ field: field(k), title: k })),
    color: { value: "#0b5cad" },
    opacity: { condition: { param: "hover", empty: false, value: 0.12 }, value: 0 },
  },
});

// event windows: shaded, in the legend by kind, labelled at the top with name and cap
const bandLayer = (rows) => ({
  layer: [
    { name: "bands", data: { values: rows },
      mark: { type: "rect", fillOpacity: 0.22, tooltip: true },
      encoding: { x: utcX(), x2: { field: "end" },
                  fill: { field: "kind", type: "nominal", title: "windows",
                          scale: { domain: EVENT_KINDS, range: EVENT_COLOURS } },
                  tooltip: [{ field: "what", title: "window" }] } },
    { name: "band_labels", data: { values: rows },
      mark: { type: "text", align: "left", baseline: "top", dx: 3, y: 2, fontSize: 10, color: "#6b4a00", limit: 160 },
      encoding: { x: utcX(), text: { field: "label" } } },
  ],
});

export function powerSpec(rows, bandRows, signalName, now = []) {
  return {
    ...TIME_BASE, height: 300, title: "Site power against the cap",
    layer: [
      {
        layer: [
          bandLayer(bandRows),
          {
            name: "power", data: { values: rows.stack },
            mark: { type: "rect" },
            encoding: {
              x: periodX(), x2: { field: "end" },
              y: { field: "y0", type: "quantitative", title: "site power (kW)" }, y2: { field: "y1" },
              color: { field: "layer", type: "nominal", title: "drawn by (after PUE)",
                       scale: { domain: rows.layers, range: rows.colours } },
            },
          },
          {
            name: "cap", data: { values: rows.cap },
            mark: { type: "rule", color: "#b42318", strokeWidth: 2 },
            encoding: { x: utcX(), x2: { field: "end" },
                        y: { field: "cap_kw", type: "quantitative" } },
          },
          nowLayer(now, true),
          hoverLayer(rows.hover),
        ],
      },
      {
        name: "signal", data: { values: rows.signal },
        mark: { type: "line", interpolate: "step-after", color: "#555", strokeDash: [4, 3] },
        encoding: { x: utcX(),
                    y: { field: signalName, type: "quantitative", title: `${signalName} (dashed)`,
                         scale: { zero: false }, axis: { orient: "right" } } },
      },
    ],
    resolve: { scale: { y: "independent" } },
  };
}

// a deployment's colour, the same on every chart (and its legend entry even where it
// draws nothing)
const deploymentColour = (names) => ({
  field: "deployment", type: "nominal",
  scale: { domain: names, range: names.map((_, i) => PALETTE[i % PALETTE.length]) },
});

export function phasesSpec(rows, now = []) {
  return {
    ...TIME_BASE, height: 220, title: "Instances per deployment (prefill solid, decode dashed)",
    layer: [
      {
        name: "instances", data: { values: rows.phases },
        mark: { type: "line", interpolate: "step-after", point: false, tooltip: true },
        encoding: {
          x: periodX(), y: { field: "n", type: "quantitative", title: "instances" },
          color: deploymentColour(rows.names),
          strokeDash: { field: "phase", type: "nominal", sort: ["prefill", "decode"] },
          tooltip: [{ field: "time", title: "time (UTC)" }, { field: "deployment" },
                    { field: "phase" }, { field: "n" }],
        },
      },
      nowLayer(now),
      hoverLayer(rows.hover),
    ],
  };
}

export function unservedSpec(rows, now = []) {
  const binding = rows.cap.filter((c) => c.at_cap).map((c) => ({ start: c.start, end: c.end, what: "site at its cap" }));
  return {
    ...TIME_BASE, height: 200, title: "Unserved demand (bars) and periods at the cap (shaded red)",
    layer: [
      { data: { values: binding }, mark: { type: "rect", color: "#b42318", opacity: 0.15, tooltip: true },
        encoding: { x: utcX(), x2: { field: "end" },
                    tooltip: [{ field: "what", title: "period" }] } },
      {
        name: "unserved", data: { values: rows.unserved },
        mark: { type: "rect" },
        encoding: {
          x: periodX(), x2: { field: "end" },
          y: { field: "y0", type: "quantitative", title: "unserved (req/s)" }, y2: { field: "y1" },
          color: deploymentColour(rows.names),
        },
      },
      nowLayer(now),
      hoverLayer(rows.hover),
    ],
  };
}

// a window shaded and labelled (the event's periods)
const windowLayer = (rows) => ({
  layer: [
    { name: "window", data: { values: rows }, mark: { type: "rect", color: EVENT_COLOURS[0], fillOpacity: 0.22 },
      encoding: { x: utcX(), x2: { field: "end" } } },
    { data: { values: rows }, mark: { type: "text", align: "left", baseline: "top", dx: 3, y: 2, fontSize: 10, color: "#6b4a00" },
      encoding: { x: utcX(), text: { field: "label" } } },
  ],
});

// before and after an event: site power and cap of both plans, its window shaded
export function compareSpec(before, after, windows = []) {
  const rows = [];
  for (const [label, plan] of [["before", before], ["after", after]]) {
    if (!plan) continue;
    for (const p of plan.schedule.periods) {
      const time = `${hhmm(p.start)}–${hhmm(p.end)}`;
      rows.push({ plan: label, series: "power", start: p.start, end: p.end, time, kw: kw(p.power_w) });
      rows.push({ plan: label, series: "cap", start: p.start, end: p.end, time, kw: kw(p.power_cap_w) });
    }
  }
  const periods = after.schedule.periods;
  return {
    ...TIME_BASE, height: 260, title: "Site power and cap, before and after the event (its window shaded)",
    layer: [
      windowLayer(windows),
      {
        name: "compare", data: { values: rows },
        mark: { type: "line", interpolate: "step-after", tooltip: true },
        encoding: {
          x: periodX(), y: { field: "kw", type: "quantitative", title: "kW" },
          color: { field: "plan", type: "nominal", sort: ["before", "after"] },
          strokeDash: { field: "series", type: "nominal" },
          tooltip: [{ field: "time", title: "time (UTC)" }, { field: "plan" },
                    { field: "series" }, { field: "kw", format: ".2f" }],
        },
      },
      nowLayer(nowRows(periods[0].start, periods.at(-1).end), true),
    ],
  };
}

// an event's preview: the plan's draw and cap over its horizon, the window typed shaded
// and the cap typed over it
export function previewSpec(plan, window, capKw) {
  const rows = [];
  for (const p of plan.schedule.periods) {
    const time = `${hhmm(p.start)}–${hhmm(p.end)}`;
    rows.push({ series: "planned draw", start: p.start, end: p.end, time, kw: kw(p.power_w) });
    rows.push({ series: "cap now", start: p.start, end: p.end, time, kw: kw(p.power_cap_w) });
  }
  const typed = window && capKw !== null ? [{ ...window, kw: capKw, series: "cap typed" }] : [];
  const periods = plan.schedule.periods;
  return {
    ...TIME_BASE, height: 200, title: "Preview: the plan's draw in the window, against the cap typed",
    layer: [
      windowLayer(window ? [{ ...window, label: "window" }] : []),
      { name: "preview", data: { values: rows }, mark: { type: "line", interpolate: "step-after", tooltip: true },
        encoding: { x: periodX(), y: { field: "kw", type: "quantitative", title: "kW" },
                    color: { field: "series", type: "nominal", title: null,
                             scale: { domain: ["planned draw", "cap now", "cap typed"], range: ["#0b5cad", "#b42318", "#f0a500"] } },
                    tooltip: [{ field: "time", title: "time (UTC)" }, { field: "series" }, { field: "kw", format: ".2f" }] } },
      { name: "typed", data: { values: typed }, mark: { type: "rule", strokeWidth: 3 },
        encoding: { x: utcX(), x2: { field: "end" }, y: { field: "kw", type: "quantitative" },
                    color: { field: "series", type: "nominal" } } },
      nowLayer(nowRows(periods[0].start, periods.at(-1).end)),
    ],
  };
}

// the plan's draw in the curve's period: a rule on the cap axis, labelled
const drawLayer = (drawW) => ({
  layer: [
    { name: "plan_draw", data: { values: drawW === null ? [] : [{ kw: kw(drawW), label: `plan's draw ${fmt(kw(drawW), 1)} kW` }] },
      mark: { type: "rule", color: "#1b1f24", strokeWidth: 2, strokeDash: [6, 3] },
      encoding: { x: { field: "kw", type: "quantitative" } } },
    { data: { values: drawW === null ? [] : [{ kw: kw(drawW), label: `plan's draw ${fmt(kw(drawW), 1)} kW` }] },
      mark: { type: "text", align: "right", baseline: "top", dx: -4, y: 2, fontSize: 11, fontWeight: "bold" },
      encoding: { x: { field: "kw", type: "quantitative" }, text: { field: "label" } } },
  ],
});
const CAP_X = { field: "cap kW", type: "quantitative", title: "site power cap (kW)", scale: { zero: false } };
// a point's configurations as `pdwatt flex` labels them: "7P4D 10P1D 11P3D"
export const configLabel = (q) => Object.values(q.configurations).map((c) => `${c.n_p}P${c.n_d}D`).join(" ");

// A period's flexibility: the value of the demand served and the period's cost
// (energy and carbon of the draw plus the value left unserved) per hour, against the
// cap; the plan's draw marked.
export function flexSpec(curve, drawW = null) {
  const rows = [];
  for (const q of curve.points) {
    const at = { "cap kW": kw(q.cap_w), "site power kW": kw(q.site_power_w), "served req/s": q.total_served_rps,
                 configurations: configLabel(q) };
    rows.push({ ...at, series: "value of demand served", usd: q.served_value_usd_per_h });
    rows.push({ ...at, series: "cost (energy + unserved)", usd: q.energy_cost_usd_per_h + q.unserved_value_usd_per_h });
  }
  return {
    ...BASE, height: 240, title: "Value served and cost against the cap (USD/h)",
    layer: [
      { name: "curve", data: { values: rows }, mark: { type: "line", point: true, tooltip: true },
        encoding: { x: CAP_X, y: { field: "usd", type: "quantitative", title: "USD/h" },
                    color: { field: "series", type: "nominal", title: null,
                             scale: { domain: ["value of demand served", "cost (energy + unserved)"], range: ["#0b5cad", "#b42318"] } },
                    tooltip: [{ field: "cap kW", format: ".2f" }, { field: "site power kW", format: ".2f" },
                              { field: "series" }, { field: "usd", title: "USD/h", format: ".2f" },
                              { field: "served req/s", format: ".2f" }, { field: "configurations" }] } },
      drawLayer(drawW),
    ],
  };
}

// The served demand per deployment against the cap (stacked), each point labelled with
// its configurations; the total served as a line; the plan's draw marked.
export function flexServedSpec(curve, names, drawW = null) {
  const rows = [], totals = [];
  for (const q of curve.points) {
    let y = 0;
    for (const n of names) {
      rows.push({ "cap kW": kw(q.cap_w), deployment: n, rps: q.served_rps[n], y0: y, y1: y + q.served_rps[n],
                  config: `${q.configurations[n].n_p}P${q.configurations[n].n_d}D` });
      y += q.served_rps[n];
    }
    totals.push({ "cap kW": kw(q.cap_w), "served req/s": q.total_served_rps, configurations: configLabel(q) });
  }
  return {
    ...BASE, height: 260, title: "Served demand per deployment, and the configurations (nP·P nD·D) at each cap",
    layer: [
      { name: "served_by", data: { values: rows }, mark: { type: "area", interpolate: "linear", opacity: 0.6 },
        encoding: { x: CAP_X, y: { field: "y0", type: "quantitative", title: "served (req/s, stacked)",
                                   // room above for the labels, as the CLI's chart leaves
                                   scale: { domainMax: 1.45 * Math.max(1e-9, ...totals.map((t) => t["served req/s"])) } },
                    y2: { field: "y1" },
                    color: deploymentColour(names) } },
      { name: "served", data: { values: totals }, mark: { type: "line", point: true, color: "#1b1f24", tooltip: true },
        encoding: { x: CAP_X, y: { field: "served req/s", type: "quantitative" },
                    tooltip: [{ field: "cap kW", format: ".2f" }, { field: "served req/s", format: ".2f" }, { field: "configurations" }] } },
      { name: "configs", data: { values: totals }, mark: { type: "text", align: "left", baseline: "middle", angle: 300, dx: 4, dy: -4, fontSize: 9 },
        encoding: { x: CAP_X, y: { field: "served req/s", type: "quantitative" }, text: { field: "configurations" } } },
      drawLayer(drawW),
    ],
  };
}

// the solver's best objective and proven bound over time
export function traceSpec(trace) {
  const rows = [];
  for (const [t, best, bound] of trace) {
    if (best !== null) rows.push({ s: t, what: "best schedule", usd: best });
    if (bound !== null) rows.push({ s: t, what: "bound", usd: bound });
  }
  return {
    ...BASE, height: 200, title: "Best schedule and bound over time",
    name: "trace", data: { values: rows },
    mark: { type: "line", interpolate: "step-after", tooltip: true },
    encoding: { x: { field: "s", type: "quantitative", title: "seconds" },
                y: { field: "usd", type: "quantitative", title: "objective (USD)", scale: { zero: false } },
                color: { field: "what", type: "nominal" } },
  };
}

// The plot of a drawn chart on the page: its left edge and width (CSS px, the window's
// coordinates), and its x scale (time -> px from the plot's left edge).
export function plotOf(el) {
  const d = drawn.get(el);
  const canvas = el.querySelector("canvas");
  if (!d || !canvas) return null;
  const r = canvas.getBoundingClientRect();
  const [ox, oy] = d.view.origin();
  return { left: r.left + ox, top: r.top + oy, width: d.view.width(), height: d.view.height(), x: d.view.scale("x") };
}

// A crosshair shared by the charts over time of a page (each inside its wrapper, a
// positioned element): the time under the pointer on any of them is marked on all,
// the first labelled with the period it falls in.
export function crosshair(els, periods) {
  const lines = els.map((el, i) => {
    const line = document.createElement("div");
    line.className = "crosshair";
    line.hidden = true;
    if (i === 0) line.append(document.createElement("span"));
    el.parentElement.append(line);
    return line;
  });
  const hide = () => { for (const line of lines) line.hidden = true; };
  const move = (ev) => {
    const here = plotOf(ev.currentTarget);
    if (!here) return;
    const px = ev.clientX - here.left;
    if (px < 0 || px > here.width) { hide(); return; }
    const t = here.x.invert(px);
    const p = periods.find((q) => Date.parse(q.start) <= t && t < Date.parse(q.end));
    els.forEach((el, i) => {
      const plot = plotOf(el);
      const line = lines[i];
      if (!plot) { line.hidden = true; return; }
      const box = el.parentElement.getBoundingClientRect();
      const x = plot.left - box.left + plot.x(t);
      line.style.left = `${x}px`;
      line.classList.toggle("flip", x > box.width / 2);  // its label on the side with room
      line.style.top = `${plot.top - box.top}px`;
      line.style.height = `${plot.height}px`;
      line.dataset.time = new Date(t).toISOString();
      if (i === 0) line.firstChild.textContent = p ? `${hhmm(p.start)}–${hhmm(p.end)} UTC` : "";
      line.hidden = false;
    });
  };
  for (const el of els) {
    el.addEventListener("pointermove", move);
    el.addEventListener("pointerleave", hide);
  }
}
