/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - counters, histograms, the rule records, Prometheus text
 * rendering, the last DISCONNECT. The blocked-client heavy hitters kept in
 * the rule records are metrics_top.c's. */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/strbuf.h"
#include "core/warning.h"
#include "mismatch.h"

struct metrics metrics;
_Thread_local struct metrics_local metrics_local;

/* Upper bounds of the histogram buckets in nanoseconds; the last is +Inf. */
static const uint64_t hist_bounds_ns[] = {
    25000,   50000,    100000,   250000,   500000,    1000000,   2500000,
    5000000, 10000000, 25000000, 50000000, 100000000, 250000000, 1000000000,
};
_Static_assert(sizeof(hist_bounds_ns) / sizeof(hist_bounds_ns[0]) == METRICS_HIST_BUCKETS - 1,
               "a bound for every histogram bucket but +Inf");

static pthread_mutex_t rules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_rule *_Atomic rules_head;

static unsigned hist_bucket(uint64_t ns)
{
    unsigned i = 0;
    while (i < METRICS_HIST_BUCKETS - 1 && ns > hist_bounds_ns[i])
        i++;
    return i;
}

void metrics_hist_observe(struct metrics_hist *h, uint64_t ns)
{
    atomic_fetch_add_explicit(&h->buckets[hist_bucket(ns)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void metrics_hist_observe_since(struct metrics_hist *h, uint64_t now_us, const uint64_t *t0_us,
                                size_t n)
{
    uint64_t count[METRICS_HIST_BUCKETS] = {0}, sum = 0;

    for (size_t k = 0; k < n; k++) {
        uint64_t ns = (now_us - t0_us[k]) * 1000;
        count[hist_bucket(ns)]++;
        sum += ns;
    }
    for (unsigned i = 0; i < METRICS_HIST_BUCKETS; i++)
        if (count[i])
            atomic_fetch_add_explicit(&h->buckets[i], count[i], memory_order_relaxed);
    if (n)
        atomic_fetch_add_explicit(&h->sum_ns, sum, memory_order_relaxed);
}

void metrics_local_enable(void)
{
    metrics_local.on = 1;
}

/* The pending allowed decisions of the rule last counted. */
static void flush_rule(struct metrics_local *l)
{
    if (l->rule_allowed)
        atomic_fetch_add_explicit(&l->rule->allowed, l->rule_allowed, memory_order_relaxed);
    l->rule_allowed = 0;
}

void metrics_local_flush_slow(void)
{
    struct metrics_local *l = &metrics_local;

    for (unsigned i = 0; i < METRICS_FRAMES; i++)
        if (l->frames_in[i])
            METRIC_ADD(frames_in[i], l->frames_in[i]);
    if (l->acks)
        METRIC_ADD(acks, l->acks);
    if (l->lease_local_decisions)
        METRIC_ADD(lease_local_decisions, l->lease_local_decisions);
    if (l->lease_negative_hits)
        METRIC_ADD(lease_negative_hits, l->lease_negative_hits);
    flush_rule(l);
    *l = (struct metrics_local){.on = l->on, .rule = l->rule}; /* all counts out */
}

int metrics_rule_cost_over(struct metrics_rule *m, uint64_t now_us)
{
    uint64_t last = atomic_load_explicit(&m->cost_over_logged_us, memory_order_relaxed);

    atomic_fetch_add_explicit(&m->cost_over_burst, 1, memory_order_relaxed);
    /* 0: never logged (a monotonic clock is past 10 s at any real call) */
    if (last != 0 && now_us - last < METRICS_COST_LOG_US)
        return 0;
    return atomic_compare_exchange_strong(&m->cost_over_logged_us, &last, now_us ? now_us : 1);
}

void metrics_rule_allowed(struct metrics_rule *m)
{
    struct metrics_local *l = &metrics_local;

    if (!l->on) {
        atomic_fetch_add_explicit(&m->allowed, 1, memory_order_relaxed);
        return;
    }
    if (l->rule != m) { /* another rule: its predecessor's count goes out */
        flush_rule(l);
        l->rule = m;
    }
    l->rule_allowed++;
    l->dirty = 1;
}

struct metrics_rule *metrics_rule_get(const char *name)
{
    struct metrics_rule *r;

    /* Lock-free lookup: records are only ever prepended, never freed. */
    for (r = atomic_load(&rules_head); r; r = r->next)
        if (strcmp(r->name, name) == 0)
            return r;

    pthread_mutex_lock(&rules_lock);
    for (r = atomic_load(&rules_head); r; r = r->next)
        if (strcmp(r->name, name) == 0)
            goto out;
    r = calloc(1, sizeof(*r));
    if (!r)
        goto out;
    r->top_lock = malloc(sizeof(pthread_mutex_t));
    if (!r->top_lock) {
        free(r);
        r = NULL;
        goto out;
    }
    pthread_mutex_init(r->top_lock, NULL);
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->next = atomic_load(&rules_head);
    atomic_store(&rules_head, r);
out:
    pthread_mutex_unlock(&rules_lock);
    return r;
}

/* ---- rendering ----------------------------------------------------------- */

static void render_hist(struct strbuf *b, const char *name, const char *help,
                        struct metrics_hist *h)
{
    uint64_t cum = 0;

    strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (unsigned i = 0; i < METRICS_HIST_BUCKETS; i++) {
        cum += metrics_ld(&h->buckets[i]);
        if (i < METRICS_HIST_BUCKETS - 1)
            strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds_ns[i] / 1e9,
                          (unsigned long long)cum);
        else
            strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    strbuf_printf(b, "%s_sum %.9f\n%s_count %llu\n", name, metrics_ld(&h->sum_ns) / 1e9, name,
                  (unsigned long long)cum);
}

static void render_simple(struct strbuf *b, const char *name, const char *type, const char *help,
                          uint64_t v)
{
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                  (unsigned long long)v);
}

/* One counter per rule: the field at offset off of each rule's record. */
static void render_rule_counter(struct strbuf *b, const char *name, const char *help, size_t off)
{
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (struct metrics_rule *r = atomic_load(&rules_head); r; r = r->next)
        strbuf_printf(b, "%s{rule=\"%s\"} %llu\n", name, r->name,
                      (unsigned long long)metrics_ld((atomic_uint_fast64_t *)((char *)r + off)));
}

/* Concurrency slots per rule: held (this agent's view, never below 0),
 * releases by result, slots freed by max_hold. */
static void render_slots(struct strbuf *b)
{
    struct metrics_rule *r;

    strbuf_printf(b, "# HELP spoa_ratelimit_slots_held Concurrency slots this agent took and has "
                     "not seen released or expired.\n# TYPE spoa_ratelimit_slots_held gauge\n");
    for (r = atomic_load(&rules_head); r; r = r->next) {
        int64_t held = atomic_load_explicit(&r->slots_held, memory_order_relaxed);
        strbuf_printf(b, "spoa_ratelimit_slots_held{rule=\"%s\"} %lld\n", r->name,
                      (long long)(held > 0 ? held : 0));
    }
    strbuf_printf(b, "# HELP spoa_ratelimit_slots_released_total Release messages' slots by "
                     "result: ok (it was held), unknown (malformed, unknown, already freed or "
                     "expired).\n# TYPE spoa_ratelimit_slots_released_total counter\n");
    for (r = atomic_load(&rules_head); r; r = r->next) {
        strbuf_printf(b, "spoa_ratelimit_slots_released_total{rule=\"%s\",result=\"ok\"} %llu\n",
                      r->name, (unsigned long long)metrics_ld(&r->slots_released_ok));
        strbuf_printf(b,
                      "spoa_ratelimit_slots_released_total{rule=\"%s\",result=\"unknown\"} %llu\n",
                      r->name, (unsigned long long)metrics_ld(&r->slots_released_unknown));
    }
    render_rule_counter(b, "spoa_ratelimit_slots_expired_total",
                        "Concurrency slots freed by max_hold (never released).",
                        offsetof(struct metrics_rule, slots_expired));
}

/* Per rule: decisions by result, those taken without Redis, and the costs
 * over capacity. */
static void render_rules(struct strbuf *b)
{
    struct metrics_rule *r;

    strbuf_printf(b, "# HELP spoa_ratelimit_decisions_total Rate limit decisions by rule and "
                     "result.\n# TYPE spoa_ratelimit_decisions_total counter\n");
    for (r = atomic_load(&rules_head); r; r = r->next) {
        strbuf_printf(b, "spoa_ratelimit_decisions_total{rule=\"%s\",result=\"allowed\"} %llu\n",
                      r->name, (unsigned long long)metrics_ld(&r->allowed));
        strbuf_printf(b, "spoa_ratelimit_decisions_total{rule=\"%s\",result=\"blocked\"} %llu\n",
                      r->name, (unsigned long long)metrics_ld(&r->blocked));
        strbuf_printf(b,
                      "spoa_ratelimit_decisions_total{rule=\"%s\",result=\"would_block\"} %llu\n",
                      r->name, (unsigned long long)metrics_ld(&r->would_block));
    }
    render_rule_counter(b, "spoa_ratelimit_degraded_decisions_total",
                        "Decisions taken without Redis because it was unreachable.",
                        offsetof(struct metrics_rule, degraded));
    render_rule_counter(b, "spoa_ratelimit_cost_over_burst_total",
                        "Requests denied because their cost is over the bucket's capacity (they "
                        "can never pass).",
                        offsetof(struct metrics_rule, cost_over_burst));
    render_rule_counter(b, "spoa_ratelimit_blocks_started_total",
                        "Denials that started a penalty box (block_for) for their key.",
                        offsetof(struct metrics_rule, blocks_started));
    render_rule_counter(b, "spoa_ratelimit_refunds_total",
                        "Tokens given back to a rule because another rule blocked the request "
                        "([agent] charge = all-or-nothing).",
                        offsetof(struct metrics_rule, refunded));
    render_rule_counter(b, "spoa_ratelimit_fallback_repaid_total",
                        "Tokens the backstop admitted while Redis did not decide, charged back "
                        "to Redis once it answered.",
                        offsetof(struct metrics_rule, fallback_repaid));
    render_slots(b);
}

const char *const metrics_redis_error_names[] = {
    [METRICS_REDIS_READONLY] = "READONLY",
    [METRICS_REDIS_MASTERDOWN] = "MASTERDOWN",
    [METRICS_REDIS_NOPERM] = "NOPERM",
    [METRICS_REDIS_OOM] = "OOM",
    [METRICS_REDIS_NOAUTH] = "NOAUTH",
    [METRICS_REDIS_WRONGPASS] = "WRONGPASS",
    [METRICS_REDIS_NOSCRIPT] = "NOSCRIPT",
    [METRICS_REDIS_NOREPLICAS] = "NOREPLICAS",
    [METRICS_REDIS_LOADING] = "LOADING",
    [METRICS_REDIS_TRYAGAIN] = "TRYAGAIN",
    [METRICS_REDIS_CLUSTERDOWN] = "CLUSTERDOWN",
    [METRICS_REDIS_BUSY] = "BUSY",
    [METRICS_REDIS_REPLY_TOO_LARGE] = "reply_too_large",
    [METRICS_REDIS_BAD_REPLY] = "bad_reply",
    [METRICS_REDIS_OTHER] = "other",
};
_Static_assert(sizeof(metrics_redis_error_names) / sizeof(metrics_redis_error_names[0]) ==
                   METRICS_REDIS_ERROR_KINDS,
               "a name for every enum metrics_redis_error");

static void render_redis(struct strbuf *b)
{
    render_simple(b, "spoa_ratelimit_redis_commands_total", "counter", "Commands sent to Redis.",
                  metrics_ld(&metrics.redis_commands));
    render_simple(b, "spoa_ratelimit_redis_batches_total", "counter",
                  "Batch script calls: many keys' claims or decisions in one EVALSHA.",
                  metrics_ld(&metrics.redis_batches));
    render_simple(b, "spoa_ratelimit_redis_batched_calls_total", "counter",
                  "Script calls sent inside batches.", metrics_ld(&metrics.redis_batched_calls));
    render_simple(b, "spoa_ratelimit_redis_keepalives_total", "counter",
                  "PINGs sent on Redis connections idle for [redis] keepalive.",
                  metrics_ld(&metrics.redis_keepalives));
    render_simple(b, "spoa_ratelimit_redis_reconnects_total", "counter",
                  "Times Redis was usable again after it had been lost.",
                  metrics_ld(&metrics.redis_reconnects));
    render_simple(b, "spoa_ratelimit_redis_failovers_total", "counter",
                  "Another master chosen by the Sentinels, or Cluster slots that changed owners.",
                  metrics_ld(&metrics.redis_failovers));
    render_simple(b, "spoa_ratelimit_redis_errors_total", "counter",
                  "Redis commands that failed or timed out.", metrics_ld(&metrics.redis_errors));
    render_simple(b, "spoa_ratelimit_redis_clock_jumps_total", "counter",
                  "Steps of a Redis server's clock over 1 s, either sign (redis_clock_jump).",
                  metrics_ld(&metrics.redis_clock_jumps));
    /* every kind, 0 included: dashboards and alerts see the series before
     * the first error */
    strbuf_printf(b, "# HELP spoa_ratelimit_redis_error_replies_total Error replies from Redis by "
                     "kind (READONLY and MASTERDOWN: not the master; NOPERM: ACL; OOM: maxmemory; "
                     "NOAUTH, WRONGPASS: password).\n"
                     "# TYPE spoa_ratelimit_redis_error_replies_total counter\n");
    for (unsigned k = 0; k < METRICS_REDIS_ERROR_KINDS; k++)
        strbuf_printf(b, "spoa_ratelimit_redis_error_replies_total{kind=\"%s\"} %llu\n",
                      metrics_redis_error_names[k],
                      (unsigned long long)metrics_ld(&metrics.redis_error_replies[k]));
    render_simple(b, "spoa_ratelimit_redis_up", "gauge",
                  "1 when Redis is connected and deciding: 0 while unreachable, refusing "
                  "(READONLY, NOPERM, OOM, NOAUTH, ...) or, with require_noeviction, able to "
                  "evict.",
                  (uint64_t)atomic_load(&metrics.redis_up));
    render_simple(b, "spoa_ratelimit_redis_configured", "gauge",
                  "1 when a [redis] section makes limits global, 0 standalone.",
                  (uint64_t)atomic_load(&metrics.redis_configured));
    render_simple(b, "spoa_ratelimit_redis_eviction_possible", "gauge",
                  "1 when a Redis in use has maxmemory set and a maxmemory-policy that can "
                  "evict the agent's keys (its buckets would refill).",
                  (uint64_t)atomic_load(&metrics.redis_eviction_possible));
    render_simple(b, "spoa_ratelimit_redis_function_connections", "gauge",
                  "Redis connections calling the scripts as functions (FCALL); the others, "
                  "and all with [redis] functions = off, call them with EVALSHA.",
                  (uint64_t)atomic_load(&metrics.redis_function_connections));
    render_simple(b, "spoa_ratelimit_redis_evicted_keys", "gauge",
                  "evicted_keys of INFO, summed over the Redis servers in use (read every minute).",
                  metrics_ld(&metrics.redis_evicted_keys));
    render_simple(b, "spoa_ratelimit_redis_state_lost_total", "counter",
                  "Times this agent found its keyspace in Redis vanished or replaced (the epoch "
                  "key): restarted empty, flushed, or failed over to a replica without it.",
                  metrics_ld(&metrics.redis_state_lost));
    render_simple(b, "spoa_ratelimit_fleet_agents", "gauge",
                  "Agents live in the fleet (heartbeats in Redis) when last read; 0 unknown.",
                  (uint64_t)atomic_load(&metrics.fleet_agents));
    render_simple(b, "spoa_ratelimit_fleet_agents_max", "gauge",
                  "The N of [fallback] share = auto: the largest fleet_agents over the last 60 s, "
                  "kept while Redis is down; 0 unknown.",
                  (uint64_t)atomic_load(&metrics.fleet_agents_max));
    render_simple(b, "spoa_ratelimit_global_configured", "gauge",
                  "1 when a [global] section shares scope = global rules across regions.",
                  (uint64_t)atomic_load(&metrics.global_configured));
    render_simple(b, "spoa_ratelimit_global_up", "gauge",
                  "1 when the connection to the global Redis is up ([global]); 0 down or not "
                  "configured.",
                  (uint64_t)atomic_load(&metrics.global_up));
    render_simple(b, "spoa_ratelimit_global_claimer", "gauge",
                  "1 when this agent holds its region's lease lock: it claims for the region.",
                  (uint64_t)atomic_load(&metrics.global_claimer));
    render_simple(b, "spoa_ratelimit_regions", "gauge",
                  "Regions seen in the global Redis over the last minute (the backstop share is "
                  "1/regions); 0 unknown.",
                  (uint64_t)atomic_load(&metrics.regions));
    render_simple(b, "spoa_ratelimit_global_calls_total", "counter",
                  "Calls (pipelined batches) this agent sent the global Redis as its region's "
                  "claimer.",
                  metrics_ld(&metrics.global_calls));
    render_simple(b, "spoa_ratelimit_global_claims_total", "counter",
                  "Operations in those calls: one per key and round (a claim, a report, a "
                  "give-back).",
                  metrics_ld(&metrics.global_claims));
    render_simple(b, "spoa_ratelimit_global_failures_total", "counter",
                  "Operations on the global Redis that failed (down, cut off, an error).",
                  metrics_ld(&metrics.global_failed));
    render_simple(b, "spoa_ratelimit_global_state_lost_total", "counter",
                  "Times this agent found the global buckets in the global Redis vanished or "
                  "replaced (its epoch key): restarted empty, flushed, or failed over to a "
                  "replica without them.",
                  metrics_ld(&metrics.global_state_lost));
    render_simple(b, "spoa_ratelimit_global_tokens_granted_total", "counter",
                  "Tokens the global bucket granted this region (deposited in its Redis).",
                  metrics_ld(&metrics.global_granted));
    render_simple(b, "spoa_ratelimit_global_tokens_returned_total", "counter",
                  "Tokens this region gave back to the global bucket.",
                  metrics_ld(&metrics.global_returned));
    render_simple(b, "spoa_ratelimit_global_backstop_tokens_total", "counter",
                  "Backstop tokens (1/regions of the rule) deposited while the global Redis was "
                  "unreachable: admissions beyond the global bucket's count.",
                  metrics_ld(&metrics.global_backstop));
    render_simple(b, "spoa_ratelimit_global_tokens_forfeited_total", "counter",
                  "Tokens the region dropped unspent: a global lease about to end, a give-back "
                  "whose call failed (under-admission).",
                  metrics_ld(&metrics.global_forfeited));
    render_hist(b, "spoa_ratelimit_redis_latency_seconds", "Redis round trip per command batch.",
                &metrics.redis_latency);
}

/* The SPOP side: decision latency, connections, frames in, ACKs out, and
 * the connections closed on a protocol error. */
static void render_spop(struct strbuf *b)
{
    static const char *const frame_names[] = {
        [METRICS_FRAME_OTHER] = "other",
        [METRICS_FRAME_HELLO] = "haproxy_hello",
        [METRICS_FRAME_DISCONNECT] = "haproxy_disconnect",
        [METRICS_FRAME_NOTIFY] = "notify",
    };
    _Static_assert(sizeof(frame_names) / sizeof(frame_names[0]) == METRICS_FRAMES,
                   "a name for every enum metrics_frame");

    render_hist(b, "spoa_ratelimit_decision_seconds", "NOTIFY read to ACK written.",
                &metrics.decision);
    render_simple(b, "spoa_ratelimit_connections", "gauge", "Open SPOP connections.",
                  (uint64_t)atomic_load(&metrics.connections));
    render_simple(b, "spoa_ratelimit_connections_accepted_total", "counter",
                  "SPOP connections accepted.", metrics_ld(&metrics.connections_total));

    strbuf_printf(b, "# HELP spoa_ratelimit_frames_total SPOP frames received by type.\n"
                     "# TYPE spoa_ratelimit_frames_total counter\n");
    for (unsigned i = 0; i < METRICS_FRAMES; i++)
        strbuf_printf(b, "spoa_ratelimit_frames_total{type=\"%s\"} %llu\n", frame_names[i],
                      (unsigned long long)metrics_ld(&metrics.frames_in[i]));
    render_simple(b, "spoa_ratelimit_acks_total", "counter", "ACK frames sent.",
                  metrics_ld(&metrics.acks));
    render_simple(b, "spoa_ratelimit_acks_truncated_total", "counter",
                  "ACKs that carried only blocked and retry_after: the negotiated frame size "
                  "had no room for the other variables.",
                  metrics_ld(&metrics.acks_truncated));
    render_simple(b, "spoa_ratelimit_match_limited_total", "counter",
                  "Match regexes stopped by a backtracking or memory limit before they "
                  "could answer: the rule did not apply to that request.",
                  metrics_ld(&metrics.match_limited));
    /* Status codes 1..13 in order, then 99 ("unknown"), which is counted in [0]. */
    strbuf_printf(b, "# HELP spoa_ratelimit_protocol_errors_total Connections closed with an "
                     "AGENT-DISCONNECT, by SPOE status code.\n"
                     "# TYPE spoa_ratelimit_protocol_errors_total counter\n");
    for (unsigned i = 1; i < METRICS_STATUSES; i++)
        strbuf_printf(b, "spoa_ratelimit_protocol_errors_total{status=\"%u\"} %llu\n", i,
                      (unsigned long long)metrics_ld(&metrics.protocol_errors[i]));
    strbuf_printf(b, "spoa_ratelimit_protocol_errors_total{status=\"99\"} %llu\n",
                  (unsigned long long)metrics_ld(&metrics.protocol_errors[0]));
}

/* What the listeners refused or cut: accept pauses for want of fds,
 * connections refused by an allow list or a connection cap, timeouts. */
static void render_protection(struct strbuf *b)
{
    static const char *const listeners[] = {[METRICS_SPOP] = "spop", [METRICS_STATS] = "stats"};
    static const char *const reasons[] = {
        [METRICS_REFUSED_ALLOW] = "allow",
        [METRICS_REFUSED_MAX_CONNS] = "max_connections",
        [METRICS_REFUSED_HANDSHAKE_EVICTED] = "handshake_evicted",
        [METRICS_REFUSED_IDLE_EVICTED] = "idle_evicted",
    };
    static const char *const timeouts[][2] = {
        [METRICS_TIMEOUT_HELLO] = {"spop", "hello"},
        [METRICS_TIMEOUT_DRAIN] = {"spop", "drain"},
        [METRICS_TIMEOUT_STATS] = {"stats", "request"},
    };
    _Static_assert(sizeof(listeners) / sizeof(listeners[0]) == METRICS_LISTENERS,
                   "a name for every enum metrics_listener");
    _Static_assert(sizeof(reasons) / sizeof(reasons[0]) == METRICS_REFUSALS,
                   "a name for every enum metrics_refusal");
    _Static_assert(sizeof(timeouts) / sizeof(timeouts[0]) == METRICS_TIMEOUTS,
                   "a listener and phase for every enum metrics_timeout");

    strbuf_printf(b, "# HELP spoa_ratelimit_accept_pauses_total Times a listener stopped accepting "
                     "for a back-off because the process was out of file descriptors or memory.\n"
                     "# TYPE spoa_ratelimit_accept_pauses_total counter\n");
    for (unsigned l = 0; l < METRICS_LISTENERS; l++)
        strbuf_printf(b, "spoa_ratelimit_accept_pauses_total{listener=\"%s\"} %llu\n", listeners[l],
                      (unsigned long long)metrics_ld(&metrics.accept_pauses[l]));
    strbuf_printf(b, "# HELP spoa_ratelimit_connections_refused_total Connections closed at accept "
                     "(peer not in the allow list, or the listener's connection cap reached with "
                     "nothing to evict), or closed before their handshake ended to admit a newer "
                     "one (handshake_evicted), or idle past idle_grace and closed to admit a "
                     "newer one (idle_evicted).\n"
                     "# TYPE spoa_ratelimit_connections_refused_total counter\n");
    for (unsigned l = 0; l < METRICS_LISTENERS; l++)
        for (unsigned r = 0; r < METRICS_REFUSALS; r++)
            strbuf_printf(b,
                          "spoa_ratelimit_connections_refused_total{listener=\"%s\",reason=\"%s\"} "
                          "%llu\n",
                          listeners[l], reasons[r],
                          (unsigned long long)metrics_ld(&metrics.refused[l][r]));
    strbuf_printf(b, "# HELP spoa_ratelimit_connection_timeouts_total Connections closed by a "
                     "timeout: no HELLO, answers owed and not taken (half-closed, or not reading; "
                     "phase drain), slow stats request.\n"
                     "# TYPE spoa_ratelimit_connection_timeouts_total counter\n");
    for (unsigned t = 0; t < METRICS_TIMEOUTS; t++)
        strbuf_printf(b,
                      "spoa_ratelimit_connection_timeouts_total{listener=\"%s\",phase=\"%s\"} "
                      "%llu\n",
                      timeouts[t][0], timeouts[t][1],
                      (unsigned long long)metrics_ld(&metrics.timeouts[t]));
    render_simple(b, "spoa_ratelimit_notify_read_pauses_total", "counter",
                  "Times an SPOP connection had the most NOTIFYs waiting for Redis allowed: "
                  "its frames were left unread until some were answered.",
                  metrics_ld(&metrics.notify_read_pauses));
    render_simple(b, "spoa_ratelimit_notifies_waiting", "gauge",
                  "NOTIFYs waiting for Redis, over all connections.",
                  (uint64_t)atomic_load(&metrics.notifies_waiting));
}

static void render_lease(struct strbuf *b)
{
    render_simple(b, "spoa_ratelimit_lease_claims_total", "counter",
                  "Lease claims and top-ups sent to Redis.", metrics_ld(&metrics.lease_claims));
    render_simple(b, "spoa_ratelimit_lease_exact_calls_total", "counter",
                  "Single decisions of cold keys sent to Redis as exact calls (nothing leased).",
                  metrics_ld(&metrics.lease_exact_calls));
    render_simple(b, "spoa_ratelimit_redis_first_sets_total", "counter",
                  "Cold decisions on keys new to Redis made by one plain SET NX (no script).",
                  metrics_ld(&metrics.redis_first_sets));
    render_simple(b, "spoa_ratelimit_lease_tokens_granted_total", "counter",
                  "Tokens granted to this agent by Redis.",
                  metrics_ld(&metrics.lease_tokens_granted));
    render_simple(b, "spoa_ratelimit_lease_tokens_returned_total", "counter",
                  "Unspent leased tokens given back to Redis.",
                  metrics_ld(&metrics.lease_tokens_returned));
    render_simple(b, "spoa_ratelimit_lease_local_decisions_total", "counter",
                  "Decisions answered from a local lease without Redis.",
                  metrics_ld(&metrics.lease_local_decisions));
    render_simple(b, "spoa_ratelimit_lease_negative_hits_total", "counter",
                  "Decisions answered blocked from the local negative cache.",
                  metrics_ld(&metrics.lease_negative_hits));
    render_simple(b, "spoa_ratelimit_lease_waiters_total", "counter",
                  "Decisions that waited for a claim in flight for their key.",
                  metrics_ld(&metrics.lease_waiters));
    render_simple(b, "spoa_ratelimit_lease_keys", "gauge", "Keys with a local lease record.",
                  (uint64_t)atomic_load(&metrics.lease_keys));
    render_simple(b, "spoa_ratelimit_lease_active_keys", "gauge",
                  "Lease records the last tick walked: seen since the tick before, or holding "
                  "tokens.",
                  (uint64_t)atomic_load(&metrics.lease_active_keys));
    render_simple(b, "spoa_ratelimit_lease_rate_claims_total", "counter",
                  "Claims of rate leases (warm keys): grants, renewals, and the calls of "
                  "requests their local bucket could not serve.",
                  metrics_ld(&metrics.lease_rate_claims));
    render_simple(b, "spoa_ratelimit_lease_rate_keys", "gauge",
                  "Keys holding a rate lease here (a share of the rate, refilled locally).",
                  (uint64_t)atomic_load(&metrics.lease_rate_keys));
}

static const char *build_version = "unknown";

void metrics_set_version(const char *version)
{
    build_version = version;
}

void metrics_config_loaded(uint64_t hash, uint64_t unix_s)
{
    atomic_store(&metrics.config_hash, hash);
    atomic_store(&metrics.last_reload_unix, unix_s);
}

/* Silent misconfigurations (mismatch.h). */
static void render_mismatches(struct strbuf *b)
{
    render_simple(b, "spoa_ratelimit_unknown_messages_total", "counter",
                  "NOTIFY messages whose name no rule reads (a misspelt message = ?).",
                  mismatch_total(MISMATCH_MESSAGE));
    render_simple(b, "spoa_ratelimit_missing_args_total", "counter",
                  "Rules skipped because an argument they key or match on was not sent at all "
                  "(a misspelt key = or match = ?).",
                  mismatch_total(MISMATCH_ARG));
    render_simple(b, "spoa_ratelimit_unmatched_requests_total", "counter",
                  "NOTIFYs to which no rule applied (passed unlimited).",
                  mismatch_total(MISMATCH_NO_RULE));
    render_simple(b, "spoa_ratelimit_rules_without_key", "gauge",
                  "Rules with no key: one bucket shared by every client.",
                  metrics_ld(&metrics.rules_without_key));
}

/* The warning registry (core/warning.h): every kind, 0 included, so that an
 * alert sees the series before the first warning and after it clears. */
static void render_warnings(struct strbuf *b)
{
    strbuf_printf(b, "# HELP spoa_ratelimit_warning 1 while a warning of this kind is active: "
                     "the agent limits less than configured, or not at all (the log, the "
                     "status page and /status.json say what to change).\n"
                     "# TYPE spoa_ratelimit_warning gauge\n");
    for (int k = 0; k < WARNING_KINDS; k++)
        strbuf_printf(b, "spoa_ratelimit_warning{kind=\"%s\"} %d\n", warning_kind_names[k],
                      warning_active((enum warning_kind)k));
}

/* What runs: the build, the configuration in force and since when. */
static void render_identity(struct strbuf *b)
{
    strbuf_printf(b,
                  "# HELP spoa_ratelimit_build_info The agent's version (value 1).\n"
                  "# TYPE spoa_ratelimit_build_info gauge\n"
                  "spoa_ratelimit_build_info{version=\"%s\"} 1\n",
                  build_version);
    /* 53 bits: a Prometheus sample is a double, and must stay exact */
    render_simple(b, "spoa_ratelimit_config_hash", "gauge",
                  "Hash of the effective configuration in force (--check --print): it "
                  "changes when what the rules mean changes.",
                  metrics_ld(&metrics.config_hash) & ((1ULL << 53) - 1));
    render_simple(b, "spoa_ratelimit_last_reload_seconds", "gauge",
                  "Unix time the configuration in force was loaded (start or SIGHUP).",
                  metrics_ld(&metrics.last_reload_unix));
}

/* [rules] source = redis: the version in force, and how versions fared. */
static void render_rules_redis(struct strbuf *b)
{
    render_simple(b, "spoa_ratelimit_rules_version", "gauge",
                  "Version of the rule set from Redis in force (0: none, the file's rules).",
                  metrics_ld(&metrics.rules_version));
    render_simple(b, "spoa_ratelimit_rules_current_version", "gauge",
                  "The fleet's current rule set version in Redis, as last read (0: none).",
                  metrics_ld(&metrics.rules_current_version));
    strbuf_printf(b,
                  "# HELP spoa_ratelimit_rules_applied_total Rule set versions from Redis "
                  "applied (ok) or refused by validation (rejected, each version once).\n"
                  "# TYPE spoa_ratelimit_rules_applied_total counter\n"
                  "spoa_ratelimit_rules_applied_total{result=\"ok\"} %llu\n"
                  "spoa_ratelimit_rules_applied_total{result=\"rejected\"} %llu\n",
                  (unsigned long long)metrics_ld(&metrics.rules_applied_ok),
                  (unsigned long long)metrics_ld(&metrics.rules_applied_rejected));
    render_simple(b, "spoa_ratelimit_rules_cached", "gauge",
                  "1 while the agent runs on the rules of its cache file (Redis unread since "
                  "start).",
                  (uint64_t)atomic_load(&metrics.rules_cached));
}

char *metrics_render(size_t *len)
{
    struct strbuf b = {0};

    metrics_local_flush(); /* a worker that serves the scrape itself (workers = 1) */

    render_identity(&b);
    render_warnings(&b);
    render_mismatches(&b);
    render_rules(&b);
    render_redis(&b);
    render_spop(&b);
    render_protection(&b);
    render_lease(&b);
    render_simple(&b, "spoa_ratelimit_buckets", "gauge",
                  "In-memory buckets (standalone and fallback).", metrics_ld(&metrics.buckets));
    render_simple(&b, "spoa_ratelimit_evictions_total", "counter",
                  "Buckets and lease records dropped, least recently used first, to stay within "
                  "[agent] max_entries.",
                  metrics_ld(&metrics.evictions));
    render_simple(&b, "spoa_ratelimit_reloads_total", "counter", "Successful config reloads.",
                  metrics_ld(&metrics.reloads));
    render_simple(&b, "spoa_ratelimit_reload_failures_total", "counter",
                  "Reloads refused because the new file was invalid.",
                  metrics_ld(&metrics.reload_failures));
    render_rules_redis(&b);
    return strbuf_finish(&b, len);
}

void metrics_minute_tick(double share, void (*cb)(const char *rule, int shadow, uint64_t blocks,
                                                  uint64_t decisions))
{
    for (struct metrics_rule *r = atomic_load(&rules_head); r; r = r->next) {
        /* the decisions and blocks since the last tick, from the totals
         * (one atomic add per decision fewer than counting them apart) */
        uint64_t blocks = metrics_ld(&r->blocked), would = metrics_ld(&r->would_block);
        uint64_t decisions = metrics_ld(&r->allowed) + blocks + would;
        uint64_t d = decisions - r->minute_decisions, bl = blocks - r->minute_blocks;
        uint64_t wb = would - r->minute_would_blocks;
        r->minute_decisions = decisions;
        r->minute_blocks = blocks;
        r->minute_would_blocks = would;
        if (d > 0 && (double)bl > share * (double)d)
            cb(r->name, 0, bl, d);
        if (d > 0 && (double)wb > share * (double)d)
            cb(r->name, 1, wb, d);
    }
}

struct metrics_rule *metrics_rules(void)
{
    return atomic_load(&rules_head);
}

double metrics_hist_bound_s(unsigned i)
{
    if (i >= METRICS_HIST_BUCKETS - 1)
        i = METRICS_HIST_BUCKETS - 2; /* +Inf: its lower bound, the largest finite one */
    return (double)hist_bounds_ns[i] / 1e9;
}

static pthread_mutex_t disconnect_lock = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_disconnect last_disconnect;

void metrics_note_disconnect(int status, const char *message, size_t len, const char *peer)
{
    struct metrics_disconnect d = {.status = status, .unix_s = (uint64_t)time(NULL)};

    if (len >= sizeof(d.message))
        len = sizeof(d.message) - 1;
    for (size_t i = 0; i < len; i++)
        d.message[i] = message[i] >= 0x20 && message[i] < 0x7f ? message[i] : '?';
    snprintf(d.peer, sizeof(d.peer), "%s", peer ? peer : "");
    pthread_mutex_lock(&disconnect_lock);
    last_disconnect = d;
    pthread_mutex_unlock(&disconnect_lock);
}

int metrics_last_disconnect(struct metrics_disconnect *out)
{
    pthread_mutex_lock(&disconnect_lock);
    *out = last_disconnect;
    pthread_mutex_unlock(&disconnect_lock);
    return out->unix_s != 0;
}
