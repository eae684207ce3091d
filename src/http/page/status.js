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

// Two series as polylines in a 300 x 32 box; the y scale is the larger
// series' maximum, so blocks read against decisions.
function sparkline(dec, blk) {
  const NS = "http://www.w3.org/2000/svg", W = 300, H = 32;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  const max = Math.max(1, ...dec, ...blk);
  for (const [series, cls] of [[dec, "dec"], [blk, "blk"]]) {
    const off = W - series.length;
    const pts = series.map((v, i) => (off + i) + "," + (H - 1 - (v / max) * (H - 2)).toFixed(1));
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
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
      el("td", { class: "n refunded" }, num(r.refunded)),
      el("td", { class: "n pct" + (pct >= 10 ? " hot" : "") }, num(pct, 1)));
    const td = el("td");
    const h = hist[r.name] || { decisions: [], blocks: [] };
    td.append(sparkline(h.decisions, h.blocks));
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

// A concurrency rule's client waits for a slot, not for time: its
// retry_after is capped at 1 s (a release may come any moment), so "now"
// would mislead while slots are held up to max_hold.
function retryText(t, concurrency) {
  if (concurrency.has(t.rule)) return "when a slot frees";
  return t.retry_after_s >= 0.5 ? duration(t.retry_after_s) : "now";
}

function drawTop(top, canReset, rules) {
  const body = $("top").querySelector("tbody");
  const concurrency = new Set(rules.filter((r) => r.algorithm === "concurrency").map((r) => r.name));
  body.replaceChildren();
  $("top-empty").hidden = top.length > 0;
  for (const t of top) {
    const tr = el("tr");
    const keyCell = el("td", { class: "key" });
    keyCell.append(el("a", { href: "key" + keyQuery(t.rule, t.key) }, t.key));
    tr.append(el("td", {}, t.rule), keyCell, el("td", { class: "n" }, num(t.blocked)),
      el("td", { class: "n" }, retryText(t, concurrency)));
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
  fill("card-leases", [
    ["Redis calls per decision", num(l.redis_calls_per_decision, 4)], ["calls saved", num(l.calls_saved)],
    ["tokens claimed", num(l.tokens_claimed)], ["tokens returned", num(l.tokens_returned)],
    ["keys held", num(l.keys)], ["local decisions", num(l.local_decisions)],
  ]);
  fill("card-peers", [
    ["connections", num(p.connections)], ["frames in flight", num(p.in_flight)],
    ["HELLO", num(p.hello)], ["DISCONNECT", num(p.disconnect)], ["NOTIFY", num(p.notify)],
    ["last DISCONNECT", p.last_disconnect ? p.last_disconnect.status + " " + p.last_disconnect.message +
      " (" + p.last_disconnect.peer + ", " + when(p.last_disconnect.unix) + ")" : "–"],
  ]);
  fill("card-agent", [
    ["uptime", duration(a.uptime_s)], ["workers", num(a.workers)],
    ["last reload", s.reload.ok ? "ok, " + when(s.reload.last_unix) : "failed"],
    ["rule set", ruleSet(s.rule_set)],
    ["file descriptors", num(a.fds) + " / " + num(a.fd_limit)],
    ["memory (RSS)", bytes(a.rss_bytes) + (a.memory_limit_bytes ? " / " + bytes(a.memory_limit_bytes) : "")],
    ["entries", num(a.entries) + " / " + num(a.max_entries)],
  ]);
  drawRules(s.rules);
  drawTop(s.top, s.reset.allowed, s.rules);
  fleet(s.rule_set);
}

// With rules from Redis: every live agent and its rule set version (GET
// /fleet, which changes when the agents report: every 5 s), those off the
// current version marked.
let fleetAt = 0;
// An agent's version, linked to its text (GET /rules/N).
function versionCell(a) {
  const td = el("td", { class: "n" + (a.current ? "" : " hot") });
  if (a.version > 0) td.append(el("a", { href: "rules/" + a.version }, String(a.version)));
  else td.textContent = String(a.version);
  return td;
}

async function fleet(r) {
  $("fleet-section").hidden = r.source !== "redis";
  if (r.source !== "redis" || Date.now() - fleetAt < 5000) return;
  fleetAt = Date.now();
  try {
    const res = await fetch("fleet", { cache: "no-store", credentials: "same-origin" });
    if (!res.ok) throw new Error(res.status);
    const f = await res.json();
    $("fleet-line").textContent = "current version " + f.current + ", " + f.agents.length +
      " agents, " + f.off_current + " off it";
    const body = $("fleet").querySelector("tbody");
    body.replaceChildren();
    for (const a of f.agents) {
      const tr = el("tr", a.current ? {} : { class: "off" });
      tr.append(el("td", {}, a.host), el("td", { class: "n" }, String(a.pid)), el("td", {}, a.listen),
        versionCell(a),
        el("td", { class: a.error ? "hot" : "" }, a.error), el("td", { class: "n" }, num(a.last_seen_s, 1)));
      body.append(tr);
    }
  } catch (e) {
    $("fleet-line").textContent = "(no fleet view: " + e.message + ")";
  }
}

// Where the rules come from; from Redis, the version against the fleet's current one.
function ruleSet(r) {
  if (r.source !== "redis") return "this file's";
  let t = r.version ? "version " + r.version : "none from Redis yet (the file's)";
  if (r.cached) t += ", from the cache";
  if (!r.on_current) t += "; NOT the current version " + r.current;
  if (r.error) t += " (" + r.error + ")";
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

async function tick() {
  try {
    const res = await fetch("status.json" + (since ? "?since=" + since : ""),
                            { cache: "no-store", credentials: "same-origin" });
    if (!res.ok) throw new Error(res.status);
    const s = await res.json();
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
