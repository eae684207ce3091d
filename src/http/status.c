/* SPDX-License-Identifier: Apache-2.0 */
/* status.c - GET /status.json (status.h). */
#include "status.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/json.h"
#include "core/util.h"
#include "core/warning.h"
#include "global/gclaim.h"
#include "httpd.h"
#include "metrics/history.h"
#include "metrics/metrics.h"
#include "rules/rules.h"
#include "status_page.h"
#include "store/store_heartbeat.h"
#include "store/store_why.h"

/* The process, sampled once a second (reading /proc per request would make
 * fifty tabs fifty directory walks a second). */
static struct {
    uint64_t fds, fd_limit, rss_bytes, memory_limit;
} proc;

static uint64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    uint64_t n = 0;
    struct dirent *e;

    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n ? n - 1 : 0; /* less the directory's own descriptor */
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    unsigned long long size, resident = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The memory the cgroup may use (systemd's MemoryMax=, a container's
 * limit), cgroup v2; 0 when unlimited or unknown. */
static uint64_t memory_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "re");
    unsigned long long v = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1) /* "max": unlimited */
        v = 0;
    fclose(f);
    return v;
}

void status_sample(struct history *h, uint64_t now_s)
{
    struct rlimit rl;

    history_sample(h, now_s);
    proc.fds = count_fds();
    proc.fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 0;
    proc.rss_bytes = rss_bytes();
    proc.memory_limit = memory_limit();
}

static json_t *uint_or_null(uint64_t v)
{
    return v ? json_integer((json_int_t)v) : json_null();
}

/* Milliseconds with two decimals, or null (no Redis call in the minute). */
static json_t *latency_ms(const struct history *h, double q)
{
    double s = history_redis_latency(h, q);
    return s < 0 ? json_null() : json_real((double)(int64_t)(s * 100000.0 + 0.5) / 100.0);
}

static const char *redis_mode(const struct config *cfg)
{
    return cfg->redis_cluster    ? "cluster"
           : cfg->redis_sentinel ? "sentinel"
           : cfg->redis_url      ? "url"
                                 : "standalone";
}

static json_t *agent_json(const struct status_agent *a, const struct config *cfg, uint64_t now)
{
    uint64_t entries = metrics_ld(&metrics.buckets) +
                       (uint64_t)atomic_load_explicit(&metrics.lease_keys, memory_order_relaxed);

    return json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:I}", "version",
        a->version, "pid", (json_int_t)getpid(), "now_unix", (json_int_t)now, "started_unix",
        (json_int_t)a->started_unix, "uptime_s", (json_int_t)(now - a->started_unix), "config_file",
        a->config_file, "workers", (json_int_t)a->workers, "fds", (json_int_t)proc.fds, "fd_limit",
        (json_int_t)proc.fd_limit, "rss_bytes", (json_int_t)proc.rss_bytes, "memory_limit_bytes",
        uint_or_null(proc.memory_limit), "entries", (json_int_t)entries, "max_entries",
        (json_int_t)cfg->max_entries, "evictions", (json_int_t)metrics_ld(&metrics.evictions));
}

static json_t *reload_json(const struct status_agent *a)
{
    return json_pack("{s:b, s:I, s:o, s:I, s:I, s:s?}", "ok", !a->reload_failed_unix, "last_unix",
                     (json_int_t)a->loaded_unix, "failed_unix", uint_or_null(a->reload_failed_unix),
                     "reloads", (json_int_t)metrics_ld(&metrics.reloads), "failures",
                     (json_int_t)metrics_ld(&metrics.reload_failures), "error", a->reload_error);
}

/* Where the rules come from, and with source = redis the version in force
 * against the fleet's current one (rules_redis.h); whether a new set is
 * loading off the loop; what the regexes in force take of the rule set's
 * budget (config.h CFG_BUDGET_*). */
static json_t *rule_set_json(const struct status_agent *a, const struct cfg_regex_use *u)
{
    uint64_t version = metrics_ld(&metrics.rules_version);
    uint64_t current = metrics_ld(&metrics.rules_current_version);

    return json_pack("{s:s, s:I, s:I, s:b, s:b, s:s?, s:o, s:b, s:{s:I, s:I, s:I, s:I}}", "source",
                     a->rules_redis ? "redis" : "file", "version", (json_int_t)version, "current",
                     (json_int_t)current, "on_current", !a->rules_redis || version == current,
                     "cached", atomic_load_explicit(&metrics.rules_cached, memory_order_relaxed),
                     "error", a->rules_error, "rejected_version",
                     uint_or_null(a->rules_error ? a->rules_rejected : 0), "compiling",
                     a->rules_compiling, "regexes", "count", (json_int_t)u->regexes, "text_bytes",
                     (json_int_t)u->pattern_bytes, "compiled_bytes", (json_int_t)u->compiled_bytes,
                     "compile_ms", (json_int_t)(u->compile_us / 1000));
}

/* Why Redis last failed or refused (store_why.h) into r: its name, what it
 * said, where and when; null each before any. */
static json_t *with_last_error(json_t *r)
{
    struct store_why w;
    int any = store_why_last(&w);

    if (!r)
        return NULL;
    json_object_set_new(r, "last_error", any ? json_string(w.name) : json_null());
    json_object_set_new(r, "last_error_detail", any ? json_string(w.detail) : json_null());
    json_object_set_new(r, "last_error_addr", any ? json_string(w.addr) : json_null());
    json_object_set_new(r, "last_error_at", any ? json_integer(w.at_ms / 1000) : json_null());
    return r;
}

static json_t *redis_json(const struct config *cfg, const struct history *h)
{
    int configured = !config_standalone(cfg);
    int up = atomic_load_explicit(&metrics.redis_up, memory_order_relaxed);

    return with_last_error(json_pack(
        "{s:b, s:s, s:b, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "configured", configured,
        "mode", redis_mode(cfg), "up", configured && up, "down_since_unix",
        uint_or_null(history_redis_down_since(h)), "latency_p50_ms", latency_ms(h, 0.5),
        "latency_p99_ms", latency_ms(h, 0.99), "commands",
        (json_int_t)metrics_ld(&metrics.redis_commands), "errors",
        (json_int_t)metrics_ld(&metrics.redis_errors), "failovers",
        (json_int_t)metrics_ld(&metrics.redis_failovers), "reconnects",
        (json_int_t)metrics_ld(&metrics.redis_reconnects), "fleet_agents",
        (json_int_t)atomic_load_explicit(&metrics.fleet_agents, memory_order_relaxed),
        "fleet_agents_max",
        (json_int_t)atomic_load_explicit(&metrics.fleet_agents_max, memory_order_relaxed)));
}

/* [global] (gclaim.h): the global Redis' connection, whether this agent is
 * its region's claimer, and the claimer's counters (this agent's own: they
 * grow only while it claims). Without [global]: configured false, zeros. */
static json_t *global_json(const struct gclaim_stats *g)
{
    static const struct gclaim_stats none;
    int on = g && g->configured;

    if (!on)
        g = &none;
    return json_pack("{s:b, s:b, s:b, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
                     "configured", on, "up", g->up, "claimer", g->claimer, "region",
                     on ? json_string(g->region) : json_null(), "regions", (json_int_t)g->regions,
                     "calls", (json_int_t)g->calls, "claims", (json_int_t)g->claims, "failed",
                     (json_int_t)g->failed, "granted", (json_int_t)g->granted, "returned",
                     (json_int_t)g->returned, "backstop", (json_int_t)g->backstop, "forfeited",
                     (json_int_t)g->forfeited, "keys", (json_int_t)g->keys, "rtt_ms",
                     on && g->rtt_ms > 0 ? json_real(g->rtt_ms) : json_null());
}

/* Redis calls per decision: the calls made for decisions (claims and
 * top-ups, exact calls, concurrency acquires: metrics.h
 * redis_decision_calls) against the decisions taken, so that an idle agent's
 * heartbeat, polls and pings do not count; calls saved: the decisions an
 * exact limiter would have sent to Redis one by one, less those calls. */
static json_t *leases_json(uint64_t decisions)
{
    uint64_t calls = metrics_ld(&metrics.redis_decision_calls);

    return json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "redis_calls_per_decision",
                     decisions ? json_real((double)calls / (double)decisions) : json_null(),
                     "decision_calls", (json_int_t)calls, "calls_saved",
                     (json_int_t)(decisions > calls ? decisions - calls : 0), "claims",
                     (json_int_t)metrics_ld(&metrics.lease_claims), "tokens_claimed",
                     (json_int_t)metrics_ld(&metrics.lease_tokens_granted), "tokens_returned",
                     (json_int_t)metrics_ld(&metrics.lease_tokens_returned), "keys",
                     (json_int_t)atomic_load_explicit(&metrics.lease_keys, memory_order_relaxed),
                     "local_decisions", (json_int_t)metrics_ld(&metrics.lease_local_decisions),
                     "exact_calls", (json_int_t)metrics_ld(&metrics.lease_exact_calls));
}

/* The fleet's counters a row carries and the totals add up. */
static const char *const fleet_counters[] = {
    "decisions",    "blocked", "would_block", "degraded",   "notifies",
    "redis_errors", "entries", "evictions",   "slots_held", "slots_expired",
};
#define FLEET_COUNTERS (sizeof(fleet_counters) / sizeof(fleet_counters[0]))

/* One agent's row: its member and its counters as it wrote them (another
 * agent's text: only the known fields, of the right type, are kept).
 * uptime_s and last_seen_s are set per request. */
static json_t *fleet_row(const struct store_heartbeat_row *r, json_int_t *sum)
{
    json_t *in = json_loadb(r->row, r->row_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *out = json_object();

    if (!json_is_object(in) || !out) {
        json_decref(in);
        json_decref(out);
        return NULL;
    }
    static const char *const strs[] = {"host", "listen", "version"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(in, strs[i]);
        json_object_set_new(out, strs[i],
                            json_string(json_is_string(v) ? json_string_value(v) : ""));
    }
    json_t *pid = json_object_get(in, "pid"), *st = json_object_get(in, "started_unix");
    json_t *rv = json_object_get(in, "rules_version"), *up = json_object_get(in, "redis_up");
    json_int_t started = json_is_integer(st) ? json_integer_value(st) : 0;
    json_object_set_new(out, "pid",
                        json_integer(json_is_integer(pid) ? json_integer_value(pid) : 0));
    json_object_set_new(out, "started_unix", json_integer(started > 0 ? started : 0));
    json_object_set_new(out, "rules_version",
                        json_integer(json_is_integer(rv) ? json_integer_value(rv) : 0));
    json_object_set_new(out, "redis_up",
                        json_boolean(json_is_integer(up) && json_integer_value(up)));
    for (size_t i = 0; i < FLEET_COUNTERS; i++) {
        json_t *v = json_object_get(in, fleet_counters[i]);
        json_int_t n = json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : 0;
        json_object_set_new(out, fleet_counters[i], json_integer(n));
        sum[i] += n;
    }
    json_object_set_new(out, "self", json_boolean(r->self));
    json_decref(in);
    return out;
}

/* The rows of the last beat, parsed once per beat (not per request: up to
 * STORE_HEARTBEAT_ROWS of them, and fifty tabs ask every second). On the
 * main loop only. */
static struct {
    uint64_t beat; /* store_heartbeat_beat() they come from; 0 none */
    json_t *agents, *totals;
    uint64_t ago_ms[STORE_HEARTBEAT_ROWS]; /* each row's, as of the beat */
} fleet_cache;

static void fleet_parse(const struct store_heartbeat *hb)
{
    const struct store_heartbeat_row *rows;
    uint64_t age_ms;
    json_int_t sum[FLEET_COUNTERS] = {0};
    size_t n = store_heartbeat_rows(hb, &rows, &age_ms), up = 0;
    json_t *agents = json_array(), *totals = json_object();

    if (!agents || !totals) {
        json_decref(agents);
        json_decref(totals);
        return; /* out of memory: the last rows stay */
    }
    for (size_t i = 0; i < n && i < STORE_HEARTBEAT_ROWS; i++) {
        json_t *row = fleet_row(&rows[i], sum);
        if (!row)
            continue;
        up += json_is_true(json_object_get(row, "redis_up"));
        fleet_cache.ago_ms[json_array_size(agents)] = rows[i].ago_ms;
        json_array_append_new(agents, row);
    }
    for (size_t i = 0; i < FLEET_COUNTERS; i++)
        json_object_set_new(totals, fleet_counters[i], json_integer(sum[i]));
    json_object_set_new(totals, "agents", json_integer((json_int_t)json_array_size(agents)));
    json_object_set_new(totals, "redis_up", json_integer((json_int_t)up));
    json_decref(fleet_cache.agents);
    json_decref(fleet_cache.totals);
    fleet_cache.agents = agents;
    fleet_cache.totals = totals;
    fleet_cache.beat = store_heartbeat_beat(hb);
}

/* The fleet as the last heartbeat answered it (store_heartbeat.h): each
 * live agent's row, newest first (with_rows 0: without them, the totals
 * only), and their totals; null standalone. */
static json_t *fleet_json(const struct store_heartbeat *hb, uint64_t now, int with_rows)
{
    const struct store_heartbeat_row *rows;
    uint64_t age_ms;

    if (!hb)
        return json_null();
    store_heartbeat_rows(hb, &rows, &age_ms);
    if (age_ms == UINT64_MAX)
        return json_pack("{s:[], s:{s:i, s:i}, s:n, s:I}", "agents", "totals", "agents", 0,
                         "redis_up", 0, "age_s", "max_rows", (json_int_t)STORE_HEARTBEAT_ROWS);
    if (store_heartbeat_beat(hb) != fleet_cache.beat)
        fleet_parse(hb);
    if (!fleet_cache.agents)
        return json_null();
    for (size_t i = 0; with_rows && i < json_array_size(fleet_cache.agents); i++) {
        json_t *row = json_array_get(fleet_cache.agents, i);
        json_int_t started = json_integer_value(json_object_get(row, "started_unix"));
        json_object_set_new(
            row, "uptime_s",
            json_integer(started > 0 && (uint64_t)started <= now ? (json_int_t)now - started : 0));
        /* seen: as of the beat, plus the time since */
        json_object_set_new(row, "last_seen_s",
                            json_real((double)(fleet_cache.ago_ms[i] + age_ms) / 1000.0));
    }
    return json_pack("{s:o, s:O, s:f, s:I}", "agents",
                     with_rows ? json_incref(fleet_cache.agents) : json_array(), "totals",
                     fleet_cache.totals, "age_s", (double)age_ms / 1000.0, "max_rows",
                     (json_int_t)STORE_HEARTBEAT_ROWS);
}

static json_t *peers_json(void)
{
    struct metrics_disconnect d;
    json_t *last = json_null();

    if (metrics_last_disconnect(&d))
        last = json_pack("{s:i, s:s, s:s, s:I}", "status", d.status, "message", d.message, "peer",
                         d.peer, "unix", (json_int_t)d.unix_s);
    return json_pack("{s:i, s:I, s:i, s:I, s:I, s:I, s:I, s:o}", "connections",
                     atomic_load_explicit(&metrics.connections, memory_order_relaxed),
                     "connections_total", (json_int_t)metrics_ld(&metrics.connections_total),
                     "in_flight",
                     atomic_load_explicit(&metrics.notifies_waiting, memory_order_relaxed), "hello",
                     (json_int_t)metrics_ld(&metrics.frames_in[METRICS_FRAME_HELLO]), "disconnect",
                     (json_int_t)metrics_ld(&metrics.frames_in[METRICS_FRAME_DISCONNECT]), "notify",
                     (json_int_t)metrics_ld(&metrics.frames_in[METRICS_FRAME_NOTIFY]), "acks",
                     (json_int_t)metrics_ld(&metrics.acks), "last_disconnect", last);
}

/* The active warnings (core/warning.h), in kind order: what the page's
 * banners show. since: Unix seconds, as the other *_unix fields. */
static json_t *warnings_json(void)
{
    struct warning_view v[WARNING_KINDS];
    size_t n = warning_list(v, WARNING_KINDS);
    json_t *out = json_array();

    for (size_t i = 0; out && i < n && i < WARNING_KINDS; i++) {
        /* a message names files and rules: UTF-8 as a rule, else its bytes
         * as Latin-1 (one cut in a sequence must not lose the document) */
        json_t *msg = json_string(v[i].message);
        if (!msg)
            msg = json_latin1(v[i].message, strlen(v[i].message));
        json_array_append_new(out,
                              json_pack("{s:s, s:o, s:I}", "kind", warning_kind_names[v[i].kind],
                                        "message", msg, "since", (json_int_t)v[i].since));
    }
    return out;
}

static json_t *series(const uint32_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static void limit_text(const struct cfg_rule *r, char *out, size_t cap)
{
    char per[32], ceiling[32];

    if (r->algorithm == BUCKET_CONCURRENCY) { /* in flight, not a rate */
        config_duration_text(r->max_hold_ms, per, sizeof(per));
        snprintf(out, cap, "%llu in flight (max_hold %s)", (unsigned long long)r->cc_limit, per);
        return;
    }
    if (r->rate_arg) {
        config_duration_text(r->max_rate_period_ms, ceiling, sizeof(ceiling));
        snprintf(out, cap, "arg:%s (at most %llu/%s)", r->rate_arg,
                 (unsigned long long)r->max_rate_n, ceiling);
        return;
    }
    config_duration_text(r->rate_period_ms, per, sizeof(per));
    snprintf(out, cap, "%llu/%s burst %llu", (unsigned long long)r->rate_n, per,
             (unsigned long long)r->burst);
}

static json_t *rule_json(const struct ruleset *rs, size_t i, const struct history *h,
                         uint64_t since, uint64_t *decisions, uint64_t *degraded, uint64_t *slots)
{
    const struct cfg_rule *r = &rs->cfg->rules[i];
    struct metrics_rule *m = rs->metrics[i];
    uint32_t dec[HISTORY_SECONDS], blk[HISTORY_SECONDS], wb[HISTORY_SECONDS];
    uint64_t last_s;
    size_t n = history_rule(h, m, since, dec, blk, wb, &last_s);
    uint64_t allowed = metrics_ld(&m->allowed), blocked = metrics_ld(&m->blocked),
             would = metrics_ld(&m->would_block);
    uint64_t all = allowed + blocked + would;
    char limit[160];

    *decisions += all;
    limit_text(r, limit, sizeof(limit));
    *degraded += metrics_ld(&m->degraded);
    if (r->algorithm == BUCKET_CONCURRENCY) {
        int64_t held = atomic_load_explicit(&m->slots_held, memory_order_relaxed);
        slots[0] += held > 0 ? (uint64_t)held : 0;
        slots[1] += metrics_ld(&m->slots_expired);
    }
    return json_pack(
        "{s:s, s:b, s:s, s:s, s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:o, "
        "s:o, s:{s:I, s:I, s:o, s:o, s:o}}",
        "name", r->name, "shadow", r->shadow, "fail",
        r->on_redis_down == DOWN_CLOSED ? "closed" : "open", "algorithm",
        bucket_algorithm_names[r->algorithm], "limit", limit, "rate", history_rule_rate(h, m, 5),
        "allowed", (json_int_t)allowed, "blocked", (json_int_t)blocked, "would_block",
        (json_int_t)would, "degraded", (json_int_t)metrics_ld(&m->degraded), "refunded",
        (json_int_t)metrics_ld(&m->refunded), "blocked_pct",
        all ? 100.0 * (double)(blocked + would) / (double)all : 0.0, "slots_held",
        r->algorithm == BUCKET_CONCURRENCY
            ? json_integer((json_int_t)atomic_load_explicit(&m->slots_held, memory_order_relaxed))
            : json_null(),
        "max_hold_s",
        r->algorithm == BUCKET_CONCURRENCY ? json_real((double)r->max_hold_ms / 1000.0)
                                           : json_null(),
        "slots_expired",
        r->algorithm == BUCKET_CONCURRENCY ? json_integer((json_int_t)metrics_ld(&m->slots_expired))
                                           : json_null(),
        "history", "step_s", (json_int_t)1, "last_unix", (json_int_t)last_s, "decisions",
        series(dec, n), "blocks", series(blk, n), "would_blocks", series(wb, n));
}

/* The clients with the most blocked requests of each rule, busiest first. */
static json_t *top_json(const struct ruleset *rs, uint64_t now_us)
{
    json_t *out = json_array();

    for (size_t i = 0; out && i < rs->cfg->nrules; i++) {
        struct top_entry t[METRICS_TOP_K];
        size_t n = metrics_top_list(rs->metrics[i], now_us, t, METRICS_TOP_K);
        for (size_t k = 0; k < n; k++) {
            uint64_t retry = t[k].retry_until_us > now_us ? t[k].retry_until_us - now_us : 0;
            json_array_append_new(
                out, json_pack("{s:s, s:o, s:I, s:f}", "rule", rs->cfg->rules[i].name, "key",
                               json_latin1(t[k].key, t[k].len), "blocked", (json_int_t)t[k].count,
                               "retry_after_s", (double)retry / 1e6));
        }
    }
    return out;
}

char *status_render(const struct status_agent *a, const struct ruleset *rs, const struct history *h,
                    uint64_t since, size_t *len)
{
    const struct config *cfg = rs->cfg;
    uint64_t now = (uint64_t)time(NULL), decisions = 0, degraded = 0, slots[2] = {0, 0};
    int standalone = config_standalone(cfg);
    json_t *rules = json_array();
    char *text;

    for (size_t i = 0; rules && i < cfg->nrules; i++)
        json_array_append_new(rules, rule_json(rs, i, h, since, &decisions, &degraded, slots));
    /* boxes: which of the page's boxes apply (standalone: no leases, no
     * fleet); decisions: over the rules in force */
    json_t *doc = json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:{s:b, s:s}, "
        "s:{s:b, s:b}, s:{s:I, s:I, s:I, s:I}, s:o}",
        "agent", agent_json(a, cfg, now), "warnings", warnings_json(), "reload", reload_json(a),
        "rule_set", rule_set_json(a, &rs->cfg->regex_use), "redis", redis_json(cfg, h), "global",
        global_json(a->global), "leases", leases_json(decisions), "peers", peers_json(), "rules",
        rules, "top", top_json(rs, util_now_us()), "reset", "allowed", a->reset_allowed, "token",
        a->reset_allowed ? a->token : "", "boxes", "leases", !standalone, "fleet", !standalone,
        "decisions", "total", (json_int_t)decisions, "degraded", (json_int_t)degraded, "slots_held",
        (json_int_t)slots[0], "slots_expired", (json_int_t)slots[1], "fleet",
        fleet_json(standalone ? NULL : a->heartbeat, now, !a->fleet_totals_only));
    if (!doc)
        return NULL;
    text = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (text)
        *len = strlen(text);
    return text;
}

void status_page_get(struct httpd_req *req)
{
    size_t len = 0;
    const char *html = status_page_html(&len), *headers = status_page_headers();
    char *body = html ? malloc(len) : NULL;

    if (body)
        memcpy(body, html, len);
    httpd_reply(req, "200 OK", "text/html; charset=utf-8", headers, body, len);
}

static int header_is(const struct httpd_req *req, const char *name, const char *want)
{
    size_t len;
    const char *v = httpd_req_header(req, name, &len);
    return v && len == strlen(want) && strncasecmp(v, want, len) == 0;
}

const char *status_reset_refused(const struct httpd_req *req, int reset_allowed, const char *token)
{
    size_t olen, hlen, slen, tlen;
    const char *origin = httpd_req_header(req, "Origin", &olen);
    const char *site = httpd_req_header(req, "Sec-Fetch-Site", &slen);
    const char *host = httpd_req_header(req, "Host", &hlen);
    const char *got = httpd_req_header(req, "X-Spoa-Token", &tlen);

    if (!reset_allowed)
        return "POST /reset is off here ([agent] stats_reset = no)";
    if (!origin && !site)
        return NULL;
    if (site && !header_is(req, "Sec-Fetch-Site", "same-origin"))
        return "cross-site request refused (Sec-Fetch-Site)";
    if (origin) {
        /* the page's origin is http://HOST[:PORT] as the browser sent Host */
        if (!host || olen != 7 + hlen || strncasecmp(origin, "http://", 7) != 0 ||
            strncasecmp(origin + 7, host, hlen) != 0)
            return "cross-origin request refused (Origin)";
    }
    if (!got || tlen != strlen(token) || !token[0] || memcmp(got, token, tlen) != 0)
        return "the status page's token is missing or wrong (X-Spoa-Token)";
    return NULL;
}
