/* SPDX-License-Identifier: Apache-2.0 */
/* rules_ack.c - the ACK a decision sends: which hit decides, and the
 * variables of doc/haproxy.md as SPOP set-var actions (a fixed rule's first
 * ones encoded once per ruleset, its last ones from a template). */
#include "rules.h"

#include <string.h>

#include "core/util.h"
#include "metrics/metrics.h"

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

/* The ACK's variable names are literals: their length is known here. */
#define VAR(name) name, sizeof(name) - 1

static int put_var_int(struct spop_writer *w, const char *name, size_t len, int64_t v)
{
    return spop_put_set_var_int(w, SPOP_SCOPE_TXN, name, len, v);
}

static int put_var_bool(struct spop_writer *w, const char *name, size_t len, int v)
{
    struct spop_data d = spop_bool(v);
    return spop_put_set_var_len(w, SPOP_SCOPE_TXN, name, len, &d);
}

static int put_var_str(struct spop_writer *w, const char *name, size_t len, const char *s,
                       size_t slen)
{
    return spop_put_set_var_str(w, SPOP_SCOPE_TXN, name, len, s, slen);
}

/* The numbers an ACK carries, clamped so that config_ack_max_size() bounds
 * its size: a bucket never holds more than its capacity (a Redis reply that
 * says otherwise is wrong), and waits are capped at RULES_MAX_SECONDS. */
static uint64_t clamp_remaining(const struct bucket_params *p, uint64_t remaining)
{
    uint64_t cap = p->burst > p->limit ? p->burst : p->limit;
    return remaining < cap ? remaining : cap;
}

static uint64_t clamp_seconds(uint64_t s)
{
    return s < RULES_MAX_SECONDS ? s : RULES_MAX_SECONDS;
}

/* The longest header_field(): a quoted rule name, two keys and numbers. */
#define HEADER_FIELD_MAX (2 + CFG_MAX_NAME + 2 * (2 + UTIL_U64_DEC_MAX + 1) + 1)

/* "\"name\";k1=v1;k2=v2" (RateLimit-Policy / RateLimit) into buf of
 * HEADER_FIELD_MAX bytes; returns its length. Not snprintf: this is in every
 * ACK. */
static size_t header_field(char *buf, const char *name, size_t n, char k1, uint64_t v1, char k2,
                           uint64_t v2)
{
    char *p = buf;

    *p++ = '"';
    memcpy(p, name, n);
    p += n;
    *p++ = '"';
    *p++ = ';';
    *p++ = k1;
    *p++ = '=';
    p += util_u64_dec(p, v1);
    *p++ = ';';
    *p++ = k2;
    *p++ = '=';
    p += util_u64_dec(p, v2);
    return (size_t)(p - buf);
}

/* The ACK's first variables: the decision, then what is fixed per rule
 * unless its limits come from args (rule, limit, policy). */
static int put_head(struct spop_writer *w, const struct ruleset *rs, size_t rule_i,
                    const struct bucket_params *p, int blocked)
{
    const char *name = rs->cfg->rules[rule_i].name;
    size_t name_len = rs->cfg->rules[rule_i].name_len, n;
    uint64_t window = (p->period_us / 1000 + 999) / 1000; /* the request's own window */
    char buf[HEADER_FIELD_MAX];
    int ret;

    if ((ret = put_var_bool(w, VAR("blocked"), blocked)) < 0 ||
        (ret = put_var_str(w, VAR("rule"), name, name_len)) < 0 ||
        (ret = put_var_int(w, VAR("limit"), (int64_t)p->limit)) < 0)
        return ret;
    n = header_field(buf, name, name_len, 'q', p->limit, 'w', window ? window : 1);
    return put_var_str(w, VAR("policy"), buf, n);
}

/* The tail template's parts (struct rules_ack_head): the set-var heads of
 * remaining and reset through their type byte, of ratelimit through its
 * type (its length follows); sizes from the names, checked against the
 * encoder at build. */
#define TAIL_REMAINING (5 + sizeof("remaining") - 1)
#define TAIL_RESET (5 + sizeof("reset") - 1)
#define TAIL_RATELIMIT (5 + sizeof("ratelimit") - 1)
#define TAIL_HEADS (TAIL_REMAINING + TAIL_RESET + TAIL_RATELIMIT)
/* A ratelimit value ("NAME";r=N;t=N) is below 240 bytes: its length is one
 * byte on the wire (an SPOP varint under 240). */
_Static_assert(2 + CFG_MAX_NAME + 2 * (3 + UTIL_U64_DEC_MAX) < 240, "one length byte");
_Static_assert(TAIL_HEADS + CFG_MAX_NAME + 5 <= RULES_ACK_TAIL_MAX, "tail template room");

/* One set-var head as put_var_int/put_var_str would write it, without its
 * value (the last byte: int 0, or the empty string's length), at p.
 * Returns 0, or -1 when the encoder wrote another length than want. */
static int tail_part(uint8_t *p, const char *name, size_t len, int is_str, size_t want)
{
    uint8_t tmp[64];
    struct spop_writer w = {tmp, tmp + sizeof(tmp)};

    if ((is_str ? put_var_str(&w, name, len, "", 0) : put_var_int(&w, name, len, 0)) < 0 ||
        (size_t)(w.p - tmp) != want + 1)
        return -1;
    memcpy(p, tmp, want);
    return 0;
}

/* The tail template of fixed rule i: see struct rules_ack_head. */
static void tail_build(struct rules_ack_head *ah, const struct cfg_rule *r)
{
    uint8_t *p = ah->tail;

    ah->tail_len = 0;
    if (tail_part(p, VAR("remaining"), 0, TAIL_REMAINING) < 0 ||
        tail_part(p + TAIL_REMAINING, VAR("reset"), 0, TAIL_RESET) < 0 ||
        tail_part(p + TAIL_REMAINING + TAIL_RESET, VAR("ratelimit"), 1, TAIL_RATELIMIT) < 0)
        return; /* encoded per ACK: the same bytes, slower */
    p += TAIL_HEADS;
    *p++ = '"';
    memcpy(p, r->name, r->name_len);
    p += r->name_len;
    memcpy(p, "\";r=", 4);
    ah->tail_len = TAIL_HEADS + r->name_len + 5;
}

/* put_head() of each fixed rule, allowed and blocked, encoded once when the
 * ruleset is built: an ACK copies it; and the template of its tail. */
int rules_ack_heads_build(struct ruleset *rs)
{
    for (size_t i = 0; i < rs->cfg->nrules; i++) {
        struct rules_ack_head *ah = &rs->ack_heads[i];
        if (config_rule_per_request(&rs->cfg->rules[i]))
            continue; /* len 0: encoded per ACK */
        for (int b = 0; b < 2; b++) {
            struct spop_writer w = {ah->bytes[b], ah->bytes[b] + sizeof(ah->bytes[b])};
            if (put_head(&w, rs, i, &rs->params[i], b) < 0)
                return -1;
            ah->len[b] = (size_t)(w.p - ah->bytes[b]);
        }
        tail_build(ah, &rs->cfg->rules[i]);
    }
    return 0;
}

/* An allowed ACK's remaining, reset and ratelimit from the rule's template:
 * the bytes put_var_int, put_var_int and put_var_str write, with one room
 * check and no name copied per variable (every allowed decision of a hot
 * key comes here). Returns 0, or 1 when w has not the room for any values:
 * nothing written then. */
static int put_tail(struct spop_writer *w, const struct rules_ack_head *ah, size_t name_len,
                    uint64_t remaining, uint64_t reset)
{
    uint8_t *p = w->p, *lenp;

    if ((size_t)(w->end - p) <
        ah->tail_len + 2 * SPOP_VARINT_MAX_LEN + 1 + 3 + 2 * UTIL_U64_DEC_MAX)
        return 1;
    memcpy(p, ah->tail, TAIL_REMAINING);
    p += TAIL_REMAINING;
    p += spop_varint_encode(p, remaining); /* room checked: in place */
    memcpy(p, ah->tail + TAIL_REMAINING, TAIL_RESET);
    p += TAIL_RESET;
    p += spop_varint_encode(p, reset);
    memcpy(p, ah->tail + TAIL_REMAINING + TAIL_RESET, TAIL_RATELIMIT);
    p += TAIL_RATELIMIT;
    lenp = p++;
    memcpy(p, ah->tail + TAIL_HEADS, name_len + 5);
    p += name_len + 5;
    p += util_u64_dec((char *)p, remaining);
    memcpy(p, ";t=", 3);
    p += 3;
    p += util_u64_dec((char *)p, reset);
    *lenp = (uint8_t)(p - lenp - 1);
    w->p = p;
    return 0;
}

/* Every variable of the ACK (doc/haproxy.md, Variables the agent sets). */
static int encode_full(struct spop_writer *w, const struct ruleset *rs, const struct rule_hit *h,
                       int would_block, int degraded)
{
    char buf[HEADER_FIELD_MAX];
    int blocked = h && !h->out.res.allowed, ret;

    if (!h)
        ret = put_var_bool(w, VAR("blocked"), 0);
    else if (rs->ack_heads[h->rule].len[blocked])
        ret = spop_put_encoded(w, rs->ack_heads[h->rule].bytes[blocked],
                               rs->ack_heads[h->rule].len[blocked]);
    else
        ret = put_head(w, rs, h->rule, &h->params, blocked);
    if (ret < 0)
        return ret;
    if (would_block && (ret = put_var_bool(w, VAR("would_block"), 1)) < 0)
        return ret;
    if (degraded && (ret = put_var_bool(w, VAR("degraded"), 1)) < 0)
        return ret;
    if (!h)
        return 0;

    uint64_t reset = clamp_seconds(util_us_to_s_ceil(h->out.res.reset_us));
    uint64_t remaining = clamp_remaining(&h->params, h->out.res.remaining);
    const struct rules_ack_head *ah = &rs->ack_heads[h->rule];
    size_t n;

    /* a fixed rule's template (len[] 0: a rule with limits from args) */
    if (!blocked && ah->len[0] && ah->tail_len &&
        put_tail(w, ah, rs->cfg->rules[h->rule].name_len, remaining, reset) == 0)
        return 0;
    if ((ret = put_var_int(w, VAR("remaining"), (int64_t)remaining)) < 0 ||
        (ret = put_var_int(w, VAR("reset"), (int64_t)reset)) < 0)
        return ret;
    if (blocked) {
        uint64_t retry = clamp_seconds(util_us_to_s_ceil(h->out.res.retry_us));
        if ((ret = put_var_int(w, VAR("retry_after"), (int64_t)(retry ? retry : 1))) < 0)
            return ret;
    }
    const struct cfg_rule *rule = &rs->cfg->rules[h->rule];
    n = header_field(buf, rule->name, rule->name_len, 'r', remaining, 't', reset);
    return put_var_str(w, VAR("ratelimit"), buf, n);
}

/* The slot var of an admitted request: the tokens of the slots its hits
 * took, space separated (doc/concurrency.md). None when blocked: a blocked
 * request's slots were given back (limiter_settle). Tokens that do not fit
 * in the frame are left out: their slots free themselves after max_hold. */
static int put_slot(struct spop_writer *w, const struct ruleset *rs, const struct rule_eval *ev)
{
    char buf[RULES_SLOT_TOKENS_MAX * (RULES_SLOT_TOKEN_MAX + 1)];
    size_t n = 0;

    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *r = &rs->cfg->rules[h->rule];
        char skey[RULES_SLOT_KEY_MAX + 1];

        if (!h->slot_id || n + RULES_SLOT_TOKEN_MAX + 1 > sizeof(buf))
            continue;
        int sk = rules_slot_key(rules_hit_key(ev, h), h->key_len, skey);
        if (sk < 0)
            continue;
        if (n)
            buf[n++] = ' ';
        n += rules_slot_token(buf + n, r->name, r->name_len, h->slot_src, h->slot_id, skey,
                              (size_t)sk);
    }
    if (n == 0)
        return 0;
    uint8_t *start = w->p;
    int ret = put_var_str(w, VAR("slot"), buf, n);
    if (ret == SPOP_ENOSPC)
        w->p = start;
    return ret;
}

/* What must reach HAProxy whatever the frame size: the decision. */
static int encode_minimal(struct spop_writer *w, const struct rule_hit *h)
{
    int ret = put_var_bool(w, VAR("blocked"), h && !h->out.res.allowed);

    if (ret < 0 || !h || h->out.res.allowed)
        return ret;
    uint64_t retry = clamp_seconds(util_us_to_s_ceil(h->out.res.retry_us));
    return put_var_int(w, VAR("retry_after"), (int64_t)(retry ? retry : 1));
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
    if (ret == 0 && rs->has_concurrency && !(h && !h->out.res.allowed))
        ret = put_slot(w, rs, ev);
    if (ret != SPOP_ENOSPC)
        return ret;
    /* The negotiated frame is too small for every variable (HAProxy may
     * offer 256 bytes, and a rule name takes 40 three times). Without an
     * ACK the connection would be dropped and HAProxy would let the request
     * through: send the decision alone instead. */
    w->p = start;
    ret = encode_minimal(w, h);
    if (ret == 0 && rs->has_concurrency && !(h && !h->out.res.allowed))
        (void)put_slot(w, rs, ev); /* the decision is in: the slot too if it fits */
    if (ret == 0)
        METRIC_INC(acks_truncated);
    return ret;
}
