/* SPDX-License-Identifier: Apache-2.0 */
/* rules_set.c - a ruleset: a configuration in its runtime form (each rule's
 * limits, its fail-open backstop, its metrics record, its encoded ACK head),
 * shared by reference so that a reload never frees one under a request. */
#include "rules.h"

#include <stdlib.h>
#include <string.h>

#include "limits/fleet.h"

/* What ruleset_new allocates, not the config; NULL is a no-op. */
static void ruleset_free(struct ruleset *rs)
{
    if (!rs)
        return;
    free(rs->params);
    free(rs->backstop);
    free(rs->metrics);
    free(rs->ack_heads);
    free(rs->bucket_seeds);
    free(rs->redis_heads);
    free(rs);
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
    rs->ack_heads = calloc(n, sizeof(*rs->ack_heads));
    rs->bucket_seeds = calloc(n, sizeof(*rs->bucket_seeds));
    if (!rs->params || !rs->backstop || !rs->metrics || !rs->ack_heads || !rs->bucket_seeds)
        goto fail;
    rs->backstop_share = fleet_share(cfg->fallback_share);
    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        struct bucket_params *p = &rs->params[i];

        p->algorithm = r->algorithm;
        if (r->algorithm == BUCKET_CONCURRENCY)
            rs->has_concurrency = 1;
        /* A rule whose rate comes from an arg gets its ceiling here: what
         * requests get at most (the per-request limits are in the hits). */
        p->limit = r->rate_arg ? r->max_rate_n : r->rate_n;
        p->period_us = (r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms) * 1000;
        p->burst = r->burst_arg || !r->burst ? r->max_burst : r->burst;
        p->block_us = r->block_for_ms * 1000;
        p->offset_us = r->window_offset_ms * 1000;
        p->period_ms = r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms;
        p->block_ms = r->block_for_ms;
        p->offset_ms = r->window_offset_ms;
        p->fed = r->scope == SCOPE_GLOBAL;
        rules_backstop_params(p, rs->backstop_share, &rs->backstop[i]);
        rs->bucket_seeds[i] = bucket_rule_seed(r->name, r->name_len);
        rs->metrics[i] = metrics_rule_get(r->name);
        if (!rs->metrics[i])
            goto fail;
    }
    if (rules_ack_heads_build(rs) < 0)
        goto fail;
    atomic_init(&rs->refs, 1);
    return rs;
fail:
    ruleset_free(rs);
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
    ruleset_free(rs);
}

/* The tag after the prefix: one per algorithm (the scripts' key families;
 * lua/README.md). */
const char *rules_redis_tag(enum bucket_algorithm a)
{
    return a == BUCKET_FIXED_WINDOW     ? "fw:"
           : a == BUCKET_SLIDING_WINDOW ? "sw:"
           : a == BUCKET_CONCURRENCY    ? "cc:"
                                        : "t2:";
}

int ruleset_redis_heads(struct ruleset *rs, const char *prefix)
{
    size_t n = rs->cfg->nrules ? rs->cfg->nrules : 1, pl = prefix ? strlen(prefix) : 0;
    struct rules_redis_head *h = calloc(n, sizeof(*h));

    if (!h)
        return -1;
    for (size_t i = 0; i < rs->cfg->nrules; i++) {
        const struct cfg_rule *r = &rs->cfg->rules[i];
        size_t len = pl + 3 + r->name_len + 1;
        if (len > sizeof(h[i].s)) {
            free(h);
            return -1;
        }
        memcpy(h[i].s, prefix, pl);
        memcpy(h[i].s + pl, rules_redis_tag(r->algorithm), 3);
        memcpy(h[i].s + pl + 3, r->name, r->name_len);
        h[i].s[len - 1] = ':';
        h[i].len = (uint8_t)len;
    }
    free(rs->redis_heads);
    rs->redis_heads = h;
    return 0;
}
