/* SPDX-License-Identifier: Apache-2.0 */
/* history.c - five minutes of per-rule decisions and a minute of Redis
 * latency, sampled once a second (history.h). */
#include "history.h"

#include <stdlib.h>
#include <string.h>

enum { SERIES_DECISIONS, SERIES_BLOCKS, SERIES_WOULD_BLOCKS, SERIES_COUNT };

struct rule_history {
    const struct metrics_rule *rule;
    uint64_t last[SERIES_COUNT]; /* the counters at the previous sample */
    uint64_t last_s;             /* when that was; 0 before the first */
    uint32_t ring[SERIES_COUNT][HISTORY_SECONDS];
    unsigned head; /* where the next sample goes */
    unsigned n;    /* samples held */
};

struct history {
    struct rule_history *rules;
    size_t nrules, cap;
    /* Redis latency: the histogram's cumulative counts at each of the last
     * HISTORY_LATENCY_S + 1 samples, a ring. */
    uint64_t lat[HISTORY_LATENCY_S + 1][METRICS_HIST_BUCKETS];
    unsigned lat_head, lat_n;
    uint64_t down_since;
};

struct history *history_new(void)
{
    return calloc(1, sizeof(struct history));
}

void history_free(struct history *h)
{
    if (!h)
        return;
    free(h->rules);
    free(h);
}

static struct rule_history *find(const struct history *h, const struct metrics_rule *r)
{
    for (size_t i = 0; i < h->nrules; i++)
        if (h->rules[i].rule == r)
            return &h->rules[i];
    return NULL;
}

static struct rule_history *find_or_add(struct history *h, const struct metrics_rule *r)
{
    struct rule_history *rh = find(h, r);
    if (rh)
        return rh;
    if (h->nrules == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        struct rule_history *p = realloc(h->rules, cap * sizeof(*p));
        if (!p)
            return NULL;
        h->rules = p;
        h->cap = cap;
    }
    rh = &h->rules[h->nrules++];
    memset(rh, 0, sizeof(*rh));
    rh->rule = r;
    return rh;
}

static void push(struct rule_history *rh, const uint64_t *delta)
{
    for (int s = 0; s < SERIES_COUNT; s++)
        rh->ring[s][rh->head] = delta[s] > UINT32_MAX ? UINT32_MAX : (uint32_t)delta[s];
    rh->head = (rh->head + 1) % HISTORY_SECONDS;
    if (rh->n < HISTORY_SECONDS)
        rh->n++;
}

static void sample_rule(struct history *h, struct metrics_rule *r, uint64_t now_s)
{
    struct rule_history *rh = find_or_add(h, r);
    if (!rh)
        return;
    uint64_t allowed = metrics_ld(&r->allowed), blocked = metrics_ld(&r->blocked),
             wb = metrics_ld(&r->would_block);
    uint64_t cur[SERIES_COUNT] = {allowed + blocked, blocked, wb};
    if (rh->last_s && now_s > rh->last_s) {
        uint64_t delta[SERIES_COUNT], zero[SERIES_COUNT] = {0};
        for (int s = 0; s < SERIES_COUNT; s++)
            delta[s] = cur[s] >= rh->last[s] ? cur[s] - rh->last[s] : 0;
        /* Seconds without a sample hold nothing; the counts of the gap go
         * to the last of them. A gap longer than the window clears it. */
        uint64_t gap = now_s - rh->last_s;
        for (uint64_t k = 1; k < gap && k <= HISTORY_SECONDS; k++)
            push(rh, zero);
        push(rh, delta);
    }
    if (now_s >= rh->last_s) {
        memcpy(rh->last, cur, sizeof(cur));
        rh->last_s = now_s;
    }
}

static void sample_latency(struct history *h)
{
    uint64_t *snap = h->lat[h->lat_head];
    uint64_t cum = 0;
    for (unsigned i = 0; i < METRICS_HIST_BUCKETS; i++) {
        cum += metrics_ld(&metrics.redis_latency.buckets[i]);
        snap[i] = cum;
    }
    h->lat_head = (h->lat_head + 1) % (HISTORY_LATENCY_S + 1);
    if (h->lat_n < HISTORY_LATENCY_S + 1)
        h->lat_n++;
}

void history_sample(struct history *h, uint64_t now_s)
{
    for (struct metrics_rule *r = metrics_rules(); r; r = r->next)
        sample_rule(h, r, now_s);
    sample_latency(h);
    int configured = atomic_load_explicit(&metrics.redis_configured, memory_order_relaxed);
    int up = atomic_load_explicit(&metrics.redis_up, memory_order_relaxed);
    if (!configured || up)
        h->down_since = 0;
    else if (!h->down_since)
        h->down_since = now_s;
}

size_t history_rule(const struct history *h, const struct metrics_rule *r, uint64_t since,
                    uint32_t *decisions, uint32_t *blocks, uint32_t *would_blocks, uint64_t *last_s)
{
    const struct rule_history *rh = find(h, r);
    *last_s = 0;
    if (!rh || !rh->n)
        return 0;
    *last_s = rh->last_s;
    /* sample k (0 the oldest) is of second last_s - (n - 1 - k) */
    unsigned n = rh->n;
    if (since >= rh->last_s)
        n = 0;
    else if (since && rh->last_s - since < n)
        n = (unsigned)(rh->last_s - since);
    uint32_t *out[SERIES_COUNT] = {decisions, blocks, would_blocks};
    unsigned first = (rh->head + HISTORY_SECONDS - n) % HISTORY_SECONDS;
    for (unsigned k = 0; k < n; k++)
        for (int s = 0; s < SERIES_COUNT; s++)
            if (out[s])
                out[s][k] = rh->ring[s][(first + k) % HISTORY_SECONDS];
    return n;
}

double history_rule_rate(const struct history *h, const struct metrics_rule *r, unsigned n)
{
    const struct rule_history *rh = find(h, r);
    if (!rh || !rh->n || !n)
        return 0;
    if (n > rh->n)
        n = rh->n;
    uint64_t sum = 0;
    for (unsigned k = 1; k <= n; k++)
        sum += rh->ring[SERIES_DECISIONS][(rh->head + HISTORY_SECONDS - k) % HISTORY_SECONDS];
    return (double)sum / n;
}

double history_redis_latency(const struct history *h, double q)
{
    if (h->lat_n < 2)
        return -1;
    unsigned size = HISTORY_LATENCY_S + 1;
    const uint64_t *now = h->lat[(h->lat_head + size - 1) % size];
    const uint64_t *then = h->lat[(h->lat_head + size - h->lat_n) % size];
    uint64_t total = now[METRICS_HIST_BUCKETS - 1] - then[METRICS_HIST_BUCKETS - 1];
    if (total == 0)
        return -1;
    double want = q * (double)total;
    for (unsigned i = 0; i < METRICS_HIST_BUCKETS; i++)
        if ((double)(now[i] - then[i]) >= want)
            return metrics_hist_bound_s(i);
    return metrics_hist_bound_s(METRICS_HIST_BUCKETS - 1);
}

uint64_t history_redis_down_since(const struct history *h)
{
    return h->down_since;
}
