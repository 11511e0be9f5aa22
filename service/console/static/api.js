// The console's access to the API: every request goes to this server (the path under
// which /ui/ is served, so a root_path behind a proxy is kept), with the API key, when
// the server wants one, in X-API-Key as every client sends it.

export const ROOT = new URL("..", document.baseURI).pathname;
const KEY = "pdwatt-api-key";

export class ApiError extends Error {
  constructor(status, problem) {
    super(describe(status, problem));
    this.status = status;
    this.problem = problem;
  }
}

// an RFC 9457 problem as text: its detail, then every field at fault and why, each
// said once (a field's reason the detail already gives is not repeated)
function describe(status, p) {
  if (!p || typeof p !== "object") return `HTTP ${status}`;
  const detail = p.detail || "";
  const lines = [`${p.title || "Error"} (${status}): ${detail}`];
  for (const e of p.errors || []) {
    const line = `${e.field}: ${e.reason}`;
    if (!detail.includes(line) && !(detail.includes(e.reason) && detail.includes(e.field))) lines.push(`  ${line}`);
  }
  return lines.join("\n");
}

// A problem's errors told in a form's terms: each field at fault named by the label of
// the form field it came from (fields: [[API field or prefix, label], ...], the first
// that matches), each said once; a problem naming no field of the form keeps its own text.
export function formMessage(err, fields) {
  const p = err instanceof ApiError ? err.problem : null;
  if (!p || typeof p !== "object" || !(p.errors || []).length) return err.message ?? String(err);
  const label = (f) => fields.find(([api]) => f === api || f.startsWith(`${api}.`) || f.startsWith(`${api}[`))?.[1];
  const lines = [];
  for (const e of p.errors) {
    const name = label(e.field);
    if (name === undefined) return err.message;
    const line = `${name}: ${e.reason}`;
    if (!lines.includes(line)) lines.push(line);
  }
  return lines.join("\n");
}

export const key = {
  get: () => sessionStorage.getItem(KEY),
  set: (v) => sessionStorage.setItem(KEY, v),
  clear: () => sessionStorage.removeItem(KEY),
};

let onUnauthorized = () => {};
export function whenUnauthorized(fn) { onUnauthorized = fn; }

export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json" };
  const k = key.get();
  if (k) headers["X-API-Key"] = k;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(ROOT + path.replace(/^\//, ""), {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch { doc = text; }
  if (r.status === 401) {
    key.clear();
    onUnauthorized("the server refused the key");
  }
  if (!r.ok) throw new ApiError(r.status, doc);
  return { status: r.status, doc };
}

// the schedule request a stored site holds (what /v1/flexibility and
// /v1/demand-response take): the site document without its identity and clock
const SITE_ONLY = ["id", "name", "version", "created", "updated", "plan_start",
                   "replan_each_period"];
export function requestOf(siteDoc) {
  const out = { ...siteDoc };
  for (const k of SITE_ONLY) delete out[k];
  return out;
}
