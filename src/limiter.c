/* limiter.c - decisions from in-memory buckets. */
#include "limiter.h"

#include <stdlib.h>
#include <string.h>

#include "metrics.h"

#define LIMITER_STRIPES 64

struct limiter *limiter_new(void)
{
    struct limiter *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->buckets = bucket_table_new(LIMITER_STRIPES);
    l->backstop = bucket_table_new(LIMITER_STRIPES);
    if (!l->buckets || !l->backstop) {
        limiter_free(l);
        return NULL;
    }
    return l;
}

void limiter_free(struct limiter *l)
{
    if (!l)
        return;
    bucket_table_free(l->buckets);
    bucket_table_free(l->backstop);
    free(l);
}

int limiter_decide(struct limiter *l, const struct ruleset *rs, struct rule_eval *ev,
                   uint64_t now_us)
{
    for (size_t i = 0; i < ev->nhits; i++) {
        struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *r = &rs->cfg->rules[h->rule];

        bucket_table_take(l->buckets, r->name, rules_hit_key(ev, h), h->key_len,
                          &rs->params[h->rule], now_us, 1, &h->out.res);
        h->out.degraded = 0;
    }
    return 0;
}

static const struct bucket_params *params_of(void *ctx, const char *rule)
{
    const struct ruleset *rs = ctx;
    for (size_t i = 0; i < rs->cfg->nrules; i++)
        if (strcmp(rs->cfg->rules[i].name, rule) == 0)
            return &rs->params[i];
    return NULL;
}

static const struct bucket_params *backstop_of(void *ctx, const char *rule)
{
    const struct ruleset *rs = ctx;
    for (size_t i = 0; i < rs->cfg->nrules; i++)
        if (strcmp(rs->cfg->rules[i].name, rule) == 0)
            return &rs->backstop[i];
    return NULL;
}

size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit)
{
    size_t n = bucket_table_expire(l->buckets, now_us, max_visit, params_of, (void *)rs);
    n += bucket_table_expire(l->backstop, now_us, max_visit, backstop_of, (void *)rs);
    atomic_store(&metrics.buckets,
                 bucket_table_count(l->buckets) + bucket_table_count(l->backstop));
    return n;
}
