/* SPDX-License-Identifier: Apache-2.0 */
/* keyapi.c - GET /key and POST /reset: the query names one client, the
 * limiter reads or clears it (limiter_inspect, limiter_reset), and this file
 * renders the answer as JSON (jansson). */
#include "keyapi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/json.h"
#include "core/util.h"
#include "httpd.h"
#include "limiter/limiter.h"
#include "rules/rules.h"

#define ARG_MAX 8192 /* a decoded query value: the request is at most 8 KiB */

/* ---- JSON values ------------------------------------------------------------- */

/* A C string as a JSON string, byte for byte (core/json.h: Latin-1). */
static json_t *jstr(const char *s)
{
    return json_latin1(s, strlen(s));
}

/* A number with the value these pages printed before jansson: rounded to
 * digits significant digits (%.*g), or to a whole number when digits is 0
 * (%.0f). Whole, it is written as an integer (a real would get ".0"); else
 * as a real, which jansson writes with %.17g, so 2.00008 reads
 * 2.0000800000000001: the same double, and 17 digits keep Redis' t exact.
 * Not finite: null. */
static json_t *jnum(double v, int digits)
{
    char s[400]; /* %.0f of DBL_MAX: 309 digits */

    if (!isfinite(v))
        return json_null();
    if (digits)
        snprintf(s, sizeof(s), "%.*g", digits, v);
    else
        snprintf(s, sizeof(s), "%.0f", v);
    double r = strtod(s, NULL);
    if (r == floor(r) && fabs(r) < 9e18)
        return json_integer((json_int_t)r);
    return json_real(r);
}

/* Counts, limits and times: far below 2^63. */
static json_t *juint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static uint64_t ms_up(uint64_t us)
{
    return (us + 999) / 1000;
}

/* An object built field after field, in the order of the answer: a
 * failure (out of memory: o or a value NULL) is remembered, and finish()
 * then gives NULL. */
struct jobj {
    json_t *o;
    int failed;
};

static void put(struct jobj *j, const char *name, json_t *v)
{
    if (!j->o) {
        json_decref(v);
        j->failed = 1;
    } else if (!v || json_object_set_new(j->o, name, v) < 0) { /* v is freed */
        j->failed = 1;
    }
}

static json_t *finish(struct jobj *j)
{
    if (j->failed) {
        json_decref(j->o);
        return NULL;
    }
    return j->o;
}

/* ---- answers ------------------------------------------------------------------ */

/* Answer req with o (taken over; NULL: out of memory, a 500). */
static void reply_json(struct httpd_req *req, const char *status, json_t *o)
{
    size_t len;
    char *body = json_body(o, &len);

    if (!body)
        httpd_reply(req, "500 Internal Server Error", "text/plain", NULL, NULL, 0);
    else
        httpd_reply(req, status, "application/json", NULL, body, len);
}

static void reply_error(struct httpd_req *req, const char *status, const char *why)
{
    reply_json(req, status, json_pack("{s:o}", "error", jstr(why)));
}

/* The client, as both answers begin. */
static json_t *head(const struct limiter_who *w)
{
    const struct cfg_rule *r = w->rule;
    int sw = bucket_windowed(r->algorithm);
    struct jobj j = {json_object(), 0};

    put(&j, "rule", jstr(r->name));
    put(&j, "key", json_latin1(w->key, w->keylen));
    put(&j, "client_key", json_latin1(w->client_key, w->client_keylen));
    put(&j, "mode", json_string(w->redis ? "redis" : "standalone"));
    if (r->algorithm == BUCKET_CONCURRENCY) { /* slots in flight: no rate, no cost */
        put(&j, "algorithm", json_string(bucket_algorithm_names[BUCKET_CONCURRENCY]));
        put(&j, "limit", juint(r->cc_limit));
        put(&j, "max_hold_ms", juint(r->max_hold_ms));
        put(&j, "release", jstr(r->release));
        if (w->redis_keylen)
            put(&j, "redis_key", json_latin1(w->redis_key, w->redis_keylen));
        return finish(&j);
    }
    put(&j, "algorithm", json_string(bucket_algorithm_names[r->algorithm]));
    if (r->scope == SCOPE_GLOBAL) /* one quota across regions (doc/design.md, "Regions") */
        put(&j, "scope", json_string("global"));
    put(&j, "limit", juint(w->params.limit));
    put(&j, "period_ms", juint(w->params.period_us / 1000));
    if (r->algorithm == BUCKET_FIXED_WINDOW)
        put(&j, "window_offset_ms", juint(w->params.offset_us / 1000));
    if (!sw)
        put(&j, "burst", juint(w->params.burst));
    /* what one request takes: a fixed cost, or an arg and its ceiling */
    if (r->cost_arg) {
        put(&j, "cost_arg", jstr(r->cost_arg));
        put(&j, "max_cost", juint(r->max_cost));
    } else {
        put(&j, "cost", juint(r->cost));
    }
    put(&j, "block_for_ms", juint(r->block_for_ms));
    if (w->redis_keylen)
        put(&j, "redis_key", json_latin1(w->redis_key, w->redis_keylen));
    return finish(&j);
}

/* An in-memory bucket, or null when there is none (a request finds it full). */
static json_t *bucket(int found, const struct bucket_state *st, const struct bucket_params *p)
{
    if (!found)
        return json_null();
    struct jobj j = {json_object(), 0};
    if (p->algorithm == BUCKET_FIXED_WINDOW) {
        /* the window (Unix ms: it ends when the quota resets) and its count */
        uint64_t start = st->window_start_us / 1000;
        put(&j, "window_start_ms", juint(start));
        put(&j, "window_end_ms", juint(start + p->period_us / 1000));
        put(&j, "count", jnum(st->cur, 6));
    } else if (p->algorithm == BUCKET_SLIDING_WINDOW) {
        put(&j, "previous", jnum(st->prev, 6));
        put(&j, "current", jnum(st->cur, 6));
        put(&j, "estimate", jnum(st->level, 6));
    } else {
        put(&j, "tokens", jnum(st->level, 6));
        put(&j, "burst", juint(p->burst));
    }
    put(&j, "limit", juint(p->limit));
    put(&j, "remaining", juint(st->remaining));
    put(&j, "blocked", json_boolean(st->blocked));
    put(&j, "retry_after_ms", juint(ms_up(st->retry_us)));
    put(&j, "reset_ms", juint(ms_up(st->reset_us)));
    put(&j, "blocked_left_ms", juint(ms_up(st->blocked_left_us)));
    return finish(&j);
}

/* This agent's lease entry for the key, or null. */
static json_t *lease(int found, const struct lease_state *st)
{
    static const char *const kinds[] = {
        [LEASE_JOB_CLAIM] = "claim", [LEASE_JOB_RETURN] = "return", [LEASE_JOB_EXACT] = "exact"};

    if (!found)
        return json_null();
    struct jobj j = {json_object(), 0};
    put(&j, "tokens", juint(st->tokens));
    put(&j, "unreported", juint(st->unreported));
    put(&j, "voided", json_boolean(st->voided));
    put(&j, "lease_left_ms", juint(st->lease_left_us / 1000));
    put(&j, "blocked", json_boolean(st->blocked_left_us > 0));
    put(&j, "blocked_left_ms", juint(ms_up(st->blocked_left_us)));
    put(&j, "in_flight",
        st->inflight >= 0 && st->inflight <= LEASE_JOB_EXACT ? json_string(kinds[st->inflight])
                                                             : json_null());
    put(&j, "waiting", json_integer(st->waiting));
    put(&j, "demand", jnum(st->demand, 3));
    put(&j, "rate_share_per_s", jnum(st->share_per_s, 6));
    put(&j, "slice", juint(st->slice));
    if (!st->known) {
        put(&j, "redis_last_said", json_null());
    } else {
        struct jobj said = {json_object(), 0};
        put(&said, "tokens", jnum(st->bucket_tokens, 6));
        put(&said, "held_by_others", juint(st->others_held));
        put(&said, "other_holders", juint(st->others));
        put(&said, "age_ms", juint(st->reply_age_us / 1000));
        put(&j, "redis_last_said", finish(&said));
    }
    return finish(&j);
}

static json_t *redis_lease(const struct limiter_redis_lease *x, int sw)
{
    struct jobj j = {json_object(), 0};

    put(&j, "agent", jstr(x->agent));
    put(&j, "held", jnum(x->held, 6));
    put(&j, "this_agent", json_boolean(x->this_agent));
    if (sw) {
        put(&j, "window", jnum(x->window, 17));
    } else {
        if (x->share_per_s > 0)
            put(&j, "share_per_s", jnum(x->share_per_s, 6));
        put(&j, "expires_in_ms", jnum(x->expires_in_ms, 0));
    }
    put(&j, "live", json_boolean(x->live));
    return finish(&j);
}

/* The Redis bucket: as its hash says, and as a claim would find it now. */
static json_t *redis(const struct limiter_redis_state *st, int sw, int fixed)
{
    if (st->error)
        return json_pack("{s:o}", "error", jstr(st->error));
    struct jobj j = {json_object(), 0};
    json_t *leases = json_array();

    for (size_t i = 0; leases && i < st->nleases; i++)
        if (json_array_append_new(leases, redis_lease(&st->leases[i], sw)) < 0)
            j.failed = 1;
    put(&j, "exists", json_boolean(st->exists));
    put(&j, "ttl_ms", json_integer(st->ttl_ms));
    if (sw) {
        put(&j, "window", jnum(st->window, 17));
        put(&j, "window_left_ms", jnum(st->window_left_ms, 0));
        put(&j, "current", jnum(st->current, 6));
        put(&j, "previous", jnum(st->previous, 6));
        put(&j, "leases", leases);
        put(&j, "estimate", jnum(st->estimate, 6));
        if (fixed) { /* the window, in Unix ms of Redis' clock */
            put(&j, "window_start_ms", jnum(st->window_start_ms, 0));
            put(&j, "window_end_ms", jnum(st->window_end_ms, 0));
            put(&j, "count", jnum(st->current, 6));
        }
    } else {
        put(&j, "leases", leases);
        put(&j, "t", jnum(st->t, 17));
        put(&j, "refilled_ms_ago", jnum(st->refilled_ms_ago, 0));
        put(&j, "tokens_now", jnum(st->tokens_now, 6));
    }
    put(&j, "remaining", jnum(st->remaining, 0));
    put(&j, "blocked", json_boolean(st->blocked));
    put(&j, "retry_after_ms", jnum(st->retry_after_ms, 0));
    put(&j, "reset_ms", jnum(st->reset_ms, 0));
    put(&j, "blocked_left_ms", jnum(st->blocked_left_ms, 0));
    put(&j, "held", jnum(st->held, 6));
    put(&j, "holders", json_integer(st->holders));
    return finish(&j);
}

/* ---- which client --------------------------------------------------------- */

/* Fill c from the query (key, rate and burst: ARG_MAX, 64 and 32 bytes for
 * the decoded values): NULL, or an HTTP status line with why. */
static const char *find_client(const struct ruleset *rs, const char *query,
                               struct limiter_client *c, char *key, char *rate, char *burst,
                               const char **why)
{
    long n = util_query_param(query, "rule", key, ARG_MAX); /* key: scratch until read */
    const struct cfg_rule *r;

    if (n == UTIL_QUERY_ABSENT || n == 0) {
        *why = "rule= is required";
        return "400 Bad Request";
    }
    if (n == UTIL_QUERY_BAD) {
        *why = "rule= is malformed";
        return "400 Bad Request";
    }
    for (c->rule = 0; c->rule < rs->cfg->nrules; c->rule++)
        if (strlen(rs->cfg->rules[c->rule].name) == (size_t)n &&
            memcmp(rs->cfg->rules[c->rule].name, key, (size_t)n) == 0)
            break;
    if (c->rule == rs->cfg->nrules) {
        *why = "no such rule";
        return "404 Not Found";
    }
    r = &rs->cfg->rules[c->rule];
    n = util_query_param(query, "key", key, ARG_MAX);
    if (n == UTIL_QUERY_BAD) {
        *why = "key= is malformed or too long";
        return "400 Bad Request";
    }
    /* A keyed rule never applies with an empty key; a rule without key has
     * one bucket for everyone, under the empty key. */
    if (r->nkeys && n <= 0) {
        *why = "key= is required (the values of the rule's key args, joined with '|')";
        return "400 Bad Request";
    }
    if (!r->nkeys && n > 0) {
        *why = "this rule has no key: one bucket for every client (leave key= out)";
        return "400 Bad Request";
    }
    c->key = key;
    c->keylen = n > 0 ? (size_t)n : 0;
    /* A rule that takes its limits per request from args (rate = arg:NAME,
     * burst = arg:NAME): the query names them as the request's args do. */
    long nr = util_query_param(query, "limit", rate, 64);
    long nb = util_query_param(query, "burst", burst, 32);
    if (!config_rule_per_request(r) && (nr != UTIL_QUERY_ABSENT || nb != UTIL_QUERY_ABSENT)) {
        *why = "limit= and burst= name a client of a rule with per-client limits "
               "(rate = arg:NAME); this rule has fixed limits";
        return "400 Bad Request";
    }
    c->rate = r->rate_arg && nr >= 0 ? rate : NULL;
    c->burst = r->burst_arg && nb >= 0 ? burst : NULL;
    return NULL;
}

/* What the limiter could not look at, as an HTTP status line and why. */
static const char *limiter_status(int err, const char **why)
{
    switch (err) {
    case 0:
        return NULL;
    case LIMITER_BAD_RATE:
        *why = "this rule takes its rate per client: give limit=N/DURATION as the map does";
        return "400 Bad Request";
    case LIMITER_BAD_BURST:
        *why = "this rule takes its burst per client: give burst=N";
        return "400 Bad Request";
    case LIMITER_KEY_LONG:
        *why = "key too long";
        return "400 Bad Request";
    default:
        *why = "out of memory";
        return "500 Internal Server Error";
    }
}

/* Find the client and start op on it: the answer comes from op's callback,
 * or at once here when the query or the client is wrong. */
static void start(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query,
                  int reset, limiter_inspect_cb *inspect_cb, limiter_reset_cb *reset_cb)
{
    char key[ARG_MAX], rate[64], burst[32];
    struct limiter_client c;
    const char *why, *status = find_client(rs, query, &c, key, rate, burst, &why);

    if (!status)
        status = limiter_status(reset ? limiter_reset(l, rs, &c, reset_cb, req)
                                      : limiter_inspect(l, rs, &c, inspect_cb, req),
                                &why);
    if (status)
        reply_error(req, status, why);
}

/* ---- GET /key ----------------------------------------------------------- */

/* A concurrency rule's slots: in this agent's table, and in Redis (or why
 * not); deadlines in ms from now (0: none held). */
static json_t *slots(const struct limiter_slots_state *s, int redis)
{
    struct jobj j = {json_object(), 0};

    put(&j, "local",
        json_pack("{s:o,s:o}", "held", juint(s->local_held), "earliest_deadline_ms",
                  juint(s->local_earliest_ms)));
    if (redis && s->redis_read)
        put(&j, "redis",
            json_pack("{s:o,s:o,s:o}", "held", juint(s->redis_held), "earliest_deadline_ms",
                      juint(s->redis_earliest_ms), "latest_deadline_ms",
                      juint(s->redis_latest_ms)));
    else if (redis)
        put(&j, "redis", json_pack("{s:o}", "error", jstr(s->redis_error ? s->redis_error : "")));
    return finish(&j);
}

/* A scope = global rule's key on its region's claimer (gclaim_key): what the
 * region holds of the global bucket; null on every other agent, or when the
 * claimer follows no such key (yet). */
static json_t *global(int found, const struct gclaim_key_state *g)
{
    if (!found)
        return json_null();
    struct jobj j = {json_object(), 0};
    put(&j, "gheld", juint(g->gheld));
    put(&j, "pool", juint(g->pool));
    put(&j, "deadline_ms", juint(g->deadline_ms));
    put(&j, "est", jnum(g->est, 3));
    put(&j, "backstop", json_boolean(g->backstop));
    return finish(&j);
}

static void on_state(void *arg, const struct limiter_key_state *st)
{
    const struct limiter_who *w = &st->who;
    struct jobj j = {head(w), 0};

    if (st->slots.concurrency) {
        put(&j, "slots", slots(&st->slots, w->redis));
        reply_json(arg, "200 OK", finish(&j));
        return;
    }

    if (!w->redis) {
        put(&j, "bucket", bucket(st->bucket_found, &st->bucket, &w->params));
    } else {
        put(&j, "lease", lease(st->lease_found, &st->lease));
        put(&j, "redis",
            redis(&st->redis, bucket_windowed(w->params.algorithm),
                  w->params.algorithm == BUCKET_FIXED_WINDOW));
    }
    put(&j, "backstop", bucket(st->backstop_found, &st->backstop, &w->backstop));
    if (w->rule->scope == SCOPE_GLOBAL && w->redis)
        put(&j, "global", global(st->global_found, &st->global));
    reply_json(arg, "200 OK", finish(&j));
}

void keyapi_get(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query)
{
    start(l, rs, req, query, 0, on_state, NULL);
}

/* ---- POST /reset -------------------------------------------------------- */

static void on_reset(void *arg, const struct limiter_reset_result *res)
{
    struct jobj j = {head(&res->who), 0};

    if (res->slots.concurrency) { /* every slot freed: what was held before */
        put(&j, "slots_freed", slots(&res->slots, res->who.redis));
        reply_json(arg, res->who.redis && !res->redis_reset ? "503 Service Unavailable" : "200 OK",
                   finish(&j));
        return;
    }

    if (!res->who.redis) {
        put(&j, "bucket_dropped", json_boolean(res->bucket_dropped));
    } else if (res->redis_reset) {
        put(&j, "redis",
            json_pack("{s:b,s:I,s:I,s:I,s:I}", "reset", 1, "remaining_before",
                      (json_int_t)res->remaining_before, "remaining", (json_int_t)res->remaining,
                      "held", (json_int_t)res->held, "holders", (json_int_t)res->holders));
        put(&j, "lease_cache_cleared", json_boolean(res->lease_cache_cleared));
        /* scope = global: the regional bucket is fed (its reset lifts a
         * block, makes no token); the global one is full again */
        if (res->global && res->global_reset)
            put(&j, "global",
                json_pack("{s:b,s:I,s:I,s:I}", "reset", 1, "remaining",
                          (json_int_t)res->global_remaining, "held",
                          (json_int_t)res->global_held, "holders",
                          (json_int_t)res->global_holders));
        else if (res->global)
            put(&j, "global",
                json_pack("{s:b,s:o}", "reset", 0, "error", jstr(res->global_error)));
    } else {
        put(&j, "redis", json_pack("{s:b,s:o}", "reset", 0, "error", jstr(res->redis_error)));
    }
    put(&j, "backstop_dropped", json_boolean(res->backstop_dropped));
    /* the fleet: agents in the heartbeat set, and those that dropped their
     * leases, negative caches and penalty boxes of the key (this one too) */
    if (!res->who.redis || res->redis_reset)
        put(&j, "fleet",
            json_pack("{s:I,s:I}", "agents", (json_int_t)res->fleet_agents, "confirmed",
                      (json_int_t)res->fleet_confirmed));
    reply_json(arg, res->who.redis && !res->redis_reset ? "503 Service Unavailable" : "200 OK",
               finish(&j));
}

void keyapi_reset(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query)
{
    start(l, rs, req, query, 1, NULL, on_reset);
}
