/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_admin.c - one client, for the operator: read its state (GET /key, a
 * status page) and clear it (POST /reset), standalone and with Redis (url,
 * Sentinel or Cluster: the store sends a key's reads and its reset to the
 * server of its slot), and its fail-open backstop bucket in both modes.
 *
 * Apart from the scripts, the one place that reads a Redis bucket's hash:
 * tb "t" (tokens) and "ts" (when refilled), sw "w" (window), "c" and "p"
 * (current and previous counts); per lease "h:AGENT" (held) and tb
 * "e:AGENT" (expiry, Redis us) and "q:AGENT" (a rate lease's share,
 * tokens per us), sw "w:AGENT" (its window). */
#include "limiter/limiter.h"
#include "limiter/limiter_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "core/util.h"
#include "rules/rules.h"
#include "limits/slots.h"
#include "metrics/metrics.h"
#include "store/script.h"
#include "store/store.h"

/* Room rules_client_key() may need past the key: the separator and
 * "N/PERIODms/BURST" of a rule with limits from args (or a hashed key). */
#define CLIENT_KEY_EXTRA 128
/* Room core_redis_key() needs past the client key: prefix, algorithm,
 * rule name, slot fence. */
#define REDIS_KEY_EXTRA 256

/* One inspect or reset under way: the client, and what Redis answered. */
struct op {
    struct limiter *l;
    struct limiter_parts parts;
    struct limiter_reset_result res; /* a reset waiting for the fleet's acks */
    struct ruleset *rs;              /* referenced: who.rule points into it */
    struct limiter_who who;
    limiter_inspect_cb *inspect_cb;
    limiter_reset_cb *reset_cb;
    void *arg;
    /* inspect with Redis: three reads about the key */
    int pending;
    const char *err; /* the first failure */
    char errbuf[160];
    size_t nstr; /* HGETALL: field, value, field, value... copied */
    char **str;
    struct limiter_redis_lease *leases; /* room for one per field pair */
    int64_t now_us;                     /* Redis TIME */
    int64_t pttl_ms;
    char buf[]; /* the key, the client key, the Redis key */
};

static void op_free(struct op *o)
{
    for (size_t i = 0; i < o->nstr; i++)
        free(o->str[i]);
    free(o->str);
    free(o->leases);
    ruleset_unref(o->rs);
    free(o);
}

/* The client c names, as decisions see it, to be answered through one of
 * the callbacks; NULL with a LIMITER_* error. */
static struct op *op_new(struct limiter *l, struct ruleset *rs, const struct limiter_client *c,
                         limiter_inspect_cb *inspect_cb, limiter_reset_cb *reset_cb, void *arg,
                         int *err)
{
    const struct cfg_rule *r = &rs->cfg->rules[c->rule];
    struct bucket_params p, b;
    int ret = rules_request_limits(rs, c->rule, c->rate, c->burst, &p, &b);

    if (ret < 0) {
        *err = ret == RULES_BAD_BURST ? LIMITER_BAD_BURST : LIMITER_BAD_RATE;
        return NULL;
    }
    size_t ccap = c->keylen + CLIENT_KEY_EXTRA;
    size_t rcap = limiter_redis(l) ? ccap + REDIS_KEY_EXTRA : 0;
    struct op *o = calloc(1, sizeof(*o) + c->keylen + 1 + ccap + rcap);
    if (!o) {
        *err = LIMITER_NOMEM;
        return NULL;
    }
    struct limiter_who *w = &o->who;
    char *key = o->buf, *ckey = key + c->keylen + 1, *rkey = ckey + ccap;
    if (c->keylen) /* (key may be NULL when empty) */
        memcpy(key, c->key, c->keylen);
    /* A rule with limits from args keys each client by its limits too. */
    int len = rules_client_key(key, c->keylen, config_rule_per_request(r) ? &p : NULL,
                               rs->cfg->max_key, ckey, ccap);
    /* a concurrency rule's slots go by its slot key (rules_slot_key) */
    char skey[RULES_SLOT_KEY_MAX + 1];
    int sk = r->algorithm == BUCKET_CONCURRENCY && len >= 0
                 ? rules_slot_key(ckey, (size_t)len, skey)
                 : len;
    const char *rk = r->algorithm == BUCKET_CONCURRENCY ? skey : ckey;
    size_t rlen = sk >= 0 && rcap ? core_redis_key(&l->core, r, rk, (size_t)sk, rkey, rcap) : 0;
    if (len < 0 || (rcap && !rlen)) {
        free(o);
        *err = LIMITER_KEY_LONG;
        return NULL;
    }
    *w = (struct limiter_who){r,    key, c->keylen, ckey,    (size_t)len, rcap ? rkey : NULL,
                              rlen, p,   b,         rcap > 0};
    limiter_parts(l, &o->parts);
    o->l = l;
    o->rs = rs;
    ruleset_ref(rs);
    o->inspect_cb = inspect_cb;
    o->reset_cb = reset_cb;
    o->arg = arg;
    return o;
}

/* A key for a log line: printable ASCII as is, other bytes, quotes and
 * backslashes as \xHH, at most 64 bytes of it (a line must stay one line). */
static const char *log_key(char *out, size_t cap, const char *s, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len && i < 64 && n + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
        else
            out[n++] = (char)c;
    }
    out[n] = '\0';
    return out;
}

/* ---- inspect: the Redis bucket --------------------------------------------- */

/* The value of field name in the hash (kind ':' agent when agent is not
 * NULL), or NULL. */
static const char *field(const struct op *o, const char *name, const char *agent)
{
    size_t n = strlen(name);

    for (size_t i = 0; i + 1 < o->nstr; i += 2) {
        const char *f = o->str[i];
        if (agent ? strncmp(f, name, n) == 0 && f[n] == ':' && strcmp(f + n + 1, agent) == 0
                  : strcmp(f, name) == 0)
            return o->str[i + 1];
    }
    return NULL;
}

static double fnum(const struct op *o, const char *name, const char *agent, double dflt)
{
    const char *v = field(o, name, agent);
    return v ? strtod(v, NULL) : dflt;
}

/* The leases in the hash, and (into st) the total held and the holders over
 * the live ones: unexpired at Redis' now (tb), of the current window (sw). */
static void redis_leases(struct op *o, int sw, double window, const char *self,
                         struct limiter_redis_state *st)
{
    double now = (double)o->now_us;

    st->leases = o->leases;
    for (size_t i = 0; i + 1 < o->nstr; i += 2) {
        if (strncmp(o->str[i], "h:", 2) != 0)
            continue;
        struct limiter_redis_lease *x = &o->leases[st->nleases++];
        x->agent = o->str[i] + 2;
        x->held = strtod(o->str[i + 1], NULL);
        x->this_agent = self && strcmp(x->agent, self) == 0;
        double when = fnum(o, sw ? "w" : "e", x->agent, 0);
        x->live = sw ? when == window : when > now;
        if (sw) {
            x->window = when;
        } else {
            double q = fnum(o, "q", x->agent, 0); /* tokens per us */
            x->share_per_s = q > 0 ? q * 1e6 : 0;
            x->expires_in_ms = (when - now) / 1000;
        }
        if (x->live) {
            st->held += x->held;
            st->holders++;
        }
    }
}

/* A sliding window, or a fixed one (sw_claim.lua's fixed mode: windows
 * shifted by the offset, nothing carried over from the previous one): the
 * hash's window w, counts c (this window) and p (the previous one) are a
 * struct bucket, which bucket_peek() sees at Redis' now as a take would. */
static void redis_sw(struct op *o, const char *self, struct limiter_redis_state *st)
{
    struct bucket_params q = o->who.params;
    int fixed = q.algorithm == BUCKET_FIXED_WINDOW;
    double period = (double)q.period_us, now = (double)o->now_us;
    double off = fixed && q.period_us ? (double)(q.offset_us % q.period_us) : 0;
    double cur_w = floor((now - off) / period), w = fnum(o, "w", NULL, cur_w);
    struct bucket b = {.tokens = fixed ? 0 : fnum(o, "p", NULL, 0),
                       .cur = fnum(o, "c", NULL, 0),
                       .ts_us = (uint64_t)(w * period + off)};
    struct bucket_state bs;

    q.block_us = 0; /* a running block is redis_block's; a peek starts none */
    bucket_peek(&b, &q, o->now_us, &bs);
    double left = (cur_w + 1) * period + off - now;
    st->window = cur_w;
    st->window_start_ms = (cur_w * period + off) / 1000;
    st->window_end_ms = st->window_start_ms + period / 1000;
    st->window_left_ms = left / 1000;
    st->current = bs.cur;
    st->previous = bs.prev;
    redis_leases(o, 1, cur_w, self, st);
    st->estimate = bs.level;
    st->remaining = (double)bs.remaining;
    st->blocked = bs.blocked;
    st->retry_after_ms = ceil((double)bs.retry_us / 1000);
    st->reset_ms = ceil((double)bs.reset_us / 1000);
}

static void redis_tb(struct op *o, const char *self, struct limiter_redis_state *st)
{
    const struct bucket_params *bp = &o->who.params;
    double burst = (double)bp->burst, now = (double)o->now_us;
    double tk = fnum(o, "t", NULL, burst), ts = fnum(o, "ts", NULL, now);

    redis_leases(o, 0, 0, self, st);
    /* the tokens leases hold are not the bucket's to refill into */
    double cap = burst - st->held;
    double now_t = fmin(cap, bucket_tb_tokens_at(bp, tk, (uint64_t)ts, o->now_us));
    st->t = tk;
    st->refilled_ms_ago = (now - ts) / 1000;
    st->tokens_now = now_t;
    st->remaining = now_t > 0 ? floor(now_t + 1e-9) : 0;
    st->blocked = now_t < 1;
    st->retry_after_ms = (double)bucket_tb_wait_ms(bp, 1 - now_t);
    st->reset_ms = (double)bucket_tb_wait_ms(bp, cap - now_t); /* if no held token is spent */
}

/* block_for: a running block (field bu, Redis time in us) denies whatever
 * the bucket holds, until its end, as the scripts do. */
static void redis_block(struct op *o, struct limiter_redis_state *st)
{
    double bu = fnum(o, "bu", NULL, 0), now = (double)o->now_us;

    if (!o->who.params.block_us || bu <= now)
        return;
    st->blocked_left_ms = ceil((bu - now) / 1000);
    st->blocked = 1;
    st->remaining = 0;
    st->retry_after_ms = st->blocked_left_ms;
    st->reset_ms = fmax(st->reset_ms, st->blocked_left_ms);
}

/* Standalone, or once the reads are in: the whole state, to the caller. */
static void inspect_done(struct op *o)
{
    const struct limiter_parts *parts = &o->parts;
    struct limiter_key_state st;
    const struct limiter_who *w = &o->who;
    uint64_t now = util_now_us();
    /* fixed windows count on the wall clock (bucket.h) */
    uint64_t at = w->params.algorithm == BUCKET_FIXED_WINDOW ? util_wall_us() : now;

    memset(&st, 0, sizeof(st));
    st.who = *w;
    if (!parts->store) {
        st.bucket_found = bucket_table_peek(parts->buckets, w->rule->name, w->client_key,
                                            w->client_keylen, &w->params, at, &st.bucket);
    } else {
        st.lease_found = lease_peek(parts->leases, w->redis_key, w->redis_keylen, now, &st.lease);
        if (o->err) {
            st.redis.error = o->err;
        } else {
            st.redis.exists = o->nstr > 0;
            st.redis.ttl_ms = o->pttl_ms;
            if (bucket_windowed(w->params.algorithm))
                redis_sw(o, store_agent_id(parts->store), &st.redis);
            else
                redis_tb(o, store_agent_id(parts->store), &st.redis);
            redis_block(o, &st.redis);
        }
    }
    /* scope = global: the key as the claimer follows it (after [redis] prefix) */
    size_t plen = o->l->core.prefix_len;
    struct gclaim_stats gs = {0};
    if (o->l->global)
        gclaim_stats(o->l->global, &gs);
    if (w->rule->scope == SCOPE_GLOBAL && gs.claimer && w->redis_keylen > plen)
        st.global_found =
            gclaim_key(o->l->global, w->redis_key + plen, w->redis_keylen - plen, &st.global) == 0;
    st.backstop_found = bucket_table_peek(parts->backstop, w->rule->name, w->client_key,
                                          w->client_keylen, &w->backstop, at, &st.backstop);
    o->inspect_cb(o->arg, &st);
    op_free(o);
}

static int read_failed(struct op *o, const struct store_result *res)
{
    if (res->status == STORE_OK)
        return 0;
    if (!o->err) {
        snprintf(o->errbuf, sizeof(o->errbuf), "%s",
                 res->err                    ? res->err
                 : res->status == STORE_DOWN ? "redis down"
                                             : "redis error");
        o->err = o->errbuf;
    }
    return 1;
}

static void read_done(struct op *o)
{
    if (--o->pending == 0)
        inspect_done(o);
}

/* A token bucket no lease was claimed on is a string (tb_exact.lua):
 * "1 t ts [bu]", read as the hash's fields t, ts and bu; or "2 t px", a new
 * key the agent wrote with a plain SET NX PX px (lua/README.md): its ts is
 * its creation, expiry - px, plus 1 ms as the scripts take it. The expiry is
 * Redis' TIME plus PTTL: both were read before this GET (sent after TYPE's
 * reply, on the same connection), so both are known here. */
static void on_string(void *arg, const struct store_result *res)
{
    struct op *o = arg;
    static const char *const names[] = {"t", "ts", "bu"};
    char *v[3] = {NULL, NULL, NULL};
    size_t nv = 0;

    if (!read_failed(o, res) && res->nstr == 1) {
        const char *s = res->str[0];
        if ((s[0] != '1' && s[0] != '2') || s[1] != ' ') {
            if (!o->err)
                o->err = "unknown bucket layout";
        } else {
            for (const char *p = s + 2; *p && nv < 3; nv++) {
                size_t len = strcspn(p, " ");
                v[nv] = strndup(p, len);
                p += len + (p[len] == ' ');
            }
        }
        if (s[0] == '2' && nv == 2 && v[1] && o->pttl_ms > 0) {
            char ts[32];
            long long px = strtoll(v[1], NULL, 10);
            snprintf(ts, sizeof(ts), "%lld",
                     ((long long)(o->now_us / 1000) + (long long)o->pttl_ms - px + 1) * 1000);
            free(v[1]);
            v[1] = strdup(ts);
        } else if (s[0] == '2' && nv > 0 && !o->err) {
            o->err = "unknown bucket layout";
        }
        o->str = calloc(2 * nv + 1, sizeof(*o->str));
        o->leases = calloc(nv + 1, sizeof(*o->leases));
        size_t i = 0;
        for (; i < nv && o->str && o->leases && v[i] && (o->str[2 * i] = strdup(names[i])); i++) {
            o->str[2 * i + 1] = v[i];
            o->nstr = 2 * i + 2;
        }
        if (i < nv && !o->err)
            o->err = "out of memory";
        for (; i < nv; i++)
            free(v[i]);
    }
    read_done(o);
}

static void on_hash(void *arg, const struct store_result *res)
{
    struct op *o = arg;

    if (!read_failed(o, res) && res->nstr > 0) {
        o->str = calloc(res->nstr, sizeof(*o->str));
        o->leases = calloc(res->nstr / 2 + 1, sizeof(*o->leases));
        for (size_t i = 0; o->str && o->leases && i < res->nstr; i++) {
            if (!(o->str[i] = malloc(res->str_len[i] + 1)))
                break;
            memcpy(o->str[i], res->str[i], res->str_len[i] + 1);
            o->nstr = i + 1;
        }
        if (o->nstr < res->nstr && !o->err)
            o->err = "out of memory";
    }
    read_done(o);
}

/* A token bucket's layout, then its read: HGETALL of a hash, GET of a
 * string (no read of the wrong one: it would count as a Redis error). */
static void on_type(void *arg, const struct store_result *res)
{
    struct op *o = arg;

    if (!read_failed(o, res)) {
        int str = res->nstr == 1 && !strcmp(res->str[0], "string");
        const char *argv[] = {str ? "GET" : "HGETALL", o->who.redis_key};
        const size_t argvlen[] = {str ? 3 : 7, o->who.redis_keylen};
        o->pending++; /* (before read_done: a read that fails calls back at once) */
        store_read(o->parts.store, o->who.redis_key, o->who.redis_keylen, 2, argv, argvlen,
                   str ? on_string : on_hash, o);
    }
    read_done(o);
}

static void on_time(void *arg, const struct store_result *res)
{
    struct op *o = arg;

    if (!read_failed(o, res)) {
        if (res->nstr == 2)
            o->now_us = strtoll(res->str[0], NULL, 10) * 1000000 + strtoll(res->str[1], NULL, 10);
        else if (!o->err)
            o->err = "unexpected TIME reply";
    }
    read_done(o);
}

static void on_pttl(void *arg, const struct store_result *res)
{
    struct op *o = arg;

    if (!read_failed(o, res))
        o->pttl_ms = res->n == 1 ? res->v[0] : -2;
    read_done(o);
}

/* ---- concurrency: a client's slots ------------------------------------------- */

/* The slots of o's client in this agent's table, freed when reset. */
static void cc_local(struct op *o, int reset, struct limiter_slots_state *s)
{
    const struct limiter_who *w = &o->who;
    char skey[RULES_SLOT_KEY_MAX + 1];
    int sk = rules_slot_key(w->client_key, w->client_keylen, skey);
    uint64_t now = util_now_us(), first = 0, expired = 0, freed = 0;
    struct metrics_rule *m = metrics_rule_get(w->rule->name);

    s->concurrency = 1;
    if (sk < 0)
        return;
    s->local_held =
        slot_table_peek(o->parts.slots, w->rule->name, skey, (size_t)sk, now, &first, &expired);
    s->local_earliest_ms = (first + 999) / 1000;
    if (reset)
        freed = slot_table_reset(o->parts.slots, w->rule->name, skey, (size_t)sk, now);
    if (m && (expired || freed)) { /* what the peek and the reset freed is no longer held */
        atomic_fetch_add_explicit(&m->slots_expired, expired, memory_order_relaxed);
        atomic_fetch_sub_explicit(&m->slots_held, (int64_t)(expired + freed), memory_order_relaxed);
    }
}

/* cc_reset's reply into s. */
static void cc_redis(const struct store_result *res, struct limiter_slots_state *s)
{
    if (res->status == STORE_OK && res->n >= CC_RESET_R_COUNT) {
        s->redis_read = 1;
        s->redis_held = res->v[CC_RESET_R_HELD] > 0 ? (uint64_t)res->v[CC_RESET_R_HELD] : 0;
        s->redis_earliest_ms =
            res->v[CC_RESET_R_EARLIEST_MS] > 0 ? (uint64_t)res->v[CC_RESET_R_EARLIEST_MS] : 0;
        s->redis_latest_ms =
            res->v[CC_RESET_R_LATEST_MS] > 0 ? (uint64_t)res->v[CC_RESET_R_LATEST_MS] : 0;
    } else {
        s->redis_error = res->err ? res->err : res->status == STORE_DOWN ? "redis down" : "error";
    }
}

static void on_cc_read(void *arg, const struct store_result *res)
{
    struct op *o = arg;
    struct limiter_key_state st;

    memset(&st, 0, sizeof(st));
    st.who = o->who;
    cc_local(o, 0, &st.slots);
    if (res)
        cc_redis(res, &st.slots);
    o->inspect_cb(o->arg, &st);
    op_free(o);
}

static void on_cc_reset(void *arg, const struct store_result *res)
{
    struct op *o = arg;
    struct limiter_reset_result r = {.who = o->who};
    char esc[512];

    cc_local(o, 1, &r.slots);
    if (res)
        cc_redis(res, &r.slots);
    if (r.slots.redis_read && o->parts.taken) { /* this agent's, freed in Redis */
        struct metrics_rule *m = metrics_rule_get(o->who.rule->name);
        uint64_t n = m ? slot_table_reset(o->parts.taken, m->name, o->who.redis_key,
                                          o->who.redis_keylen, util_now_us())
                       : 0;
        if (n)
            atomic_fetch_sub_explicit(&m->slots_held, (int64_t)n, memory_order_relaxed);
    }
    r.redis_reset = r.slots.redis_read;
    r.redis_error = r.slots.redis_error;
    LOG_INFO("\"client reset\" rule=%s key=\"%s\" slots=%" PRIu64, o->who.rule->name,
             log_key(esc, sizeof(esc), o->who.client_key, o->who.client_keylen),
             r.slots.local_held + r.slots.redis_held);
    o->reset_cb(o->arg, &r);
    op_free(o);
}

/* GET /key and POST /reset of a concurrency rule: cc_reset.lua reads (0)
 * or frees (1) the client's sorted set; standalone, the table alone. */
static void cc_op(struct op *o, int reset)
{
    const char *argv[CC_RESET_ARGC] = {[CC_RESET_ARG_FREE] = reset ? "1" : "0"};
    size_t argvlen[CC_RESET_ARGC] = {[CC_RESET_ARG_FREE] = 1};
    store_cb *cb = reset ? on_cc_reset : on_cc_read;

    if (!o->parts.store)
        cb(o, NULL);
    else
        store_eval(o->parts.store, SCRIPT_CC_RESET, o->who.redis_key, o->who.redis_keylen,
                   CC_RESET_ARGC, argv, argvlen, cb, o);
}

int limiter_inspect(struct limiter *l, struct ruleset *rs, const struct limiter_client *c,
                    limiter_inspect_cb *cb, void *arg)
{
    int err;
    struct op *o = op_new(l, rs, c, cb, NULL, arg, &err);

    if (!o)
        return err;
    if (o->who.rule->algorithm == BUCKET_CONCURRENCY) {
        cc_op(o, 0);
        return 0;
    }
    struct store *store = o->parts.store;
    if (!store) {
        inspect_done(o);
        return 0;
    }
    /* Three reads (four for a token bucket) routed by the key: one server
     * answers them, in order. */
    const char *rkey = o->who.redis_key;
    size_t rklen = o->who.redis_keylen;
    const char *hgetall[] = {"HGETALL", rkey}, *redis_time[] = {"TIME"}, *pttl[] = {"PTTL", rkey};
    const size_t hgetall_len[] = {7, rklen}, time_len[] = {4}, pttl_len[] = {4, rklen};
    const char *type[] = {"TYPE", rkey};
    const size_t type_len[] = {4, rklen};
    o->pending = 3; /* a read that fails at once calls back at once */
    if (bucket_windowed(o->who.params.algorithm))
        store_read(store, rkey, rklen, 2, hgetall, hgetall_len, on_hash, o);
    else /* a hash or a string (tb_exact.lua): TYPE, then the read of it */
        store_read(store, rkey, rklen, 2, type, type_len, on_type, o);
    store_read(store, rkey, rklen, 1, redis_time, time_len, on_time, o);
    store_read(store, rkey, rklen, 2, pttl, pttl_len, on_pttl, o);
    return 0;
}

/* ---- reset ------------------------------------------------------------------- */

/* The fleet confirmed (or RESET_WAIT_S passed): the answer. */
static void on_fleet(void *arg, unsigned agents, unsigned confirmed)
{
    struct op *o = arg;

    o->res.fleet_agents = agents;
    o->res.fleet_confirmed = confirmed;
    o->reset_cb(o->arg, &o->res);
    op_free(o);
}

/* then the other agents: their leases, negative caches, backstops */
static void publish_reset(struct op *o)
{
    const struct limiter_who *w = &o->who;
    limiter_resets_publish(o->l, w->rule->name, w->client_key, w->client_keylen, w->redis_key,
                           w->redis_keylen, on_fleet, o);
}

/* A scope = global rule's global bucket reset (gclaim_reset). */
static void on_global_reset(void *arg, const struct store_result *res)
{
    struct op *o = arg;
    if (res->status == STORE_OK && res->n >= RESET_R_COUNT) {
        o->res.global_reset = 1;
        o->res.global_remaining = res->v[RESET_R_REMAINING];
        o->res.global_held = res->v[RESET_R_HELD];
        o->res.global_holders = res->v[RESET_R_HOLDERS];
    } else {
        o->res.global_error = res->err                     ? res->err
                              : res->status == STORE_DOWN ? "global redis down"
                                                           : "error";
    }
    publish_reset(o);
}

static void on_reset(void *arg, const struct store_result *res)
{
    struct op *o = arg;
    const struct limiter_parts *parts = &o->parts;
    struct limiter_reset_result r = {.who = o->who};
    const struct limiter_who *w = &o->who;

    if (res->status == STORE_OK && res->n >= RESET_R_COUNT) {
        const int64_t *v = res->v;
        /* Replies on one connection come in order: every claim sent before
         * the reset has been applied, so its answer cannot re-block. */
        r.redis_reset = 1;
        r.remaining_before = v[RESET_R_BEFORE];
        r.remaining = v[RESET_R_REMAINING];
        r.held = v[RESET_R_HELD];
        r.holders = v[RESET_R_HOLDERS];
        r.lease_cache_cleared = lease_forget(
            parts->leases, w->redis_key, w->redis_keylen, util_now_us(),
            r.remaining > 0 ? (uint64_t)r.remaining : 0, (uint64_t)r.held, (uint64_t)r.holders);
        char esc[512];
        LOG_INFO("\"client reset\" rule=%s key=\"%s\" held=%" PRId64, w->rule->name,
                 log_key(esc, sizeof(esc), w->client_key, w->client_keylen), r.held);
    } else {
        r.redis_error = res->err ? res->err : res->status == STORE_DOWN ? "redis down" : "error";
    }
    /* Leases elsewhere are counted in held: the other agents drop them
     * (and their negative caches) when the fleet is told, below. */
    r.backstop_dropped =
        bucket_table_drop(parts->backstop, w->rule->name, w->client_key, w->client_keylen);
    o->res = r;
    if (!r.redis_reset) { /* nothing to tell the fleet: Redis did not reset */
        on_fleet(o, 0, 0);
        return;
    }
    /* a scope = global rule: its global bucket too (the regional one is
     * fed: its reset makes no token), then the fleet */
    size_t plen = o->l->core.prefix_len;
    if (w->rule->scope == SCOPE_GLOBAL && w->redis_keylen > plen) {
        o->res.global = 1;
        if (gclaim_reset(o->l->global, w->redis_key + plen, w->redis_keylen - plen,
                         w->params.limit, w->params.period_ms, w->params.burst, on_global_reset,
                         o) == 0)
            return;
        o->res.global_error = "no global connection";
    }
    publish_reset(o);
}

int limiter_reset(struct limiter *l, struct ruleset *rs, const struct limiter_client *c,
                  limiter_reset_cb *cb, void *arg)
{
    int err;
    struct op *o = op_new(l, rs, c, NULL, cb, arg, &err);

    if (!o)
        return err;
    if (o->who.rule->algorithm == BUCKET_CONCURRENCY) {
        cc_op(o, 1);
        return 0;
    }
    const struct limiter_parts *parts = &o->parts;
    const struct limiter_who *w = &o->who;
    if (!parts->store) {
        struct limiter_reset_result r = {.who = *w, .fleet_agents = 1, .fleet_confirmed = 1};
        r.bucket_dropped =
            bucket_table_drop(parts->buckets, w->rule->name, w->client_key, w->client_keylen);
        r.backstop_dropped =
            bucket_table_drop(parts->backstop, w->rule->name, w->client_key, w->client_keylen);
        char esc[512];
        LOG_INFO("\"client reset\" rule=%s key=\"%s\"", w->rule->name,
                 log_key(esc, sizeof(esc), w->client_key, w->client_keylen));
        cb(arg, &r);
        op_free(o);
        return 0;
    }
    /* tb_reset / sw_reset: the bucket full again less what running leases
     * hold, so that the bound b + r*T holds across the reset. */
    char nums[RESET_ARGC_FIXED][24];
    const char *argv[RESET_ARGC_FIXED];
    size_t argvlen[RESET_ARGC_FIXED];
    uint64_t vals[RESET_ARGC_FIXED];
    int argc = RESET_ARGC;
    vals[RESET_ARG_LIMIT] = w->params.limit;
    vals[RESET_ARG_PERIOD_MS] = w->params.period_ms;
    vals[RESET_ARG_BURST] = w->params.burst;
    if (w->params.algorithm == BUCKET_FIXED_WINDOW) { /* sw_reset's fixed mode */
        vals[RESET_ARG_WINDOW_MODE] = 1;
        vals[RESET_ARG_WINDOW_OFFSET_MS] = w->params.offset_ms;
        argc = RESET_ARGC_FIXED;
    }
    uint64_t reserve = w->params.fed ? gclaim_reserve(o->l->global, w->params.burst) : 0;
    if (reserve) { /* (a fed rule is a token bucket's) */
        vals[RESET_ARG_RESERVE] = reserve;
        argc = RESET_ARG_RESERVE + 1;
    }
    for (int i = 0; i < argc; i++) {
        argvlen[i] = (size_t)snprintf(nums[i], sizeof(nums[i]), "%" PRIu64, vals[i]);
        argv[i] = nums[i];
    }
    /* a scope = global rule's regional bucket is fed (lua/README.md): its
     * reset makes no token, it lifts a block (it was sent +N, and made a
     * full burst the global bucket never granted) */
    if (w->params.fed)
        argvlen[RESET_ARG_LIMIT] = (size_t)snprintf(nums[RESET_ARG_LIMIT],
                                                    sizeof(nums[RESET_ARG_LIMIT]),
                                                    "-%" PRIu64, vals[RESET_ARG_LIMIT]);
    store_eval(parts->store,
               bucket_windowed(w->params.algorithm) ? SCRIPT_SW_RESET : SCRIPT_TB_RESET,
               w->redis_key, w->redis_keylen, argc, argv, argvlen, on_reset, o);
    return 0;
}
