/* SPDX-License-Identifier: Apache-2.0 */
/* rules.c - rule matching and client keys. A ruleset is built in
 * rules_set.c; the ACK a decision sends is rules_ack.c. */
#include "rules.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "limits/fleet.h"
#include "metrics/mismatch.h"
#include "rules_key.h"

#define KEY_SEP '|'
/* Before the limits in the key of a rule with limits from args: a control
 * byte, which no HTTP header value holds. */
#define LIMITS_SEP '\x1f'
#define ARG_TEXT_MAX 64    /* the longest rate or burst taken from an arg */
#define SHARE_EPSILON 1e-9 /* share x burst a hair under an integer counts as it */

void rules_backstop_params(const struct bucket_params *p, double share, struct bucket_params *b)
{
    /* The backstop keeps N and stretches the period: share x rate without
     * fractional N, never 0; its burst is share x burst rounded down, at
     * least 1 (a fallback that opens: every agent passes some requests).
     * The tiny margin keeps 1/3 x 9 at 3, not 2.999... */
    *b = *p;
    /* A tiny share would stretch the period past what a uint64_t holds (a
     * conversion out of range is undefined: it gave 0, no limit at all):
     * rules_backstop_period() caps it at BUCKET_MAX_PERIOD_US. */
    b->period_us = rules_backstop_period(p->period_us, share);
    b->period_ms = 0; /* stretched: a local bucket's, never a script's */
    b->burst = (uint64_t)(share * (double)p->burst + SHARE_EPSILON);
    if (b->burst < 1)
        b->burst = 1;
    if (bucket_windowed(p->algorithm) || p->algorithm == BUCKET_CONCURRENCY) {
        /* a window's N, a concurrency limit: share x N of the same period (a
         * fixed window keeps its offset too: share x N per window) */
        b->period_us = p->period_us;
        b->period_ms = p->period_ms;
        b->limit = (uint64_t)(share * (double)p->limit + SHARE_EPSILON);
        if (b->limit < 1)
            b->limit = 1;
    }
}

/* Compares a/b with c/d (b, d > 0) exactly: -1, 0 or 1. Products of a rate's
 * N (up to 1e15) and a period in ms (up to 1.8e16) overflow 64 bits, so this
 * compares integer parts, then the inverses of the remainders (Euclid). */
static int frac_cmp(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    int sign = 1;

    for (;;) {
        uint64_t qa = a / b, qc = c / d, ra = a % b, rc = c % d;

        if (qa != qc)
            return qa < qc ? -sign : sign;
        if (ra == 0 || rc == 0)
            return ra == rc ? 0 : ra == 0 ? -sign : sign;
        /* ra/b < rc/d exactly when b/ra > d/rc */
        a = b;
        b = ra;
        c = d;
        d = rc;
        sign = -sign;
    }
}

int rules_rate_above(uint64_t n1, uint64_t p1, uint64_t n2, uint64_t p2)
{
    return frac_cmp(n1, p1, n2, p2) > 0;
}

uint64_t rules_backstop_period(uint64_t period_us, double share)
{
    double us = (double)period_us / share;

    if (!(us < (double)BUCKET_MAX_PERIOD_US)) /* NaN and inf too */
        return BUCKET_MAX_PERIOD_US;
    return us < 1 ? 1 : (uint64_t)us;
}

void rules_eval_reset(struct rule_eval *ev)
{
    ev->nhits = 0;
    ev->keys_len = 0;
    ev->nreleases = 0;
}

void rules_eval_free(struct rule_eval *ev)
{
    free(ev->hits);
    free(ev->keys);
    rx_scratch_free(&ev->re);
    free(ev->releases);
    memset(ev, 0, sizeof(*ev));
}

void rules_eval_move(struct rule_eval *dst, struct rule_eval *src)
{
    *dst = *src;
    memset(src, 0, sizeof(*src));
}

/* memcmp(a, b, n) == 0 inline: an arg's name is a few bytes, shorter than
 * the call. */
static int same_bytes(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The arg called name (len bytes) in m, or NULL. */
static const struct spop_data *find_arg_len(const struct spop_message *m, const char *name,
                                            size_t len)
{
    for (unsigned i = 0; i < m->nargs; i++)
        if (m->args[i].name.len == len && same_bytes(m->args[i].name.ptr, name, len))
            return &m->args[i].value;
    return NULL;
}

static const struct spop_data *find_arg(const struct spop_message *m, const char *name)
{
    return find_arg_len(m, name, strlen(name));
}

/* Why a rule did not apply, for the mismatch counters. */
struct why {
    const char *absent;            /* an argument the rule keys or matches on was not sent at all */
    const char *failed;            /* the argument whose value failed a match, and its text: */
    size_t failed_off, failed_len; /*   in ev->keys scratch, valid until the next append */
};

/* Whether every match of rule r holds for message m. A text that fails is
 * copied past the end of the keys (scratch space), where the mismatch
 * counters find it. A match that a limit of core/rx.h stopped counts as no
 * match (the rule does not apply), and in match_limited. */
static int rule_matches(struct rule_eval *ev, const struct cfg_rule *r,
                        const struct spop_message *m, int *err, struct why *why)
{
    char num[64];
    const char *txt;

    for (size_t i = 0; i < r->nmatches; i++) {
        const struct spop_data *v = find_arg(m, r->matches[i].arg);
        int n;
        if (!v) {
            why->absent = r->matches[i].arg;
            return 0;
        }
        if ((n = rules_value_text(v, num, sizeof(num), &txt)) < 0)
            return 0;
        int hit = rx_match(r->matches[i].re, txt, (size_t)n, &ev->re);
        if (hit == 1)
            continue;
        if (hit == RX_ELIMIT)
            METRIC_INC(match_limited);
        if ((hit < 0 && hit != RX_ELIMIT) || rules_keys_reserve(ev, (size_t)n + 1) < 0) {
            *err = -ENOMEM;
            return 0;
        }
        memcpy(ev->keys + ev->keys_len, txt, (size_t)n);
        why->failed = r->matches[i].arg;
        why->failed_off = ev->keys_len;
        why->failed_len = (size_t)n;
        return 0;
    }
    return 1;
}

/* Append the client key of rule r for message m (not finished: see
 * finish_key). Returns 1 when built, 0 when an arg is missing or empty (the
 * rule does not apply; nothing appended), <0 on error. */
static int build_key(struct rule_eval *ev, const struct cfg_rule *r, const struct spop_message *m,
                     struct why *why)
{
    char num[64];
    const char *txt;
    size_t start = ev->keys_len;

    for (size_t i = 0; i < r->nkeys; i++) {
        /* the name's length from the config: no strlen per hit */
        const struct spop_data *v = find_arg_len(m, r->keys[i], r->key_lens[i]);
        int n;
        if (!v)
            why->absent = r->keys[i]; /* never sent, unlike a NULL or empty value */
        if (!v || (n = rules_value_text(v, num, sizeof(num), &txt)) <= 0) {
            ev->keys_len = start;
            return 0;
        }
        if (rules_keys_reserve(ev, (size_t)n + 2) < 0) {
            ev->keys_len = start;
            return -ENOMEM;
        }
        if (i > 0)
            ev->keys[ev->keys_len++] = KEY_SEP;
        memcpy(ev->keys + ev->keys_len, txt, (size_t)n);
        ev->keys_len += (size_t)n;
    }
    return 1;
}

/* Finish the key built from start: append the limits when they are the
 * request's own (LIMITS_SEP, then N/PERIODms/BURST: exact and canonical, so
 * that two limits never share a key), hash it when longer than max_key, and
 * NUL-terminate it. Returns 0 with *off and *len set, or -ENOMEM (nothing
 * appended then). */
static int finish_key(struct rule_eval *ev, size_t start, const struct bucket_params *limits,
                      size_t max_key, size_t *off, size_t *len)
{
    if (limits) {
        char buf[80];
        int n = snprintf(buf, sizeof(buf), "%c%" PRIu64 "/%" PRIu64 "ms/%" PRIu64, LIMITS_SEP,
                         limits->limit, limits->period_us / 1000, limits->burst);
        if (rules_keys_reserve(ev, (size_t)n) < 0) {
            ev->keys_len = start;
            return -ENOMEM;
        }
        memcpy(ev->keys + ev->keys_len, buf, (size_t)n);
        ev->keys_len += (size_t)n;
    }
    if (ev->keys_len - start > max_key ||
        (ev->keys_len > start && ev->keys[start] == HASHED_KEY_MARK)) {
        /* Too long to keep, or looks like a hash: hashed (rules_hash_key). The
         * hash may be longer than the key it replaces (max_key can be 16):
         * room for it and its NUL is made first, so it is never cut. */
        char h[RULES_HASHED_KEY_LEN + 1];
        rules_hash_key(h, ev->keys + start, ev->keys_len - start, "", 0);
        ev->keys_len = start;
        if (rules_keys_reserve(ev, RULES_HASHED_KEY_LEN + 1) < 0)
            return -ENOMEM;
        memcpy(ev->keys + start, h, RULES_HASHED_KEY_LEN);
        ev->keys_len += RULES_HASHED_KEY_LEN;
    }
    if (rules_keys_reserve(ev, 1) < 0) {
        ev->keys_len = start;
        return -ENOMEM;
    }
    ev->keys[ev->keys_len] = '\0';
    *off = start;
    *len = ev->keys_len - start;
    ev->keys_len++; /* keep the NUL */
    return 0;
}

/* The text of arg name of m, NUL-terminated in buf (cap bytes): 1 when it
 * fits, -1 when longer (buf holds its start), 0 when NULL or empty, or never
 * sent (why->absent is set then). */
static int arg_text(const struct spop_message *m, const char *name, char *buf, size_t cap,
                    struct why *why)
{
    char num[64];
    const char *txt;
    const struct spop_data *v = find_arg(m, name);
    int n;

    if (!v) {
        why->absent = name;
        return 0;
    }
    if ((n = rules_value_text(v, num, sizeof(num), &txt)) <= 0)
        return 0;
    size_t len = (size_t)n < cap ? (size_t)n : cap - 1;
    memcpy(buf, txt, len);
    buf[len] = '\0';
    return (size_t)n < cap ? 1 : -1;
}

/* An arg that does not hold a valid rate or burst: counted like a missing
 * one, with "NAME=VALUE" as the example. Returns 0: the rule does not apply. */
static int arg_invalid(const struct cfg_rule *r, const char *name, const char *text)
{
    char sample[MISMATCH_SAMPLE + 1];
    int n = snprintf(sample, sizeof(sample), "%s=%.40s", name, text);

    mismatch_note(MISMATCH_ARG, r->name, sample,
                  n < 0                         ? 0
                  : (size_t)n >= sizeof(sample) ? sizeof(sample) - 1
                                                : (size_t)n);
    return 0;
}

/* A burst: decimal digits, at most 19 (so no overflow), not 0. */
static int parse_burst(const char *s, uint64_t *v)
{
    size_t len = strlen(s);
    uint64_t n = 0;

    if (len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        n = n * 10 + (uint64_t)(s[i] - '0');
    }
    if (n == 0)
        return -1;
    *v = n;
    return 0;
}

int rules_request_limits(const struct ruleset *rs, unsigned i, const char *rate, const char *burst,
                         struct bucket_params *p, struct bucket_params *b)
{
    const struct cfg_rule *r = &rs->cfg->rules[i];

    *p = rs->params[i]; /* for a rule with a rate from an arg: its ceilings */
    *b = rs->backstop[i];
    /* share = auto follows the fleet: the backstop of now, not of the load
     * (rebuilt only when the share moved since the ruleset's: a float
     * division and a copy fewer per decision) */
    if (rs->cfg->fallback_share == CFG_SHARE_AUTO) {
        double share = fleet_share(CFG_SHARE_AUTO);
        if (share != rs->backstop_share)
            rules_backstop_params(p, share, b);
    }
    if (!config_rule_per_request(r))
        return 0;
    if (r->rate_arg) {
        uint64_t n, period_ms;

        if (!rate || config_parse_rate(rate, &n, &period_ms) == -1)
            return RULES_BAD_RATE;
        if (!rules_rate_above(n, period_ms, r->max_rate_n, r->max_rate_period_ms)) {
            p->limit = n;
            p->period_us = period_ms * 1000;
            p->period_ms = period_ms;
        }
        if (!r->burst_arg && !r->burst) /* the default burst: N of this rate */
            p->burst = p->limit < r->max_burst ? p->limit : r->max_burst;
        /* A sliding window admits N at once: N is its burst, so a long window
         * (1000000/1000m under a max_rate of 1000/1m) is bounded the same. */
        uint64_t cap = r->max_burst ? r->max_burst : r->max_rate_n;
        if (bucket_windowed(p->algorithm) && p->limit > cap)
            p->limit = cap;
    }
    if (r->burst_arg) {
        uint64_t v;

        if (!burst || parse_burst(burst, &v) == -1)
            return RULES_BAD_BURST;
        p->burst = v < r->max_burst ? v : r->max_burst;
    }
    rules_backstop_params(p, fleet_share(rs->cfg->fallback_share), b);
    return 0;
}

/* The limits of rule i for message m into *p and its backstop into *b: the
 * rule's own, or those its args ask for, each bounded by its ceiling.
 * Returns 1, or 0 when the rule does not apply to m (an arg is NULL, empty,
 * never sent: why->absent, or invalid: counted here). */
static int request_params(const struct ruleset *rs, unsigned i, const struct spop_message *m,
                          struct bucket_params *p, struct bucket_params *b, struct why *why)
{
    const struct cfg_rule *r = &rs->cfg->rules[i];
    char rate[ARG_TEXT_MAX + 1], burst[ARG_TEXT_MAX + 1];
    int ret;

    if (r->rate_arg && (ret = arg_text(m, r->rate_arg, rate, sizeof(rate), why)) <= 0) {
        if (ret == 0)
            return 0;
        return arg_invalid(r, r->rate_arg, rate);
    }
    if (r->burst_arg && (ret = arg_text(m, r->burst_arg, burst, sizeof(burst), why)) <= 0) {
        if (ret == 0)
            return 0;
        return arg_invalid(r, r->burst_arg, burst);
    }
    ret = rules_request_limits(rs, i, r->rate_arg ? rate : NULL, r->burst_arg ? burst : NULL, p, b);
    if (ret == RULES_BAD_RATE)
        return arg_invalid(r, r->rate_arg, rate);
    if (ret == RULES_BAD_BURST)
        return arg_invalid(r, r->burst_arg, burst);
    return 1;
}

/* The cost of one request under rule r (rules_match): its fixed cost, or
 * its cost arg's integer clamped to max_cost; a missing, empty or invalid
 * arg costs 1 and is counted as a mismatch. */
static uint64_t request_cost(const struct cfg_rule *r, const struct spop_message *m)
{
    char text[ARG_TEXT_MAX + 1];
    struct why why = {0};
    uint64_t v = 0;
    size_t len;
    int ret;

    if (!r->cost_arg)
        return r->cost;
    ret = arg_text(m, r->cost_arg, text, sizeof(text), &why);
    len = ret == 1 ? strlen(text) : 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') {
            len = 0;
            break;
        }
        if (v <= r->max_cost) /* past it, only the digits are checked: no overflow */
            v = v * 10 + (uint64_t)(text[i] - '0');
    }
    if (ret == 1 && len > 0)
        return v < r->max_cost ? v : r->max_cost;
    if (ret == 0)
        mismatch_note(MISMATCH_ARG, r->name, r->cost_arg, strlen(r->cost_arg));
    else
        arg_invalid(r, r->cost_arg, text);
    return 1;
}

/* Room for one more hit, not yet counted (ev->nhits), or NULL when out of
 * memory: request_params() writes the request's limits into it in place,
 * rather than into a copy that is then copied. */
static struct rule_hit *hits_next(struct rule_eval *ev)
{
    if (ev->nhits == ev->hits_cap) {
        size_t cap = ev->hits_cap ? ev->hits_cap * 2 : 8;
        struct rule_hit *grown = realloc(ev->hits, cap * sizeof(*grown));
        if (!grown)
            return NULL;
        ev->hits = grown;
        ev->hits_cap = cap;
    }
    return &ev->hits[ev->nhits];
}

/* Count the hit hits_next() gave, its limits already in place: the other
 * fields set, the outcome and the slot cleared (not the whole struct: its
 * limits are most of it). */
static void hits_push(struct rule_eval *ev, struct rule_hit *h, unsigned rule, size_t off,
                      size_t len)
{
    h->rule = rule;
    h->key_off = off;
    h->key_len = len;
    h->cost = 1;
    memset(&h->out, 0, sizeof(h->out));
    h->slot_id = 0;
    h->slot_src = 0;
    ev->nhits++;
}

static int already_hit(const struct rule_eval *ev, unsigned rule)
{
    for (size_t i = 0; i < ev->nhits; i++)
        if (ev->hits[i].rule == rule)
            return 1;
    return 0;
}

/* "message=NAME" and, when a match failed, " ARG=VALUE": what no rule applied to. */
static size_t no_rule_sample(char *buf, size_t cap, const struct spop_message *m,
                             const struct rule_eval *ev, const struct why *why)
{
    int n =
        snprintf(buf, cap, "message=%.*s", (int)(m->name.len > 40 ? 40 : m->name.len), m->name.ptr);
    if (why->failed && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " %s=%.*s", why->failed,
                      (int)(why->failed_len > 40 ? 40 : why->failed_len),
                      ev->keys + why->failed_off);
    return n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
}

/* The rules of rs that apply to message m, appended to ev. */
static int match_message(const struct ruleset *rs, const struct spop_message *m,
                         struct rule_eval *ev, char *sample, size_t *sample_len)
{
    const struct config *cfg = rs->cfg;
    struct why why = {0};
    int named = 0, ret;
    int release = rs->has_concurrency
                      ? rules_release_rule(cfg, (const char *)m->name.ptr, m->name.len)
                      : -1;

    if (release >= 0) /* gives slots back: no rule counts it as a request */
        return rules_match_release(rs, m, (unsigned)release, ev);
    for (unsigned i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *rule = &cfg->rules[i];
        struct rule_hit *h;
        size_t start = ev->keys_len, off, klen;
        int err = 0;

        if (rule->message && (m->name.len != strlen(rule->message) ||
                              memcmp(m->name.ptr, rule->message, m->name.len) != 0))
            continue;
        named = 1;
        if (already_hit(ev, i))
            continue;
        why.absent = NULL;
        if (!rule_matches(ev, rule, m, &err, &why)) {
            if (err)
                return err;
        } else if ((ret = build_key(ev, rule, m, &why)) < 0) {
            return ret;
        } else if (ret == 1 && !(h = hits_next(ev))) {
            return -ENOMEM;
        } else if (ret == 1 && !request_params(rs, i, m, &h->params, &h->backstop, &why)) {
            ev->keys_len = start;
        } else if (ret == 1) {
            if (finish_key(ev, start, config_rule_per_request(rule) ? &h->params : NULL,
                           cfg->max_key, &off, &klen) < 0)
                return -ENOMEM;
            hits_push(ev, h, i, off, klen);
            h->cost = request_cost(rule, m);
            continue;
        }
        if (why.absent)
            mismatch_note(MISMATCH_ARG, rule->name, why.absent, strlen(why.absent));
    }
    if (!named)
        mismatch_note(MISMATCH_MESSAGE, NULL, (const char *)m->name.ptr, m->name.len);
    /* Only read when no rule matched at all (rules_match), and once per
     * report period: not an snprintf per request. */
    if (!*sample_len && ev->nhits == 0 && mismatch_wanted(MISMATCH_NO_RULE))
        *sample_len = no_rule_sample(sample, MISMATCH_SAMPLE + 1, m, ev, &why);
    return 0;
}

int rules_match(const struct ruleset *rs, const uint8_t *payload, size_t len, struct rule_eval *ev)
{
    struct spop_reader r = {payload, payload + len};
    struct spop_message m;
    char sample[MISMATCH_SAMPLE + 1];
    size_t sample_len = 0;
    int ret;

    rules_eval_reset(ev);
    /* (at the end of the payload spop_message_next() returns 0: not called
     * for that, once per NOTIFY) */
    while ((ret = r.p < r.end ? spop_message_next(&r, &m) : 0) == 1) {
        int err = match_message(rs, &m, ev, sample, &sample_len);
        if (err)
            return err;
    }
    if (ret < 0)
        return SPOP_EINVAL;
    if (ev->nhits == 0 && ev->nreleases == 0)
        mismatch_note(MISMATCH_NO_RULE, NULL, sample, sample_len);
    return 0;
}

void rules_account(const struct ruleset *rs, const struct rule_eval *ev, uint64_t now_us)
{
    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *rule = &rs->cfg->rules[h->rule];
        struct metrics_rule *m = rs->metrics[h->rule];

        if (h->out.degraded)
            atomic_fetch_add_explicit(&m->degraded, 1, memory_order_relaxed);
        if (h->out.res.allowed) {
            metrics_rule_allowed(m);
            continue;
        }
        if (h->cost > rules_capacity(&h->params) && metrics_rule_cost_over(m, now_us))
            LOG_WARN("\"cost over the rule's capacity: denied, never passes\" rule=%s "
                     "cost=%" PRIu64 " capacity=%" PRIu64,
                     rule->name, h->cost, rules_capacity(&h->params));
        atomic_fetch_add_explicit(rule->shadow ? &m->would_block : &m->blocked, 1,
                                  memory_order_relaxed);
        /* A denial that starts a block waits the whole block_for; one
         * inside a running block waits less (its rest), and a cost over
         * the capacity (one period) starts none. */
        if (h->params.block_us && h->out.res.retry_us >= h->params.block_us &&
            h->cost <= rules_capacity(&h->params))
            atomic_fetch_add_explicit(&m->blocks_started, 1, memory_order_relaxed);
        if (rule->shadow)
            atomic_fetch_add_explicit(&m->shadow_pending, 1, memory_order_relaxed);
        metrics_top_add(m, rules_hit_key(ev, h), h->key_len, now_us, h->out.res.retry_us);
    }
}
