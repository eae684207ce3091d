/* keyapi.c - GET /key and POST /reset: one client's state and clearing it. */
#include "keyapi.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "httpd.h"
#include "limiter.h"
#include "rules/rules.h"
#include "store/script.h"
#include "store/store.h"

#define ARG_MAX 8192              /* a decoded query value: the request is at most 8 KiB */
#define CKEY_MAX (ARG_MAX + 128)  /* a client key, limits appended */
#define RKEY_MAX (CKEY_MAX + 256) /* prefix, algorithm, rule name */

/* ---- JSON ---------------------------------------------------------------- */

struct jbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void jput(struct jbuf *b, const char *fmt, ...)
{
    va_list ap;

    for (int pass = 0; pass < 2 && !b->oom; pass++) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
        } else if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        } else {
            size_t cap = (b->cap + (size_t)n + 1) * 2;
            char *p = realloc(b->p, cap);
            if (!p)
                b->oom = 1;
            b->p = p ? p : b->p;
            b->cap = p ? cap : b->cap;
        }
    }
}

/* A JSON string: quotes and backslashes escaped, control bytes and bytes
 * past ASCII as \u00XX (one per byte, as /top writes keys: always valid
 * JSON, whatever bytes clients sent). */
static void jstr(struct jbuf *b, const char *s, size_t len)
{
    jput(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            jput(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            jput(b, "\\u%04x", c);
        else
            jput(b, "%c", c);
    }
    jput(b, "\"");
}

static const char *jbool(int v)
{
    return v ? "true" : "false";
}

static uint64_t ms_up(uint64_t us)
{
    return (us + 999) / 1000;
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

/* ---- which client --------------------------------------------------------- */

/* One client of one rule, as the query names it. */
struct target {
    unsigned rule;
    const struct cfg_rule *r;
    struct bucket_params p, b; /* its limits, and those of its backstop */
    char key[ARG_MAX];         /* as given */
    size_t keylen;
    char ckey[CKEY_MAX]; /* the client key requests use */
    size_t cklen;
    char rkey[RKEY_MAX]; /* its Redis key (Redis mode) */
    size_t rklen;
};

/* The limits of the client: the rule's own; for a rule that takes them per
 * request from args (rate = arg:NAME, burst = arg:NAME), those the query
 * names (limit=N/DUR, burst=B: what the request's args say), clamped as
 * rules_match clamps them, with *keyed = 1 (the key carries them). 0, or -1
 * with why. */
static int client_limits(const struct ruleset *rs, unsigned i, const char *query,
                         struct bucket_params *p, struct bucket_params *b, int *keyed,
                         const char **why)
{
    const struct cfg_rule *r = &rs->cfg->rules[i];
    char rate[64], burst[32];
    long nr = util_query_param(query, "limit", rate, sizeof(rate));
    long nb = util_query_param(query, "burst", burst, sizeof(burst));
    int ret;

    *keyed = config_rule_per_request(r);
    if (!*keyed && (nr != UTIL_QUERY_ABSENT || nb != UTIL_QUERY_ABSENT)) {
        *why = "limit= and burst= name a client of a rule with per-client limits "
               "(rate = arg:NAME); this rule has fixed limits";
        return -1;
    }
    ret = rules_request_limits(rs, i, r->rate_arg && nr >= 0 ? rate : NULL,
                               r->burst_arg && nb >= 0 ? burst : NULL, p, b);
    if (ret == RULES_BAD_RATE) {
        *why = "this rule takes its rate per client: give limit=N/DURATION as the map does";
        return -1;
    }
    if (ret == RULES_BAD_BURST) {
        *why = "this rule takes its burst per client: give burst=N";
        return -1;
    }
    return 0;
}

/* Fill t from the query: NULL, or an HTTP status line with why. */
static const char *find_target(struct limiter *l, const struct ruleset *rs, const char *query,
                               struct target *t, const char **why)
{
    char *name = t->key; /* scratch until the key is read */
    long n = util_query_param(query, "rule", name, sizeof(t->key));
    int keyed;

    if (n == UTIL_QUERY_ABSENT || n == 0) {
        *why = "rule= is required";
        return "400 Bad Request";
    }
    if (n == UTIL_QUERY_BAD) {
        *why = "rule= is malformed";
        return "400 Bad Request";
    }
    for (t->rule = 0; t->rule < rs->cfg->nrules; t->rule++)
        if (strlen(rs->cfg->rules[t->rule].name) == (size_t)n &&
            memcmp(rs->cfg->rules[t->rule].name, name, (size_t)n) == 0)
            break;
    if (t->rule == rs->cfg->nrules) {
        *why = "no such rule";
        return "404 Not Found";
    }
    t->r = &rs->cfg->rules[t->rule];
    n = util_query_param(query, "key", t->key, sizeof(t->key));
    if (n == UTIL_QUERY_BAD) {
        *why = "key= is malformed or too long";
        return "400 Bad Request";
    }
    /* A keyed rule never applies with an empty key; a rule without key has
     * one bucket for everyone, under the empty key. */
    if (t->r->nkeys && n <= 0) {
        *why = "key= is required (the values of the rule's key args, joined with '|')";
        return "400 Bad Request";
    }
    if (!t->r->nkeys && n > 0) {
        *why = "this rule has no key: one bucket for every client (leave key= out)";
        return "400 Bad Request";
    }
    t->keylen = n > 0 ? (size_t)n : 0;
    if (client_limits(rs, t->rule, query, &t->p, &t->b, &keyed, why) < 0)
        return "400 Bad Request";
    int len = rules_client_key(t->key, t->keylen, keyed ? &t->p : NULL, rs->cfg->max_key, t->ckey,
                               sizeof(t->ckey));
    if (len < 0) {
        *why = "key too long";
        return "400 Bad Request";
    }
    t->cklen = (size_t)len;
    t->rklen = limiter_redis(l)
                   ? limiter_redis_key(l, t->r, t->ckey, t->cklen, t->rkey, sizeof(t->rkey))
                   : 0;
    return NULL;
}

static void reply_json(struct httpd_req *req, const char *status, struct jbuf *b)
{
    jput(b, "\n");
    if (b->oom) {
        free(b->p);
        httpd_reply(req, "500 Internal Server Error", "text/plain", NULL, NULL, 0);
        return;
    }
    httpd_reply(req, status, "application/json", NULL, b->p, b->len);
}

static void reply_error(struct httpd_req *req, const char *status, const char *why)
{
    struct jbuf b = {0};
    jput(&b, "{\"error\":");
    jstr(&b, why, strlen(why));
    jput(&b, "}");
    reply_json(req, status, &b);
}

static const char *algorithm_name(const struct cfg_rule *r)
{
    return r->algorithm == BUCKET_SLIDING_WINDOW ? "sliding-window" : "token-bucket";
}

static void put_head(struct jbuf *b, const struct target *t, const char *mode)
{
    jput(b, "{\"rule\":");
    jstr(b, t->r->name, strlen(t->r->name));
    jput(b, ",\"key\":");
    jstr(b, t->key, t->keylen);
    jput(b, ",\"client_key\":");
    jstr(b, t->ckey, t->cklen);
    jput(b, ",\"mode\":\"%s\",\"algorithm\":\"%s\",\"limit\":%" PRIu64 ",\"period_ms\":%" PRIu64,
         mode, algorithm_name(t->r), t->p.limit, t->p.period_us / 1000);
    if (t->r->algorithm != BUCKET_SLIDING_WINDOW)
        jput(b, ",\"burst\":%" PRIu64, t->p.burst);
    if (t->rklen) {
        jput(b, ",\"redis_key\":");
        jstr(b, t->rkey, t->rklen);
    }
}

/* "name":{...} for an in-memory bucket, or null when there is none (a
 * request finds it full). */
static void put_bucket(struct jbuf *b, const char *name, int found, const struct bucket_state *st,
                       const struct bucket_params *p)
{
    jput(b, ",\"%s\":", name);
    if (!found) {
        jput(b, "null");
        return;
    }
    if (p->algorithm == BUCKET_SLIDING_WINDOW)
        jput(b, "{\"previous\":%.6g,\"current\":%.6g,\"estimate\":%.6g", st->prev, st->cur,
             st->level);
    else
        jput(b, "{\"tokens\":%.6g,\"burst\":%" PRIu64, st->level, p->burst);
    jput(b,
         ",\"limit\":%" PRIu64 ",\"remaining\":%" PRIu64
         ",\"blocked\":%s,\"retry_after_ms\":%" PRIu64 ",\"reset_ms\":%" PRIu64 "}",
         p->limit, st->remaining, jbool(st->blocked), ms_up(st->retry_us), ms_up(st->reset_us));
}

static void put_lease(struct jbuf *b, int found, const struct lease_state *st)
{
    static const char *const kinds[] = {[LEASE_JOB_CLAIM] = "claim", [LEASE_JOB_RETURN] = "return",
                                         [LEASE_JOB_EXACT] = "exact"};

    jput(b, ",\"lease\":");
    if (!found) {
        jput(b, "null");
        return;
    }
    jput(b,
         "{\"tokens\":%" PRIu64 ",\"unreported\":%" PRIu64
         ",\"voided\":%s,\"lease_left_ms\":%" PRIu64 ",\"blocked\":%s,\"blocked_left_ms\":%" PRIu64
         ",\"in_flight\":",
         st->tokens, st->unreported, jbool(st->voided), st->lease_left_us / 1000,
         jbool(st->blocked_left_us > 0), ms_up(st->blocked_left_us));
    if (st->inflight >= 0 && st->inflight <= LEASE_JOB_EXACT)
        jput(b, "\"%s\"", kinds[st->inflight]);
    else
        jput(b, "null");
    jput(b, ",\"waiting\":%u,\"demand\":%.3g,\"rate_share_per_s\":%.6g,\"slice\":%" PRIu64
            ",\"redis_last_said\":",
         st->waiting, st->demand, st->share_per_s, st->slice);
    if (st->known)
        jput(b,
             "{\"tokens\":%.6g,\"held_by_others\":%" PRIu64 ",\"other_holders\":%" PRIu64
             ",\"age_ms\":%" PRIu64 "}}",
             st->bucket_tokens, st->others_held, st->others, st->reply_age_us / 1000);
    else
        jput(b, "null}");
}

/* ---- GET /key ----------------------------------------------------------- */

/* A GET /key waiting for Redis: three reads about the key (HGETALL, TIME,
 * PTTL), all sent at once to the key's server, answered in order. */
struct kreq {
    struct httpd_req *req;
    struct limiter *l;
    struct ruleset *rs; /* referenced */
    int pending;
    const char *err; /* the first failure (a static string) */
    char errbuf[160];
    /* HGETALL: field, value, field, value... copied */
    size_t nstr;
    char **str;
    size_t *str_len;
    int64_t now_us; /* Redis TIME */
    int64_t pttl_ms;
    struct target t;
};

static void kreq_free(struct kreq *k)
{
    for (size_t i = 0; i < k->nstr; i++)
        free(k->str[i]);
    free(k->str);
    free(k->str_len);
    ruleset_unref(k->rs);
    free(k);
}

static int read_failed(struct kreq *k, const struct store_result *res)
{
    if (res->status == STORE_OK)
        return 0;
    if (!k->err) {
        snprintf(k->errbuf, sizeof(k->errbuf), "%s",
                 res->err                    ? res->err
                 : res->status == STORE_DOWN ? "redis down"
                                             : "redis error");
        k->err = k->errbuf;
    }
    return 1;
}

static void get_done(struct kreq *k);

static void on_hash(void *arg, const struct store_result *res)
{
    struct kreq *k = arg;

    if (!read_failed(k, res) && res->nstr > 0) {
        k->str = calloc(res->nstr, sizeof(*k->str));
        k->str_len = calloc(res->nstr, sizeof(*k->str_len));
        for (size_t i = 0; k->str && k->str_len && i < res->nstr; i++) {
            if (!(k->str[i] = malloc(res->str_len[i] + 1)))
                break;
            memcpy(k->str[i], res->str[i], res->str_len[i] + 1);
            k->str_len[i] = res->str_len[i];
            k->nstr = i + 1;
        }
        if (k->nstr < res->nstr && !k->err)
            k->err = "out of memory";
    }
    if (--k->pending == 0)
        get_done(k);
}

static void on_time(void *arg, const struct store_result *res)
{
    struct kreq *k = arg;

    if (!read_failed(k, res)) {
        if (res->nstr == 2)
            k->now_us = strtoll(res->str[0], NULL, 10) * 1000000 + strtoll(res->str[1], NULL, 10);
        else if (!k->err)
            k->err = "unexpected TIME reply";
    }
    if (--k->pending == 0)
        get_done(k);
}

static void on_pttl(void *arg, const struct store_result *res)
{
    struct kreq *k = arg;

    if (!read_failed(k, res))
        k->pttl_ms = res->n == 1 ? res->v[0] : -2;
    if (--k->pending == 0)
        get_done(k);
}

/* Field name of the HGETALL reply, or NULL. */
static const char *field(const struct kreq *k, const char *name)
{
    for (size_t i = 0; i + 1 < k->nstr; i += 2)
        if (strcmp(k->str[i], name) == 0)
            return k->str[i + 1];
    return NULL;
}

static double fnum(const struct kreq *k, const char *name, double dflt)
{
    const char *v = field(k, name);
    return v ? strtod(v, NULL) : dflt;
}

/* The leases in the hash: "agent", held, and (tb) its expiry in ms from
 * Redis' now or (sw) whether it is of the current window. Their total held
 * and holders are added up over unexpired (current-window) ones. */
static void put_leases(struct jbuf *b, const struct kreq *k, int sw, double window,
                       const char *self, double *held, unsigned *holders)
{
    int first = 1;

    jput(b, ",\"leases\":[");
    for (size_t i = 0; i + 1 < k->nstr; i += 2) {
        char other[RKEY_MAX];
        if (strncmp(k->str[i], "h:", 2) != 0)
            continue;
        const char *agent = k->str[i] + 2;
        double h = strtod(k->str[i + 1], NULL);
        snprintf(other, sizeof(other), "%s:%s", sw ? "w" : "e", agent);
        double when = fnum(k, other, 0);
        int live = sw ? when == window : when > (double)k->now_us;
        if (live) {
            *held += h;
            (*holders)++;
        }
        jput(b, "%s{\"agent\":", first ? "" : ",");
        jstr(b, agent, strlen(agent));
        jput(b, ",\"held\":%.6g,\"this_agent\":%s", h, jbool(self && strcmp(agent, self) == 0));
        if (sw)
            jput(b, ",\"window\":%.17g,\"live\":%s}", when, jbool(live));
        else {
            snprintf(other, sizeof(other), "q:%s", agent);
            double q = fnum(k, other, 0); /* a rate lease's share, tokens per us */
            if (q > 0)
                jput(b, ",\"share_per_s\":%.6g", q * 1e6);
            jput(b, ",\"expires_in_ms\":%.0f,\"live\":%s}", (when - (double)k->now_us) / 1000,
                 jbool(live));
        }
        first = 0;
    }
    jput(b, "]");
}

/* Microseconds until a sliding window's estimate falls to thr if nothing
 * more is charged, as sw_claim.lua computes it: the previous count fades
 * over the rest of this window, then the current one over the next. */
static double sw_wait(double est, double c, double p, double left, double period, double thr)
{
    if (est <= thr)
        return 0;
    thr = fmax(thr, 0);
    if (c <= thr)
        return (est - thr) * period / p;
    return left + (c - thr) * period / c;
}

/* The Redis bucket, as the hash says and as the scripts would see it now
 * (an estimate: the scripts also apply expiries in time order). */
static void put_redis(struct jbuf *b, const struct kreq *k, const char *self)
{
    const struct target *t = &k->t;
    int sw = t->p.algorithm == BUCKET_SLIDING_WINDOW;
    double held = 0, rate = (double)t->p.limit / (double)t->p.period_us; /* per us */
    unsigned holders = 0;

    jput(b, ",\"redis\":");
    if (k->err) {
        jput(b, "{\"error\":");
        jstr(b, k->err, strlen(k->err));
        jput(b, "}");
        return;
    }
    jput(b, "{\"exists\":%s,\"ttl_ms\":%" PRId64, jbool(k->nstr > 0), k->pttl_ms);
    if (sw) {
        double period = (double)t->p.period_us, now = (double)k->now_us;
        double cur_w = floor(now / period), w = fnum(k, "w", cur_w);
        double c = fnum(k, "c", 0), p = fnum(k, "p", 0);
        if (cur_w > w + 1) /* both windows past */
            c = p = 0;
        else if (cur_w == w + 1)
            p = c, c = 0;
        double left = (cur_w + 1) * period - now;
        double est = p * left / period + c;
        jput(b, ",\"window\":%.17g,\"window_left_ms\":%.0f,\"current\":%.6g,\"previous\":%.6g",
             cur_w, left / 1000, c, p);
        put_leases(b, k, 1, cur_w, self, &held, &holders);
        double rem = floor((double)t->p.limit - est + 1e-9);
        jput(b,
             ",\"estimate\":%.6g,\"remaining\":%.0f,\"blocked\":%s,\"retry_after_ms\":%.0f"
             ",\"reset_ms\":%.0f",
             est, rem > 0 ? rem : 0, jbool(est + 1 > (double)t->p.limit + 1e-9),
             ceil(sw_wait(est, c, p, left, period, (double)t->p.limit - 1) / 1000),
             ceil(sw_wait(est, c, p, left, period, 0) / 1000));
    } else {
        double burst = (double)t->p.burst;
        double tk = fnum(k, "t", burst), ts = fnum(k, "ts", (double)k->now_us);
        put_leases(b, k, 0, 0, self, &held, &holders);
        double cap = burst - held, now_t = tk;
        if (now_t < cap && (double)k->now_us > ts)
            now_t = fmin(cap, tk + rate * ((double)k->now_us - ts));
        now_t = fmin(now_t, cap);
        double retry = now_t >= 1 ? 0 : (1 - now_t) / rate;
        double full = fmax(0, burst - held - now_t) / rate; /* if no held token is spent */
        jput(b,
             ",\"t\":%.17g,\"refilled_ms_ago\":%.0f,\"tokens_now\":%.6g,\"remaining\":%.0f"
             ",\"blocked\":%s,\"retry_after_ms\":%.0f,\"reset_ms\":%.0f",
             tk, ((double)k->now_us - ts) / 1000, now_t, now_t > 0 ? floor(now_t + 1e-9) : 0,
             jbool(now_t < 1), ceil(retry / 1000), ceil(full / 1000));
    }
    jput(b, ",\"held\":%.6g,\"holders\":%u}", held, holders);
}

/* Standalone, or once the reads are in: the whole answer. */
static void render_get(struct httpd_req *req, struct limiter *l, const struct kreq *k,
                       const struct target *t)
{
    struct limiter_parts parts;
    struct jbuf b = {0};
    struct bucket_state st;
    uint64_t now = util_now_us();

    limiter_parts(l, &parts);
    put_head(&b, t, parts.store ? "redis" : "standalone");
    if (!parts.store) {
        int found =
            bucket_table_peek(parts.buckets, t->r->name, t->ckey, t->cklen, &t->p, now, &st);
        put_bucket(&b, "bucket", found, &st, &t->p);
    } else {
        struct lease_state ls;
        int found = lease_peek(parts.leases, t->rkey, t->rklen, now, &ls);
        put_lease(&b, found, &ls);
        put_redis(&b, k, store_agent_id(parts.store));
    }
    int found = bucket_table_peek(parts.backstop, t->r->name, t->ckey, t->cklen, &t->b, now, &st);
    put_bucket(&b, "backstop", found, &st, &t->b);
    jput(&b, "}");
    reply_json(req, "200 OK", &b);
}

static void get_done(struct kreq *k)
{
    render_get(k->req, k->l, k, &k->t);
    kreq_free(k);
}

static struct kreq *kreq_new(struct limiter *l, struct ruleset *rs, struct httpd_req *req,
                             const char *query, const char **status, const char **why)
{
    struct kreq *k = calloc(1, sizeof(*k));

    if (!k) {
        *status = "500 Internal Server Error";
        *why = "out of memory";
        return NULL;
    }
    if ((*status = find_target(l, rs, query, &k->t, why))) {
        free(k);
        return NULL;
    }
    if (limiter_redis(l) && !k->t.rklen) {
        *status = "400 Bad Request";
        *why = "key too long";
        free(k);
        return NULL;
    }
    k->req = req;
    k->l = l;
    k->rs = rs;
    ruleset_ref(rs);
    return k;
}

void keyapi_get(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query)
{
    const char *status, *why;
    struct kreq *k = kreq_new(l, rs, req, query, &status, &why);
    struct limiter_parts parts;

    if (!k) {
        reply_error(req, status, why);
        return;
    }
    limiter_parts(l, &parts);
    if (!parts.store) {
        get_done(k);
        return;
    }
    const char *hgetall[] = {"HGETALL", k->t.rkey}, *redis_time[] = {"TIME"};
    const char *pttl[] = {"PTTL", k->t.rkey};
    const size_t hgetall_len[] = {7, k->t.rklen}, time_len[] = {4}, pttl_len[] = {4, k->t.rklen};
    k->pending = 3; /* a read that fails at once calls back at once */
    store_read(parts.store, k->t.rkey, k->t.rklen, 2, hgetall, hgetall_len, on_hash, k);
    store_read(parts.store, k->t.rkey, k->t.rklen, 1, redis_time, time_len, on_time, k);
    store_read(parts.store, k->t.rkey, k->t.rklen, 2, pttl, pttl_len, on_pttl, k);
}

/* ---- POST /reset -------------------------------------------------------- */

static void put_reset_local(struct jbuf *b, struct limiter *l, const struct target *t,
                            const char *what)
{
    struct limiter_parts parts;

    limiter_parts(l, &parts);
    if (what)
        jput(b, ",\"%s\":%s", what,
             jbool(bucket_table_drop(parts.buckets, t->r->name, t->ckey, t->cklen)));
    jput(b, ",\"backstop_dropped\":%s",
         jbool(bucket_table_drop(parts.backstop, t->r->name, t->ckey, t->cklen)));
}

static void on_reset(void *arg, const struct store_result *res)
{
    struct kreq *k = arg;
    struct limiter_parts parts;
    struct jbuf b = {0};
    int ok = res->status == STORE_OK && res->n >= RESET_R_COUNT;
    const char *status = "200 OK";

    limiter_parts(k->l, &parts);
    put_head(&b, &k->t, "redis");
    if (ok) {
        const int64_t *v = res->v;
        /* Replies on one connection come in order: every claim sent before
         * the reset has been applied, so its answer cannot re-block. */
        int found = lease_forget(parts.leases, k->t.rkey, k->t.rklen, util_now_us(),
                                 v[RESET_R_REMAINING] > 0 ? (uint64_t)v[RESET_R_REMAINING] : 0,
                                 (uint64_t)v[RESET_R_HELD], (uint64_t)v[RESET_R_HOLDERS]);
        jput(&b,
             ",\"redis\":{\"reset\":true,\"remaining_before\":%" PRId64 ",\"remaining\":%" PRId64
             ",\"held\":%" PRId64 ",\"holders\":%" PRId64 "},\"lease_cache_cleared\":%s",
             v[RESET_R_BEFORE], v[RESET_R_REMAINING], v[RESET_R_HELD], v[RESET_R_HOLDERS],
             jbool(found));
        char esc[512];
        LOG_INFO("\"client reset\" rule=%s key=\"%s\" held=%" PRId64, k->t.r->name,
                 log_key(esc, sizeof(esc), k->t.ckey, k->t.cklen), v[RESET_R_HELD]);
    } else {
        const char *err = res->err ? res->err : res->status == STORE_DOWN ? "redis down" : "error";
        jput(&b, ",\"redis\":{\"reset\":false,\"error\":");
        jstr(&b, err, strlen(err));
        jput(&b, "}");
        status = "503 Service Unavailable";
    }
    put_reset_local(&b, k->l, &k->t, NULL);
    /* Leases elsewhere run on (they are counted in held), and so do the
     * other agents' negative caches: until their retry time. */
    jput(&b, ",\"other_agents\":\"their negative caches block this client until their retry "
             "time\"}");
    reply_json(k->req, status, &b);
    kreq_free(k);
}

void keyapi_reset(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query)
{
    const char *status, *why;
    struct kreq *k = kreq_new(l, rs, req, query, &status, &why);
    struct limiter_parts parts;

    if (!k) {
        reply_error(req, status, why);
        return;
    }
    limiter_parts(l, &parts);
    if (!parts.store) {
        struct jbuf b = {0};
        put_head(&b, &k->t, "standalone");
        put_reset_local(&b, l, &k->t, "bucket_dropped");
        jput(&b, "}");
        char esc[512];
        LOG_INFO("\"client reset\" rule=%s key=\"%s\"", k->t.r->name,
                 log_key(esc, sizeof(esc), k->t.ckey, k->t.cklen));
        reply_json(req, "200 OK", &b);
        kreq_free(k);
        return;
    }
    char nums[RESET_ARGC][24];
    const char *argv[RESET_ARGC];
    size_t argvlen[RESET_ARGC];
    uint64_t vals[RESET_ARGC];
    vals[RESET_ARG_LIMIT] = k->t.p.limit;
    vals[RESET_ARG_PERIOD_MS] = k->t.p.period_us / 1000;
    vals[RESET_ARG_BURST] = k->t.p.burst;
    for (int i = 0; i < RESET_ARGC; i++) {
        argvlen[i] = (size_t)snprintf(nums[i], sizeof(nums[i]), "%" PRIu64, vals[i]);
        argv[i] = nums[i];
    }
    store_eval(parts.store,
               k->t.p.algorithm == BUCKET_SLIDING_WINDOW ? SCRIPT_SW_RESET : SCRIPT_TB_RESET,
               k->t.rkey, k->t.rklen, RESET_ARGC, argv, argvlen, on_reset, k);
}
