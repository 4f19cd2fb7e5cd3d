// The status page: polls the admin JSON endpoints of the replica that
// served it, renders the tables and keeps a few minutes of history for
// the charts, starting from the samples the replica kept of its last
// minutes (/cluster/history), so that a page opened during an incident
// shows what led to it. Everything stays in this tab; nothing is written
// anywhere.
"use strict";

const params = new URLSearchParams(location.search);
const every = Math.max(250, Number(params.get("every")) || 2000); // ms between polls
const keep = 5 * 60 * 1000; // ms of history the charts show
const colours = ["#2f6fdd", "#e0662f", "#2a9d5b", "#a347c2", "#c9a227", "#17a3b8", "#d64577", "#6b7385"];
const tokenKey = "kvrouter-admin-token";

const history = []; // {t (ms), load: {id: n}, hit: share or null, totals}

function headers() {
  const token = sessionStorage.getItem(tokenKey);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function getJSON(path) {
  const resp = await fetch(path, { headers: headers(), cache: "no-store", credentials: "omit" });
  if (resp.status === 401) {
    document.getElementById("login").hidden = false;
    throw new Error("this replica wants its admin token");
  }
  const body = await resp.json();
  if (!resp.ok) {
    throw new Error(path + ": " + resp.status + " " + (body.error ? body.error.message : ""));
  }
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", String(c)));
  return tr;
}

function seconds(s) {
  if (s < 0) return "never";
  if (s < 1) return Math.round(s * 1000) + " ms";
  return s.toFixed(1) + " s";
}

function renderReplicas(status) {
  const peers = {};
  for (const p of status.peers) peers[p.name] = p;
  const body = document.querySelector("#replicas tbody");
  body.replaceChildren();
  for (const m of status.members) {
    const role = m.name === status.leader ? "leader" : m.suffrage === "voter" ? "follower" : m.suffrage === "nonvoter" ? "non-voter" : "joining";
    const p = peers[m.name];
    const self = m.name === status.node;
    const age = self ? el("td", "this replica", "muted") : el("td", p ? seconds(p.last_report_age_seconds) : "—", p && p.last_report_age_seconds >= 0 && p.last_report_age_seconds < 5 ? "ok" : "warn");
    const tr = row([el("td", m.name), el("td", m.state, m.state === "alive" ? "ok" : "bad"), el("td", role, role === "leader" ? "ok" : ""),
      age, el("td", !self && p ? seconds(p.last_lag_seconds) : ""), el("td", m.api_address || m.address, "muted")]);
    tr.dataset.replica = m.name;
    body.appendChild(tr);
  }
  const leader = status.leader ? "leader " + status.leader + ", term " + status.term : "no leader";
  document.getElementById("summary").textContent =
    status.node + " · " + status.members.length + " replicas · " + leader + " · " + status.workers + " workers";
}

// totals sums an answer's cumulative counters, overall and per worker.
function totals(stats) {
  const out = { t: stats.at, hits: 0, decided: 0, by: {} };
  for (const w of stats.workers) {
    out.hits += w.hits; out.decided += w.hits + w.misses;
    out.by[w.id] = { hits: w.hits, decided: w.hits + w.misses, tokens: w.tokens };
  }
  return out;
}

// rates compares now's totals with the oldest sample of the last `window`
// ms: per-worker hit rate and tokens/s, and the replica's hit rate; null
// where nothing was decided.
function rates(now) {
  const window = 10000;
  const out = { hitBy: {}, tokensBy: {}, hit: null };
  const base = history.find((h) => h.totals.t * 1000 >= now.t * 1000 - window);
  if (!base || base.totals.t >= now.t) return out;
  const then = base.totals, dt = now.t - then.t;
  for (const [id, w] of Object.entries(now.by)) {
    const o = then.by[id];
    if (!o) continue;
    const d = w.decided - o.decided;
    out.hitBy[id] = d > 0 ? (w.hits - o.hits) / d : null;
    out.tokensBy[id] = (w.tokens - o.tokens) / dt;
  }
  const d = now.decided - then.decided;
  out.hit = d > 0 ? (now.hits - then.hits) / d : null;
  return out;
}

function health(w) {
  if (!w.probed) return el("td", "not probed", "warn");
  return w.healthy ? el("td", "healthy", "ok") : el("td", "unhealthy", "bad");
}

function verdicts(w) {
  const v = [];
  if (w.wedged) v.push("wedged");
  if (w.degraded) v.push("degraded");
  if (w.remote_verdicts > 0) v.push(w.remote_verdicts + " remote");
  return el("td", v.length ? v.join(", ") : "none", v.length ? "bad" : "muted");
}

function renderWorkers(stats, r) {
  const body = document.querySelector("#workers tbody");
  body.replaceChildren();
  stats.workers.forEach((w, i) => {
    const peers = Object.entries(w.peer_loads || {}).map(([n, l]) => n + ": " + l);
    const cumulative = w.hits + w.misses > 0 ? w.hits / (w.hits + w.misses) : null;
    const hit = r.hitBy[w.id] != null ? r.hitBy[w.id] : cumulative;
    const tps = r.tokensBy[w.id];
    const id = el("td", String(w.id));
    const sw = el("span", undefined, "swatch");
    sw.style.backgroundColor = colours[i % colours.length];
    id.prepend(sw);
    const tr = row([id, el("td", w.url), el("td", w.role), el("td", w.state, w.state === "active" ? "" : "warn"), health(w),
      el("td", w.circuit, w.circuit === "closed" ? "ok" : "bad"), verdicts(w),
      el("td", String(w.load), "num"), el("td", String(w.local_load), "num"),
      el("td", peers.length ? "here: " + w.local_load + ", " + peers.join(", ") : "here: " + w.local_load, "muted"),
      el("td", hit == null ? "—" : (100 * hit).toFixed(1) + "%", "num"), el("td", tps == null ? "—" : tps.toFixed(1), "num")]);
    tr.dataset.worker = String(w.id);
    body.appendChild(tr);
  });
}

// renderAdmission shows the door's queue: per class, then the busiest
// tenants (their names are the tenant header's or an API key's digest).
function renderAdmission(a) {
  const classes = document.querySelector("#classes tbody");
  const tenants = document.querySelector("#tenants tbody");
  classes.replaceChildren();
  tenants.replaceChildren();
  if (!a) return;
  const limit = a.limit < 0 ? "no engine bound known" : "engines' bound " + a.limit;
  document.getElementById("admission-summary").textContent =
    a.in_flight + " in flight · " + a.queued + " of " + a.queue_size + " queued · " + limit + " · " + a.peers + " peers reporting";
  for (const c of a.classes) {
    classes.appendChild(row([el("td", c.name), el("td", String(c.in_flight), "num"), el("td", String(c.queued), c.queued > 0 ? "num warn" : "num"),
      el("td", String(c.peer_queued), "num"), el("td", String(c.reserved), "num")]));
  }
  for (const t of a.tenants || []) {
    tenants.appendChild(row([el("td", t.class), el("td", t.tenant), el("td", String(t.in_flight), "num"), el("td", String(t.queued), "num"),
      el("td", String(t.tokens), "num"), el("td", String(t.peer_tokens), "num")]));
  }
}

function remember(stats, now, r) {
  const load = {};
  for (const w of stats.workers) load[w.id] = w.load;
  history.push({ t: stats.at * 1000, load, hit: r.hit, totals: now });
  while (history.length && history[0].t < stats.at * 1000 - keep) history.shift();
}

// chart draws series (name -> [[t, v]]) on canvas id over the last `keep`
// ms, y from 0 to max (or the data's top), with a legend.
function chart(id, series, fixedMax, format) {
  const canvas = document.getElementById(id);
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, left = 44, bottom = 20, top = 8, right = 8;
  ctx.clearRect(0, 0, W, H);
  const end = history.length ? history[history.length - 1].t : Date.now();
  const start = end - keep;
  let max = fixedMax || 1;
  if (!fixedMax) for (const pts of Object.values(series)) for (const [, v] of pts) max = Math.max(max, v);
  const x = (t) => left + ((t - start) / keep) * (W - left - right);
  const y = (v) => top + (1 - v / max) * (H - top - bottom);
  ctx.strokeStyle = "#dde1e8"; ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui, sans-serif"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    ctx.beginPath(); ctx.moveTo(left, y(v)); ctx.lineTo(W - right, y(v)); ctx.stroke();
    ctx.fillText(format(v), 2, y(v) + 4);
  }
  for (let m = 0; m <= 5; m++) ctx.fillText(m === 0 ? "now" : "-" + m + " min", x(end - m * 60000) - 14, H - 5);
  let points = 0;
  Object.entries(series).forEach(([name, pts], i) => {
    ctx.strokeStyle = colours[i % colours.length]; ctx.lineWidth = 2; ctx.beginPath();
    let drawing = false;
    for (const [t, v] of pts) {
      if (v == null) { drawing = false; continue; }
      drawing ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v));
      drawing = true; points++;
    }
    ctx.stroke();
  });
  canvas.dataset.points = String(points);
  const legend = document.getElementById(id.replace("chart", "legend"));
  legend.replaceChildren();
  Object.keys(series).forEach((name, i) => {
    const item = el("span", name);
    const sw = el("span", undefined, "swatch");
    sw.style.backgroundColor = colours[i % colours.length];
    item.prepend(sw);
    legend.appendChild(item);
  });
}

function renderCharts(stats) {
  const loads = {};
  for (const w of stats.workers) loads["worker " + w.id] = history.map((h) => [h.t, h.load[w.id] != null ? h.load[w.id] : null]);
  chart("load-chart", loads, 0, (v) => v.toFixed(v < 10 ? 1 : 0));
  chart("hit-chart", { "hit rate": history.map((h) => [h.t, h.hit]) }, 1, (v) => Math.round(v * 100) + "%");
}

// seed fills the history with the replica's own recent samples, once,
// before the first poll; they have the fields of a /cluster/workers answer
// that totals, rates and remember read. Without them (an older replica)
// the charts start from the first poll.
async function seed() {
  if (history.length) return;
  try {
    const past = await getJSON("/cluster/history");
    for (const sample of past.samples || []) {
      const now = totals(sample);
      remember(sample, now, rates(now));
    }
  } catch (e) {
    // the polls show the error, if it is not only this endpoint's
  }
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const [status, stats] = await Promise.all([getJSON("/cluster/status"), getJSON("/cluster/workers")]);
    const now = totals(stats);
    const r = rates(now);
    remember(stats, now, r);
    renderReplicas(status);
    renderAdmission(status.admission);
    renderWorkers(stats, r);
    renderCharts(stats);
    error.hidden = true;
    document.getElementById("updated").textContent = "updated " + new Date(stats.at * 1000).toLocaleTimeString();
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    error.textContent = String(e.message || e);
    error.hidden = false;
  }
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(tokenKey, document.getElementById("token").value);
  document.getElementById("login").hidden = true;
  seed().then(poll);
});

seed().then(() => {
  poll();
  setInterval(poll, every);
});
