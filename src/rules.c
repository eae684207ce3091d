/* rules.c - rule matching, client keys, ACK variables. */
#include "rules.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define KEY_SEP '|'

uint64_t rules_backstop_period(uint64_t period_us, double share)
{
    double us = (double)period_us / share;

    if (!(us < (double)BUCKET_MAX_PERIOD_US)) /* NaN and inf too */
        return BUCKET_MAX_PERIOD_US;
    return us < 1 ? 1 : (uint64_t)us;
}

struct ruleset *ruleset_new(struct config *cfg)
{
    struct ruleset *rs = calloc(1, sizeof(*rs));
    size_t n = cfg->nrules ? cfg->nrules : 1;

    if (!rs)
        goto fail;
    rs->cfg = cfg;
    rs->params = calloc(n, sizeof(*rs->params));
    rs->backstop = calloc(n, sizeof(*rs->backstop));
    rs->metrics = calloc(n, sizeof(*rs->metrics));
    if (!rs->params || !rs->backstop || !rs->metrics)
        goto fail;
    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        struct bucket_params *p = &rs->params[i], *b = &rs->backstop[i];
        double share = cfg->fallback_share;

        p->algorithm = r->algorithm;
        p->limit = r->rate_n;
        p->period_us = r->rate_period_ms * 1000;
        p->burst = r->burst;
        /* The backstop keeps N and stretches the period: share x rate
         * without fractional N; its burst is share x burst, at least 1. A
         * tiny share would stretch it past what a uint64_t holds (and a
         * conversion out of range is undefined: it gave 0, no limit at
         * all): it is capped at BUCKET_MAX_PERIOD_US, about 285 years. */
        *b = *p;
        b->period_us = rules_backstop_period(p->period_us, share);
        b->burst = (uint64_t)(share * (double)r->burst);
        if (b->burst < 1)
            b->burst = 1;
        if (r->algorithm == BUCKET_SLIDING_WINDOW) {
            b->period_us = p->period_us;
            b->limit = (uint64_t)(share * (double)p->limit);
            if (b->limit < 1)
                b->limit = 1;
        }
        rs->metrics[i] = metrics_rule_get(r->name);
        if (!rs->metrics[i])
            goto fail;
    }
    atomic_init(&rs->refs, 1);
    return rs;
fail:
    if (rs) {
        free(rs->params);
        free(rs->backstop);
        free(rs->metrics);
        free(rs);
    }
    config_free(cfg);
    return NULL;
}

void ruleset_ref(struct ruleset *rs)
{
    atomic_fetch_add_explicit(&rs->refs, 1, memory_order_relaxed);
}

void ruleset_unref(struct ruleset *rs)
{
    if (!rs || atomic_fetch_sub_explicit(&rs->refs, 1, memory_order_acq_rel) != 1)
        return;
    config_free(rs->cfg);
    free(rs->params);
    free(rs->backstop);
    free(rs->metrics);
    free(rs);
}

void rules_eval_reset(struct rule_eval *ev)
{
    ev->nhits = 0;
    ev->keys_len = 0;
}

void rules_eval_free(struct rule_eval *ev)
{
    free(ev->hits);
    free(ev->keys);
    memset(ev, 0, sizeof(*ev));
}

void rules_eval_move(struct rule_eval *dst, struct rule_eval *src)
{
    *dst = *src;
    memset(src, 0, sizeof(*src));
}

int rules_value_text(const struct spop_data *d, char *buf, size_t cap, const char **out)
{
    int n;

    *out = buf;
    switch (d->type) {
    case SPOP_DATA_STR:
    case SPOP_DATA_BIN:
        *out = d->u.buf.ptr;
        return (int)d->u.buf.len;
    case SPOP_DATA_BOOL:
        n = snprintf(buf, cap, "%s", d->u.sint ? "true" : "false");
        break;
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        n = snprintf(buf, cap, "%" PRId64, d->u.sint);
        break;
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        n = snprintf(buf, cap, "%" PRIu64, d->u.uint);
        break;
    case SPOP_DATA_IPV4:
        if (!inet_ntop(AF_INET, d->u.ip, buf, (socklen_t)cap))
            return -1;
        n = (int)strlen(buf);
        break;
    case SPOP_DATA_IPV6: {
        static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        /* One client, one key: a v4-mapped address is the v4 address. */
        if (memcmp(d->u.ip, v4mapped, 12) == 0) {
            if (!inet_ntop(AF_INET, d->u.ip + 12, buf, (socklen_t)cap))
                return -1;
        } else if (!inet_ntop(AF_INET6, d->u.ip, buf, (socklen_t)cap)) {
            return -1;
        }
        n = (int)strlen(buf);
        break;
    }
    default: /* NULL: the sample could not be fetched */
        return -1;
    }
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Make room for extra bytes after keys_len. */
static int keys_reserve(struct rule_eval *ev, size_t extra)
{
    size_t need = ev->keys_len + extra;
    if (need <= ev->keys_cap)
        return 0;
    size_t cap = ev->keys_cap ? ev->keys_cap : 1024;
    while (cap < need)
        cap *= 2;
    char *p = realloc(ev->keys, cap);
    if (!p)
        return -ENOMEM;
    ev->keys = p;
    ev->keys_cap = cap;
    return 0;
}

static const struct spop_data *find_arg(const struct spop_message *m, const char *name)
{
    size_t len = strlen(name);
    for (unsigned i = 0; i < m->nargs; i++)
        if (m->args[i].name.len == len && memcmp(m->args[i].name.ptr, name, len) == 0)
            return &m->args[i].value;
    return NULL;
}

/* Whether every match of rule r holds for message m. The text is copied,
 * NUL-terminated, past the end of the keys (scratch space) for regexec. */
static int rule_matches(struct rule_eval *ev, const struct cfg_rule *r,
                        const struct spop_message *m, int *err)
{
    char num[64];
    const char *txt;

    for (size_t i = 0; i < r->nmatches; i++) {
        const struct spop_data *v = find_arg(m, r->matches[i].arg);
        int n;
        if (!v || (n = rules_value_text(v, num, sizeof(num), &txt)) < 0)
            return 0;
        if (keys_reserve(ev, (size_t)n + 1) < 0) {
            *err = -ENOMEM;
            return 0;
        }
        memcpy(ev->keys + ev->keys_len, txt, (size_t)n);
        ev->keys[ev->keys_len + (size_t)n] = '\0';
        if (regexec(&r->matches[i].re, ev->keys + ev->keys_len, 0, NULL, 0) != 0)
            return 0;
    }
    return 1;
}

/* Append the client key of rule r for message m. Returns 1 when built, 0
 * when an arg is missing or empty (the rule does not apply), <0 on error. */
static int build_key(struct rule_eval *ev, const struct cfg_rule *r, const struct spop_message *m,
                     size_t max_key, size_t *off, size_t *len)
{
    char num[64];
    const char *txt;
    size_t start = ev->keys_len;

    for (size_t i = 0; i < r->nkeys; i++) {
        const struct spop_data *v = find_arg(m, r->keys[i]);
        int n;
        if (!v || (n = rules_value_text(v, num, sizeof(num), &txt)) <= 0) {
            ev->keys_len = start;
            return 0;
        }
        if (keys_reserve(ev, (size_t)n + 2) < 0) {
            ev->keys_len = start;
            return -ENOMEM;
        }
        if (i > 0)
            ev->keys[ev->keys_len++] = KEY_SEP;
        memcpy(ev->keys + ev->keys_len, txt, (size_t)n);
        ev->keys_len += (size_t)n;
    }
    if (ev->keys_len - start > max_key) {
        /* Too long to keep: 128 bits of two differently seeded hashes. The
         * hash may be longer than the key it replaces (max_key can be 16):
         * room for it and its NUL is made first, so it is never cut. */
        uint64_t h1 = util_hash(UTIL_HASH_INIT, ev->keys + start, ev->keys_len - start);
        uint64_t h2 = util_hash(0x84222325cbf29ce4ULL, ev->keys + start, ev->keys_len - start);
        ev->keys_len = start;
        if (keys_reserve(ev, RULES_HASHED_KEY_LEN + 1) < 0)
            return -ENOMEM;
        int n = snprintf(ev->keys + start, ev->keys_cap - start, "#%016" PRIx64 "%016" PRIx64,
                         h1, h2);
        if (n != RULES_HASHED_KEY_LEN)
            return -ENOMEM; /* cannot happen: 1 + 2 x 16 hex digits */
        ev->keys_len += (size_t)n;
    }
    if (keys_reserve(ev, 1) < 0) {
        ev->keys_len = start;
        return -ENOMEM;
    }
    ev->keys[ev->keys_len] = '\0';
    *off = start;
    *len = ev->keys_len - start;
    ev->keys_len++; /* keep the NUL */
    return 1;
}

static int hits_push(struct rule_eval *ev, unsigned rule, size_t off, size_t len)
{
    if (ev->nhits == ev->hits_cap) {
        size_t cap = ev->hits_cap ? ev->hits_cap * 2 : 8;
        struct rule_hit *p = realloc(ev->hits, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        ev->hits = p;
        ev->hits_cap = cap;
    }
    struct rule_hit *h = &ev->hits[ev->nhits++];
    memset(h, 0, sizeof(*h));
    h->rule = rule;
    h->key_off = off;
    h->key_len = len;
    return 0;
}

static int already_hit(const struct rule_eval *ev, unsigned rule)
{
    for (size_t i = 0; i < ev->nhits; i++)
        if (ev->hits[i].rule == rule)
            return 1;
    return 0;
}

int rules_match(const struct ruleset *rs, const uint8_t *payload, size_t len,
                struct rule_eval *ev)
{
    const struct config *cfg = rs->cfg;
    struct spop_reader r = {payload, payload + len};
    struct spop_message m;
    int ret;

    rules_eval_reset(ev);
    while ((ret = spop_message_next(&r, &m)) == 1) {
        for (unsigned i = 0; i < cfg->nrules; i++) {
            const struct cfg_rule *rule = &cfg->rules[i];
            size_t off, klen;
            int err = 0;

            if (rule->message && (m.name.len != strlen(rule->message) ||
                                  memcmp(m.name.ptr, rule->message, m.name.len) != 0))
                continue;
            if (already_hit(ev, i))
                continue;
            if (!rule_matches(ev, rule, &m, &err)) {
                if (err)
                    return err;
                continue;
            }
            ret = build_key(ev, rule, &m, cfg->max_key, &off, &klen);
            if (ret < 0)
                return ret;
            if (ret == 0)
                continue;
            if (hits_push(ev, i, off, klen) < 0)
                return -ENOMEM;
        }
    }
    return ret < 0 ? SPOP_EINVAL : 0;
}

void rules_account(const struct ruleset *rs, const struct rule_eval *ev, uint64_t now_us)
{
    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *rule = &rs->cfg->rules[h->rule];
        struct metrics_rule *m = rs->metrics[h->rule];

        atomic_fetch_add_explicit(&m->minute_decisions, 1, memory_order_relaxed);
        if (h->out.degraded)
            atomic_fetch_add_explicit(&m->degraded, 1, memory_order_relaxed);
        if (h->out.res.allowed) {
            atomic_fetch_add_explicit(&m->allowed, 1, memory_order_relaxed);
            continue;
        }
        atomic_fetch_add_explicit(rule->shadow ? &m->would_block : &m->blocked, 1,
                                  memory_order_relaxed);
        if (rule->shadow)
            atomic_fetch_add_explicit(&m->shadow_pending, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&m->minute_blocks, 1, memory_order_relaxed);
        metrics_top_add(m, rules_hit_key(ev, h), h->key_len, now_us);
    }
}

/* The deciding non-shadow hit: the blocking one that asks for the longest
 * wait, else the one with the fewest remaining. NULL when none. */
static const struct rule_hit *deciding_hit(const struct ruleset *rs, const struct rule_eval *ev)
{
    const struct rule_hit *best = NULL;

    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        if (rs->cfg->rules[h->rule].shadow)
            continue;
        if (!best) {
            best = h;
        } else if (!h->out.res.allowed) {
            if (best->out.res.allowed || h->out.res.retry_us > best->out.res.retry_us)
                best = h;
        } else if (best->out.res.allowed && h->out.res.remaining < best->out.res.remaining) {
            best = h;
        }
    }
    return best;
}

int rules_blocked(const struct ruleset *rs, const struct rule_eval *ev)
{
    const struct rule_hit *h = deciding_hit(rs, ev);
    return h && !h->out.res.allowed;
}

static int put_var_int(struct spop_writer *w, const char *name, int64_t v)
{
    struct spop_data d = spop_int(v);
    return spop_put_set_var(w, SPOP_SCOPE_TXN, name, &d);
}

static int put_var_bool(struct spop_writer *w, const char *name, int v)
{
    struct spop_data d = spop_bool(v);
    return spop_put_set_var(w, SPOP_SCOPE_TXN, name, &d);
}

static int put_var_str(struct spop_writer *w, const char *name, const char *s)
{
    struct spop_data d = spop_string(s, strlen(s));
    return spop_put_set_var(w, SPOP_SCOPE_TXN, name, &d);
}

/* The numbers an ACK carries, clamped so that config_ack_max_size() bounds
 * its size: a bucket never holds more than its capacity (a Redis reply that
 * says otherwise is wrong), and waits are capped at RULES_MAX_SECONDS. */
static uint64_t clamp_remaining(const struct cfg_rule *rule, uint64_t remaining)
{
    uint64_t cap = rule->burst > rule->rate_n ? rule->burst : rule->rate_n;
    return remaining < cap ? remaining : cap;
}

static uint64_t clamp_seconds(uint64_t s)
{
    return s < RULES_MAX_SECONDS ? s : RULES_MAX_SECONDS;
}

/* Every variable of the ACK (interface.md). */
static int encode_full(struct spop_writer *w, const struct ruleset *rs, const struct rule_hit *h,
                       int would_block, int degraded)
{
    char buf[160];
    int ret;

    if ((ret = put_var_bool(w, "blocked", h && !h->out.res.allowed)) < 0)
        return ret;
    if (would_block && (ret = put_var_bool(w, "would_block", 1)) < 0)
        return ret;
    if (degraded && (ret = put_var_bool(w, "degraded", 1)) < 0)
        return ret;
    if (!h)
        return 0;

    const struct cfg_rule *rule = &rs->cfg->rules[h->rule];
    uint64_t reset = clamp_seconds(util_us_to_s_ceil(h->out.res.reset_us));
    uint64_t window = (rule->rate_period_ms + 999) / 1000;
    uint64_t remaining = clamp_remaining(rule, h->out.res.remaining);

    if ((ret = put_var_str(w, "rule", rule->name)) < 0 ||
        (ret = put_var_int(w, "limit", (int64_t)rule->rate_n)) < 0 ||
        (ret = put_var_int(w, "remaining", (int64_t)remaining)) < 0 ||
        (ret = put_var_int(w, "reset", (int64_t)reset)) < 0)
        return ret;
    if (!h->out.res.allowed) {
        uint64_t retry = clamp_seconds(util_us_to_s_ceil(h->out.res.retry_us));
        if ((ret = put_var_int(w, "retry_after", (int64_t)(retry ? retry : 1))) < 0)
            return ret;
    }
    snprintf(buf, sizeof(buf), "\"%s\";q=%" PRIu64 ";w=%" PRIu64, rule->name, rule->rate_n,
             window ? window : 1);
    if ((ret = put_var_str(w, "policy", buf)) < 0)
        return ret;
    snprintf(buf, sizeof(buf), "\"%s\";r=%" PRIu64 ";t=%" PRIu64, rule->name, remaining, reset);
    return put_var_str(w, "ratelimit", buf);
}

/* What must reach HAProxy whatever the frame size: the decision. */
static int encode_minimal(struct spop_writer *w, const struct rule_hit *h)
{
    int ret = put_var_bool(w, "blocked", h && !h->out.res.allowed);

    if (ret < 0 || !h || h->out.res.allowed)
        return ret;
    uint64_t retry = clamp_seconds(util_us_to_s_ceil(h->out.res.retry_us));
    return put_var_int(w, "retry_after", (int64_t)(retry ? retry : 1));
}

int rules_encode_actions(struct spop_writer *w, const struct ruleset *rs,
                         const struct rule_eval *ev)
{
    const struct rule_hit *h = deciding_hit(rs, ev);
    uint8_t *start = w->p;
    int would_block = 0, degraded = 0, ret;

    for (size_t i = 0; i < ev->nhits; i++) {
        if (rs->cfg->rules[ev->hits[i].rule].shadow && !ev->hits[i].out.res.allowed)
            would_block = 1;
        degraded |= ev->hits[i].out.degraded;
    }
    ret = encode_full(w, rs, h, would_block, degraded);
    if (ret != SPOP_ENOSPC)
        return ret;
    /* The negotiated frame is too small for every variable (HAProxy may
     * offer 256 bytes, and a rule name takes 40 three times). Without an
     * ACK the connection would be dropped and HAProxy would let the request
     * through: send the decision alone instead. */
    w->p = start;
    ret = encode_minimal(w, h);
    if (ret == 0)
        METRIC_INC(acks_truncated);
    return ret;
}
