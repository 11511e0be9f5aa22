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
const drawn = new WeakMap();  // element -> { view, width, observer }
export async function draw(el, name, spec) {
  await loadVega();
  const width = el.clientWidth;
  const { view } = await window.vegaEmbed(el, { ...spec, width }, { actions: false, renderer: "canvas" });
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
    return { legend: { orient: narrow() ? "bottom" : "right", columns: narrow() ? 2 : undefined },
             title: { anchor: "start", limit: narrow() ? 340 : 0 } };
  },
};

function periodX(title = "time (UTC)") {
  return { field: "start", type: "temporal", title, axis: { format: "%H:%M", labelOverlap: true } };
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
    const at = { start: p.start, end: p.end, period: p.index };
    const h = { period: p.index, start: p.start, end: p.end,
                time: `${p.start.slice(11, 16)}–${p.end.slice(11, 16)} UTC`,
                "site power kW": fmt(kw(p.power_w)), "cap kW": fmt(kw(p.power_cap_w)),
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
        if (phase) split[`${name} ${phase} kW`] = fmt(w);
      }
      phases.push({ ...at, deployment: name, phase: "prefill", n: d.n_p });
      phases.push({ ...at, deployment: name, phase: "decode", n: d.n_d });
      const u = Math.max(0, d.demand_rps - d.served_rps);
      const value = u * seconds * penalty[name];
      // periods that serve all their demand draw no bar (most of them: fewer marks to draw)
      if (u > 0) unserved.push({ ...at, deployment: name, rps: u, usd: value, y0: lostRps, y1: lostRps + u });
      lost += value; lostRps += u;
      h[`${name} nP/nD`] = `${d.n_p}/${d.n_d}`;
      h[`${name} kW`] = fmt(kw(d.power_w * pue));
      Object.assign(h, split);
      h[`${name} served/demand rps`] = `${fmt(d.served_rps)}/${fmt(d.demand_rps)}`;
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

// windows to shade: the site's events (periods they touch) and every run of periods
// whose cap is below the horizon's highest
export function bands(plan, summary) {
  const periods = plan.schedule.periods;
  const out = [];
  for (const e of summary.events || []) {
    if (e.first_period === null) continue;
    out.push({ start: e.start, end: e.end, what: `event ${e.eventName || e.programID} (${e.types.join(", ")})` });
  }
  const top = Math.max(...periods.map((p) => p.power_cap_w));
  let run = null;
  for (const p of periods) {
    if (p.power_cap_w < top) {
      if (run && run.last === p.index - 1) { run.end = p.end; run.last = p.index; }
      else { run = { start: p.start, end: p.end, last: p.index, what: "cap reduced" }; out.push(run); }
    }
  }
  return out.map(({ start, end, what }) => ({ start, end, what }));
}

// a field name as Vega-Lite reads it (dots and brackets would be paths)
const field = (k) => k.replace(/[.[\]\\]/g, "\\$&");

const hoverLayer = (rows) => ({
  name: "periods", data: { values: rows },
  params: [{ name: "hover", select: { type: "point", on: "pointerover", clear: "pointerout" } }],
  mark: { type: "rect" },
  encoding: {
    x: { field: "start", type: "temporal" }, x2: { field: "end" },
    tooltip: Object.keys(rows[0] || {}).filter((k) => k !== "start" && k !== "end")
      .map((k) => ({ field: field(k), title: k })),
    color: { value: "#0b5cad" },
    opacity: { condition: { param: "hover", empty: false, value: 0.12 }, value: 0 },
  },
});

const bandLayer = (rows) => ({
  data: { values: rows },
  mark: { type: "rect", color: "#f0a500", opacity: 0.18, tooltip: true },
  encoding: { x: { field: "start", type: "temporal" }, x2: { field: "end" },
              tooltip: [{ field: "what", title: "window" }] },
});

export function powerSpec(rows, bandRows, signalName) {
  return {
    ...BASE, height: 300, title: "Site power against the cap",
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
              color: { field: "layer", type: "nominal", title: "power of (after PUE)",
                       scale: { domain: rows.layers, range: rows.colours } },
            },
          },
          {
            name: "cap", data: { values: rows.cap },
            mark: { type: "rule", color: "#b42318", strokeWidth: 2 },
            encoding: { x: { field: "start", type: "temporal" }, x2: { field: "end" },
                        y: { field: "cap_kw", type: "quantitative" } },
          },
          hoverLayer(rows.hover),
        ],
      },
      {
        name: "signal", data: { values: rows.signal },
        mark: { type: "line", interpolate: "step-after", color: "#555", strokeDash: [4, 3] },
        encoding: { x: { field: "start", type: "temporal" },
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

export function phasesSpec(rows) {
  return {
    ...BASE, height: 220, title: "Instances per deployment (prefill solid, decode dashed)",
    layer: [
      {
        name: "instances", data: { values: rows.phases },
        mark: { type: "line", interpolate: "step-after", point: false, tooltip: true },
        encoding: {
          x: periodX(), y: { field: "n", type: "quantitative", title: "instances" },
          color: deploymentColour(rows.names),
          strokeDash: { field: "phase", type: "nominal", sort: ["prefill", "decode"] },
          tooltip: [{ field: "start", type: "temporal", format: "%H:%M" }, { field: "deployment" },
                    { field: "phase" }, { field: "n" }],
        },
      },
      hoverLayer(rows.hover),
    ],
  };
}

export function unservedSpec(rows) {
  const binding = rows.cap.filter((c) => c.at_cap).map((c) => ({ start: c.start, end: c.end, what: "site at its cap" }));
  return {
    ...BASE, height: 200, title: "Unserved demand (bars) and periods at the cap (shaded red)",
    layer: [
      { data: { values: binding }, mark: { type: "rect", color: "#b42318", opacity: 0.15, tooltip: true },
        encoding: { x: { field: "start", type: "temporal" }, x2: { field: "end" },
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
      hoverLayer(rows.hover),
    ],
  };
}

// before and after an event: site power and cap of both plans
export function compareSpec(before, after) {
  const rows = [];
  for (const [label, plan] of [["before", before], ["after", after]]) {
    if (!plan) continue;
    for (const p of plan.schedule.periods) {
      rows.push({ plan: label, series: "power", start: p.start, end: p.end, kw: kw(p.power_w) });
      rows.push({ plan: label, series: "cap", start: p.start, end: p.end, kw: kw(p.power_cap_w) });
    }
  }
  return {
    ...BASE, height: 260, title: "Site power and cap, before and after the event",
    data: { values: rows },
    mark: { type: "line", interpolate: "step-after", tooltip: true },
    encoding: {
      x: periodX(), y: { field: "kw", type: "quantitative", title: "kW" },
      color: { field: "plan", type: "nominal", sort: ["before", "after"] },
      strokeDash: { field: "series", type: "nominal" },
      tooltip: [{ field: "start", type: "temporal", format: "%H:%M" }, { field: "plan" },
                { field: "series" }, { field: "kw", format: ".2f" }],
    },
  };
}

export function flexSpec(period) {
  const rows = period.points.map((q) => ({
    "site power kW": kw(q.site_power_w), "cost USD/h": q.energy_cost_usd_per_h + q.unserved_value_usd_per_h,
    "served req/s": q.total_served_rps, "cap kW": kw(q.cap_w),
    configurations: Object.entries(q.configurations).map(([n, c]) => `${n} ${c.n_p}/${c.n_d}`).join(", "),
  }));
  const x = { field: "site power kW", type: "quantitative", scale: { zero: false } };
  const tip = [{ field: "cap kW", format: ".2f" }, { field: "site power kW", format: ".2f" },
               { field: "cost USD/h", format: ".2f" }, { field: "served req/s", format: ".2f" },
               { field: "configurations" }];
  return {
    ...BASE, height: 260, title: `Flexibility of period ${period.period}`,
    data: { values: rows },
    layer: [
      { name: "cost", mark: { type: "line", point: true, color: "#b42318", tooltip: true },
        encoding: { x, y: { field: "cost USD/h", type: "quantitative", title: "cost: energy + unserved value (USD/h, red)" }, tooltip: tip } },
      { name: "served", mark: { type: "line", point: true, color: "#0b5cad", tooltip: true },
        encoding: { x, y: { field: "served req/s", type: "quantitative", title: "served (req/s, blue)", axis: { orient: "right" } }, tooltip: tip } },
    ],
    resolve: { scale: { y: "independent" } },
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
