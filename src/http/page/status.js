// status.js - the status page: fetches status.json once a second and draws
// it. Data only ever reaches the page through textContent and attributes set
// one by one (never innerHTML), so a client key is always text.
"use strict";

const $ = (id) => document.getElementById(id);
let token = "";
let lastOk = 0;
// The rules' five minutes, kept here: after the first answer the page asks
// only for the seconds it has not seen (?since=), and appends them.
const SPAN = 300;
let hist = {};
let since = 0;
let started = 0;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (digits !== undefined) return v.toFixed(digits);
  return Math.round(v).toLocaleString("en-US");
}

function bytes(v) {
  if (!v) return "–";
  const u = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return v.toFixed(i ? 1 : 0) + " " + u[i];
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return Math.round(s) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function when(unix) {
  return unix ? new Date(unix * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–";
}

// Client keys come as JSON strings whose characters are the key's bytes
// (U+0000..U+00FF): percent-encode those bytes for the /key and /reset URLs.
function pctBytes(s) {
  let out = "";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    out += /[A-Za-z0-9_.~-]/.test(s[i]) ? s[i] : "%" + (c < 16 ? "0" : "") + c.toString(16).toUpperCase();
  }
  return out;
}

function keyQuery(rule, key) {
  return "?rule=" + pctBytes(rule) + "&key=" + pctBytes(key);
}

function fill(card, rows) {
  const dl = $(card).querySelector("dl");
  dl.replaceChildren();
  for (const [name, value, cls] of rows) {
    dl.append(el("dt", {}, name));
    dl.append(el("dd", cls ? { class: cls } : {}, value));
  }
}

// Two series as polylines in a 300 x 36 box, the y scale the larger
// series' peak, so blocks read against decisions; the scale is written in
// the box (the peak per second at the top, 0 at the baseline), and a
// shadow rule's would-be blocks have their own colour.
function sparkline(dec, blk, shadow) {
  const NS = "http://www.w3.org/2000/svg", W = 300, H = 36, TOP = 10;
  const svg = document.createElementNS(NS, "svg");
  const max = Math.max(1, ...dec, ...blk);
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("data-max", String(max));
  const axis = document.createElementNS(NS, "line");
  axis.setAttribute("class", "axis");
  for (const [k, v] of [["x1", 0], ["x2", W], ["y1", H - 0.5], ["y2", H - 0.5]]) axis.setAttribute(k, v);
  svg.append(axis);
  for (const [series, cls] of [[dec, "dec"], [blk, shadow ? "wblk" : "blk"]]) {
    const off = W - series.length;
    const pts = series.map((v, i) => (off + i) + "," + (H - 1 - (v / max) * (H - 1 - TOP)).toFixed(1));
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  for (const [x, y, anchor, text] of [[1, 8, "start", "peak " + num(max) + "/s"], [W - 1, 8, "end", "now"],
                                      [1, H - 2, "start", "0"]]) {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", x);
    t.setAttribute("y", y);
    t.setAttribute("text-anchor", anchor);
    t.setAttribute("class", anchor === "start" && y < TOP ? "scale-max" : "scale");
    t.textContent = text;
    svg.append(t);
  }
  return svg;
}

function slotsText(r) {
  return r.algorithm === "concurrency" ? num(r.slots_held) + " / " + num(r.slots_expired) : "–";
}

function drawRules(rules) {
  const body = $("rules").querySelector("tbody");
  body.replaceChildren();
  for (const r of rules) {
    const tr = el("tr", r.shadow ? { class: "shadow", "data-rule": r.name } : { "data-rule": r.name });
    const pct = r.blocked_pct;
    tr.append(el("td", {}, r.name), el("td", {}, r.limit), el("td", {}, "fail " + r.fail),
      el("td", { class: "n rate" }, num(r.rate, 1)), el("td", { class: "n allowed" }, num(r.allowed)),
      el("td", { class: "n blocked" }, num(r.blocked)), el("td", { class: "n would-block" }, num(r.would_block)),
      el("td", { class: "n degraded" + (r.degraded > 0 ? " warn" : "") }, num(r.degraded)),
      el("td", { class: "n slots" + (r.slots_expired > 0 ? " warn" : "") }, slotsText(r)),
      el("td", { class: "n refunded" }, num(r.refunded)),
      el("td", { class: "n pct" + (pct >= 10 ? (r.shadow ? " shadow-hot" : " hot") : "") }, num(pct, 1)));
    const td = el("td");
    const h = hist[r.name] || { decisions: [], blocks: [] };
    td.append(sparkline(h.decisions, h.blocks, r.shadow));
    tr.append(td);
    body.append(tr);
  }
}

async function reset(rule, key) {
  if (!confirm("Reset client " + JSON.stringify(key) + " of rule " + rule + "?\n" +
               "Its bucket is cleared in Redis, and every agent is told to drop its " +
               "leases, negative cache and penalty box of it.")) return;
  const out = $("reset-result");
  try {
    const r = await fetch("reset" + keyQuery(rule, key),
                          { method: "POST", headers: { "X-Spoa-Token": token }, credentials: "same-origin" });
    if (!r.ok) {
      out.textContent = "Reset refused: " + r.status + " " + (await r.text());
      return;
    }
    // what actually happened: how many agents of the fleet confirmed
    const j = await r.json();
    const f = j.fleet;
    out.textContent = "Reset: " + rule + " / " + key +
      (f ? " \u2014 confirmed by " + f.confirmed + " of " + f.agents + " agent" +
           (f.agents === 1 ? "" : "s") +
           (f.confirmed < f.agents ? " (the others apply it when they next read Redis)" : "")
         : "");
  } catch (e) {
    out.textContent = "Reset failed: " + e;
  }
}

// What a blocked client waits for, truly. A concurrency rule's client waits
// for a slot, not for time (its retry_after is capped at 1 s as a release
// may come any moment): a slot frees at a release, at the latest max_hold
// after it was taken. A rate rule's client: its retry time, or that it has
// passed (the next request is decided afresh), never "now".
function retryText(t, byName) {
  const r = byName.get(t.rule);
  if (r && r.algorithm === "concurrency")
    return "when a slot frees (at most " + duration(r.max_hold_s) + ")";
  if (t.retry_after_s >= 0.5) return duration(t.retry_after_s);
  if (t.retry_after_s > 0) return "under 1 s";
  return "retry time passed";
}

function drawTop(top, canReset, rules) {
  const body = $("top").querySelector("tbody");
  const byName = new Map(rules.map((r) => [r.name, r]));
  body.replaceChildren();
  $("top-empty").hidden = top.length > 0;
  for (const t of top) {
    const tr = el("tr");
    const keyCell = el("td", { class: "key" });
    keyCell.append(el("a", { href: "key" + keyQuery(t.rule, t.key) }, t.key));
    tr.append(el("td", {}, t.rule), keyCell, el("td", { class: "n" }, num(t.blocked)),
      el("td", { class: "n" }, retryText(t, byName)));
    const act = el("td");
    if (canReset) {
      const b = el("button", { type: "button" }, "reset");
      b.addEventListener("click", () => reset(t.rule, t.key));
      act.append(b);
    }
    tr.append(act);
    body.append(tr);
  }
}

// One banner per active warning (the agent limits less than configured, or
// not at all): its kind, what to change, since when. None: nothing shown.
function drawWarnings(list, now) {
  const box = $("warnings");
  box.replaceChildren();
  for (const w of list || []) {
    const d = el("div", { class: "banner warning", "data-kind": w.kind });
    d.append(el("span", { class: "kind" }, w.kind), el("span", { class: "message" }, w.message),
      el("span", { class: "since" }, "since " + when(w.since) + " (" + duration(now - w.since) + ")"));
    box.append(d);
  }
}

// Concurrency slots freed by max_hold without a release (stuck: their
// release message never came, though others may have): a banner for 5
// minutes after the count last grew.
let expiredSeen = -1, expiredAt = 0;
function slotsBanner(s) {
  const d = s.decisions, now = s.agent.now_unix, b = $("banner-slots");
  if (d.slots_expired !== expiredSeen) {
    if (d.slots_expired > Math.max(expiredSeen, 0)) expiredAt = now;
    expiredSeen = d.slots_expired;
  }
  // the registry's slots_never_released (no release ever came) says it already
  const named = (s.warnings || []).some((w) => w.kind === "slots_never_released");
  b.hidden = named || !(d.slots_expired > 0 && now - expiredAt < 300);
  if (!b.hidden) b.textContent = num(d.slots_expired) + " concurrency slot" + (d.slots_expired === 1 ? "" : "s") +
    " expired without a release (freed by max_hold, last " + duration(now - expiredAt) + " ago); " +
    num(d.slots_held) + " held now. A release message that never comes: check the release rule in HAProxy.";
}

function drawBanners(s) {
  drawWarnings(s.warnings, s.agent.now_unix);
  const red = $("banner-redis");
  if (s.redis.configured && !s.redis.up) {
    const modes = s.rules.map((r) => r.name + ": fail " + r.fail).join(", ");
    red.textContent = "Redis is down since " + when(s.redis.down_since_unix) +
      " (" + duration(s.agent.now_unix - s.redis.down_since_unix) + "). Rules: " + modes + "." +
      (s.redis.last_error ? " Why: " + s.redis.last_error + " (" + s.redis.last_error_detail +
        ", " + s.redis.last_error_addr + ", " + when(s.redis.last_error_at) + ")." : "");
    red.hidden = false;
  } else {
    red.hidden = true;
  }
  const rej = s.rule_set.rejected_version;
  const rb = $("banner-rules");
  rb.hidden = !rej;
  if (rej) rb.textContent = "Rule set version " + rej + " was rejected and is not in force: " +
    (s.rule_set.error || "") + ". " + (s.rule_set.version ? "Version " + s.rule_set.version +
    " stays" : "The file's rules stay") + " in force; push a fixed version.";
  slotsBanner(s);
  const yellow = $("banner-reload");
  yellow.hidden = s.reload.ok;
  if (!s.reload.ok) yellow.textContent = "The last reload failed (" + when(s.reload.failed_unix) +
    "); the rules loaded " + when(s.reload.last_unix) + " stay in force: " + (s.reload.error || "");
}

function draw(s) {
  const a = s.agent, r = s.redis, l = s.leases, p = s.peers;
  $("version").textContent = a.version;
  $("agent-line").textContent = "pid " + a.pid + " · up " + duration(a.uptime_s) + " · " +
    a.workers + (a.workers === 1 ? " worker" : " workers") + " · " + a.config_file;
  drawBanners(s);
  fill("card-redis", r.configured ? [
    ["mode", r.mode], ["state", r.up ? "up" : "down", r.up ? "up" : "down"],
    ["latency p50 / p99", r.latency_p50_ms === null ? "–" : num(r.latency_p50_ms, 2) + " / " + num(r.latency_p99_ms, 2) + " ms"],
    ["commands", num(r.commands)], ["errors", num(r.errors)],
    ["failovers", num(r.failovers)], ["reconnects", num(r.reconnects)], ["agents in the fleet", num(r.fleet_agents)],
  ] : [["mode", "standalone (no [redis]): buckets in memory"]]);
  $("card-leases").hidden = !s.boxes.leases;
  fill("card-leases", [
    ["Redis calls per decision", l.redis_calls_per_decision === null ? "none yet" :
      num(l.redis_calls_per_decision, 4)], ["calls saved", num(l.calls_saved)],
    ["tokens claimed", num(l.tokens_claimed)], ["tokens returned", num(l.tokens_returned)],
    ["keys held", num(l.keys)], ["local decisions", num(l.local_decisions)],
  ]);
  drawGlobal(s.global);
  fill("card-peers", [
    ["connections", num(p.connections)], ["frames in flight", num(p.in_flight)],
    ["HELLO", num(p.hello)], ["DISCONNECT", num(p.disconnect)], ["NOTIFY", num(p.notify)],
    ["last DISCONNECT", p.last_disconnect ? p.last_disconnect.status + " " + p.last_disconnect.message +
      " (" + p.last_disconnect.peer + ", " + when(p.last_disconnect.unix) + ")" : "–"],
  ]);
  const d = s.decisions, blocked = s.rules.reduce((n, x) => n + x.blocked, 0),
    would = s.rules.reduce((n, x) => n + x.would_block, 0);
  fill("card-decisions", [
    ["decisions", num(d.total)], ["blocked", num(blocked)],
    ["shadow: would block", num(would), would ? "shadow-hot" : ""],
    ["degraded (without Redis)", num(d.degraded), d.degraded ? "warn" : ""],
    ["concurrency slots held", num(d.slots_held)],
    ["slots expired (no release)", num(d.slots_expired), d.slots_expired ? "warn" : ""],
  ]);
  const fullPct = a.max_entries ? 100 * a.entries / a.max_entries : 0;
  const risk = a.evictions > 0 ? "evicting" : fullPct >= 80 ? "near max_entries" : "none";
  fill("card-agent", [
    ["uptime", duration(a.uptime_s)], ["workers", num(a.workers)],
    ["last reload", !s.reload.ok ? "failed" : s.rule_set.rejected_version ?
      "version " + s.rule_set.rejected_version + " rejected" : "ok, " + duration(a.now_unix - s.reload.last_unix) + " ago",
      !s.reload.ok || s.rule_set.rejected_version ? "hot" : ""],
    ["rule set", ruleSet(s.rule_set)],
    ["file descriptors", num(a.fds) + " / " + num(a.fd_limit)],
    ["memory (RSS)", bytes(a.rss_bytes) + (a.memory_limit_bytes ? " / " + bytes(a.memory_limit_bytes) : "")],
    ["entries", num(a.entries) + " / " + num(a.max_entries) + (fullPct >= 1 ? " (" + num(fullPct, 0) + " %)" : "")],
    ["evictions (max_entries)", num(a.evictions), a.evictions ? "hot" : ""],
    ["eviction risk", risk, risk === "none" ? "" : risk === "evicting" ? "hot" : "warn"],
  ]);
  drawRules(s.rules);
  drawTop(s.top, s.reset.allowed, s.rules);
  drawFleet(s);
}

// [global] (one quota across regions): hidden without it. Claims/s from
// this agent's counter between two answers: it grows only while it claims.
let gPrev = null;
function drawGlobal(g) {
  $("card-global").hidden = !g || !g.configured;
  if (!g || !g.configured) { gPrev = null; return; }
  const now = Date.now();
  const rate = gPrev && now > gPrev.t && g.claims >= gPrev.claims ?
    (g.claims - gPrev.claims) * 1000 / (now - gPrev.t) : null;
  gPrev = { claims: g.claims, t: now };
  fill("card-global", [
    ["global Redis", g.up ? "up" : "down", g.up ? "up" : "down"],
    ["this agent", g.claimer ? "claimer of its region" : "not the claimer"],
    ["region", g.region], ["regions seen", g.regions ? num(g.regions) : "none yet"],
    ["claims/s", g.claimer ? num(rate, 1) : "–"],
    ["global round trip", g.rtt_ms === null ? "–" : num(g.rtt_ms, 1) + " ms"],
    ["keys followed", num(g.keys)],
    ["failed calls", num(g.failed), g.failed ? "warn" : ""],
  ]);
}

// The fleet (every agent's row as its heartbeat wrote it: /status.json's
// fleet) and its totals; with rules from Redis also each agent's last
// apply error and the version against the current one (GET /fleet, which
// changes when the agents report: every 5 s).
let fleetAt = 0, applied = null;
// An agent's rules version, linked to its text (GET /rules/N).
function versionCell(a, off) {
  const td = el("td", { class: "n" + (off ? " hot" : "") });
  if (a.rules_version > 0) td.append(el("a", { href: "rules/" + a.rules_version }, String(a.rules_version)));
  else td.textContent = String(a.rules_version);
  return td;
}

function fleetCells(a) {
  return [el("td", { class: "n" }, num(a.decisions)), el("td", { class: "n" }, num(a.blocked)),
    el("td", { class: "n would-block" }, num(a.would_block)),
    el("td", { class: "n" + (a.degraded ? " warn" : "") }, num(a.degraded)),
    el("td", { class: "n" }, num(a.notifies)),
    el("td", { class: "n" + (a.redis_errors ? " warn" : "") }, num(a.redis_errors)),
    el("td", { class: "n" + (a.slots_expired ? " warn" : "") }, num(a.slots_held) + " / " + num(a.slots_expired))];
}

function drawFleet(s) {
  const f = s.fleet, redisRules = s.rule_set.source === "redis";
  $("fleet-section").hidden = !s.boxes.fleet || !f;
  if (!s.boxes.fleet || !f) return;
  if (redisRules && Date.now() - fleetAt >= 5000) {
    fleetAt = Date.now();
    fetch("fleet", { cache: "no-store", credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null)).then((j) => { applied = j; }).catch(() => {});
  }
  // the rule store's report (sent at once on an apply) is fresher than the
  // heartbeat's row for the version in force
  const reported = new Map();
  if (redisRules && applied)
    for (const x of applied.agents) reported.set(x.host + " " + x.pid + " " + x.listen, x);
  const rep = (a) => reported.get(a.host + " " + a.pid + " " + a.listen);
  for (const a of f.agents) if (rep(a)) a.rules_version = rep(a).version;
  const cur = s.rule_set.current, t = f.totals;
  const off = f.agents.filter((a) => redisRules && a.rules_version !== cur).length;
  $("fleet-line").textContent = (redisRules ? "current version " + cur + ", " + f.agents.length +
    " agents, " + off + " off it" : f.agents.length + (f.agents.length === 1 ? " agent" : " agents")) + " · " + t.redis_up + " with Redis up";
  $("fleet-age").textContent = f.age_s === null ? "never: no heartbeat answered yet (Redis down?)"
    : num(f.age_s, 1) + " s ago";
  const body = $("fleet").querySelector("tbody");
  body.replaceChildren();
  for (const a of f.agents) {
    const isOff = redisRules && a.rules_version !== cur;
    const tr = el("tr", isOff ? { class: "off" } : {});
    const err = (rep(a) || {}).error || "";
    tr.append(el("td", {}, a.host), el("td", { class: "n" }, String(a.pid)), el("td", {}, a.listen),
      versionCell(a, isOff), el("td", {}, a.version), el("td", { class: "n" }, duration(a.uptime_s)),
      el("td", { class: a.redis_up ? "up" : "down" }, a.redis_up ? "up" : "down"), ...fleetCells(a),
      el("td", { class: err ? "hot" : "" }, err),
      el("td", { class: "n" + (a.self ? " self" : "") }, num(a.last_seen_s, 1) + (a.self ? " (this agent)" : "")));
    body.append(tr);
  }
  const foot = $("fleet").querySelector("tfoot");
  foot.replaceChildren();
  const tr = el("tr", { class: "totals" });
  tr.append(el("td", { colspan: "7" }, "fleet total, " + t.agents + (t.agents === 1 ? " agent" : " agents")), ...fleetCells(t),
    el("td"), el("td"));
  foot.append(tr);
}

// Where the rules come from; from Redis, the version against the fleet's current one.
function ruleSet(r) {
  if (r.source !== "redis") return "this file's";
  let t = r.version ? "version " + r.version : "none from Redis yet (the file's)";
  if (r.cached) t += ", from the cache";
  if (!r.on_current) t += "; current: " + r.current;
  return t;
}

// Append what came to each rule's series (a shadow rule: its would-be blocks).
function keep(s) {
  if (s.agent.started_unix !== started) { // another agent (a restart): start over
    started = s.agent.started_unix;
    if (since) { hist = {}; since = 0; return false; }
  }
  const next = {};
  for (const r of s.rules) {
    const old = since ? hist[r.name] || { decisions: [], blocks: [] } : { decisions: [], blocks: [] };
    const blk = r.shadow ? r.history.would_blocks : r.history.blocks;
    next[r.name] = { decisions: old.decisions.concat(r.history.decisions).slice(-SPAN),
                     blocks: old.blocks.concat(blk).slice(-SPAN) };
    since = Math.max(since, r.history.last_unix);
  }
  hist = next;
  return true;
}

// The fleet's rows change at each heartbeat (5 s): asked for every 5 s,
// the ticks between ask for the totals alone (?fleet=totals), and the rows
// kept here age by the time since.
let fleetRows = null, fleetRowsAt = 0;
function fleetRowsKeep(s, asked) {
  if (!s.fleet) return;
  if (asked) {
    fleetRows = s.fleet.agents;
    fleetRowsAt = Date.now();
    return;
  }
  const d = (Date.now() - fleetRowsAt) / 1000;
  s.fleet.agents = (fleetRows || []).map((a) => Object.assign({}, a,
    { last_seen_s: a.last_seen_s + d, uptime_s: a.uptime_s + Math.round(d) }));
}

async function tick() {
  try {
    const rows = Date.now() - fleetRowsAt >= 5000;
    const q = [since ? "since=" + since : "", rows ? "" : "fleet=totals"].filter((x) => x).join("&");
    const res = await fetch("status.json" + (q ? "?" + q : ""),
                            { cache: "no-store", credentials: "same-origin" });
    if (!res.ok) throw new Error(res.status);
    const s = await res.json();
    fleetRowsKeep(s, rows);
    if (!keep(s)) { setTimeout(tick, 0); return; }
    token = s.reset.token || "";
    draw(s);
    lastOk = Date.now();
    $("banner-stale").hidden = true;
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
  } catch (e) {
    if (lastOk) {
      $("stale-since").textContent = new Date(lastOk).toISOString();
      $("banner-stale").hidden = false;
    }
  }
  setTimeout(tick, 1000);
}

tick();
