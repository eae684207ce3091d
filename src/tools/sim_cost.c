/* SPDX-License-Identifier: Apache-2.0 */
/* sim_cost.c - spoa-sim's models of a request's cost, the rule's block_for
 * and exact decisions (the rule's lease = off), as the agent has them:
 *
 * --cost MIN[:MAX]  each request takes a cost drawn uniformly from [MIN, MAX]
 *     (its own generator, seeded from --seed: the traffic is the same as
 *     without). A leased agent decides it as limiter_core.c's decide_leased:
 *     lease_decide_cost spends it from the lease when it holds it, else
 *     (LEASE_EXACT) one exact call with the cost (tb_exact / sw_exact, the
 *     ARGV of script_exact_args). The reference takes the cost from its
 *     bucket, and the bound b + r*T is checked in tokens.
 * --block-for D  the rule's block_for: a denial (of a cost that fits) starts
 *     a block of D during which every request on the key is denied. The
 *     scripts keep it (field bu, Redis time; claims and exact calls send
 *     it); a leased agent's cache remembers a blocked key until its retry
 *     time, the block's end (lease_cache.c's block_waiters, fill_blocked).
 *     The reference is bucket.c's own block. "Denied by a block": denied
 *     while a block ran on the key in Redis when the request arrived (for
 *     the reference, inside its own block).
 * --lease off  every decision one exact call, as a rule with lease = off.
 *
 * Not with --regions, --stall or --policy rate (sim_models_check). */
#include "tools/sim_fleet_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "tools/sim_redis.h"

/* An exact call: a lease_job with no entry (sim_cost_mine), carrying the
 * request it decides. */
struct exact_call {
    struct lease_job j; /* first */
    struct wait *w;
    unsigned ai; /* the agent that sent it */
    char key[KEYBUF];
};

int sim_models_check(const struct sim_opts *o, char *err, size_t errlen)
{
    if (!o->models)
        return 0;
    if (o->regions || o->stall_len_us || o->policy == SIM_POLICY_RATE) {
        snprintf(err, errlen,
                 "--cost, --block-for and --lease off: not with --regions, "
                 "--stall or --policy rate");
        return -1;
    }
    if (o->cost_min > o->cost_max) {
        snprintf(err, errlen, "bad --cost: want N or MIN:MAX with MIN <= MAX");
        return -1;
    }
    return 0;
}

void sim_cost_setup(struct sim *s)
{
    const struct sim_opts *o = s->o;

    s->p.block_ms = o->block_ms;
    s->p.block_us = o->block_ms * 1000;
    s->sc.p = s->p; /* the reference's block (sim_score_init copied p before) */
    s->sc.tokens = 1;
    sim_rng_seed(&s->cost_rng, o->seed ^ 0xc057ull);
}

uint64_t sim_cost_draw(struct sim *s)
{
    const struct sim_opts *o = s->o;
    uint64_t span = o->cost_max - o->cost_min + 1;

    if (span == 1)
        return o->cost_min;
    return o->cost_min + sim_rng_next(&s->cost_rng) % span;
}

int sim_cost_blocked(struct sim *s, const char *name, size_t len)
{
    return s->p.block_us && sim_redis_hget_u64(s->redis, name, len, "bu") > s->now;
}

void sim_cost_exact(struct sim *s, unsigned ai, const char *name, size_t len, struct wait *w)
{
    struct exact_call *x = calloc(1, sizeof(*x));

    if (!x) {
        s->oom = 1;
        return;
    }
    memcpy(x->key, name, len);
    x->w = w;
    x->ai = ai;
    x->j.kind = LEASE_JOB_EXACT;
    x->j.algorithm = s->p.algorithm;
    x->j.limit = s->p.limit;
    x->j.period_ms = s->p.period_ms;
    x->j.burst = s->p.burst;
    x->j.block_ms = s->p.block_ms;
    x->j.offset_ms = s->p.offset_ms;
    x->j.want = w->cost;
    x->j.key = x->key;
    x->j.keylen = len;
    s->res->models.exact_calls++;
    sim_fleet_conn_send(s, ai, &x->j, 1); /* limiter.c queues it, corked */
    sim_fleet_uncork(s, ai);
}

struct wait *sim_cost_reply(struct sim *s, struct lease_job *j, int ok, const int64_t *v, int nv)
{
    if (j->kind >= SIM_CC_ACQUIRE)
        return sim_cc_reply(s, j, ok, v, nv);
    struct exact_call *x = (struct exact_call *)j;
    struct wait *w = x->w;

    w->out.allowed = ok && nv >= EXACT_R_COUNT && v[EXACT_R_ALLOWED] == 1;
    /* limiter_core.c: a leased key's exact reply feeds its lease's estimates */
    if (ok && !s->o->lease_off)
        lease_note_exact(s->agents[x->ai].leases, x->key, x->j.keylen, v, nv, s->now);
    if (!(ok && nv >= EXACT_R_COUNT))
        w->w.fallback = 1;
    free(x);
    return w;
}

void sim_models_print(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_models *m = &r->models;

    if (!o->models)
        return;
    if (o->cc_limit) {
        printf("  concurrency: limit %llu, service %gms: at most %llu of a key in flight "
               "(must be <= the limit), %llu slots released\n",
               (unsigned long long)o->cc_limit, (double)o->service_us / 1e3,
               (unsigned long long)m->cc_max_inflight, (unsigned long long)m->cc_released);
        fflush(stdout);
        return;
    }
    printf("  models: cost %llu..%llu, block_for %llums, lease %s\n"
           "    tokens: %llu asked, %llu admitted (exact: %llu); %llu exact calls\n"
           "    blocks: %llu denied by a block (exact: %llu, in %llu blocks), %llu admitted "
           "in one from a lease\n",
           (unsigned long long)o->cost_min, (unsigned long long)o->cost_max,
           (unsigned long long)o->block_ms, o->lease_off ? "off" : "on",
           (unsigned long long)m->tokens, (unsigned long long)m->admitted_tokens,
           (unsigned long long)m->ref_admitted_tokens, (unsigned long long)m->exact_calls,
           (unsigned long long)m->block_denials, (unsigned long long)m->ref_block_denials,
           (unsigned long long)m->blocks_started, (unsigned long long)m->block_admits);
    fflush(stdout);
}

int sim_models_verdict(const struct sim_opts *o, const struct sim_result *r)
{
    if (!o->cc_limit || r->models.cc_max_inflight <= o->cc_limit)
        return 0;
    fprintf(stderr, "spoa-sim: %llu requests of one key in flight, over the limit %llu\n",
            (unsigned long long)r->models.cc_max_inflight, (unsigned long long)o->cc_limit);
    return -1;
}

void sim_models_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_models *m = &r->models;

    if (!o->models)
        return;
    if (o->cc_limit)
        strbuf_printf(b,
                      ",\"cc_limit\":%llu,\"service_ms\":%g,\"cc_max_inflight\":%llu,"
                      "\"cc_released\":%llu",
                      (unsigned long long)o->cc_limit, (double)o->service_us / 1e3,
                      (unsigned long long)m->cc_max_inflight, (unsigned long long)m->cc_released);
    strbuf_printf(b,
                  ",\"cost_min\":%llu,\"cost_max\":%llu,\"block_for_ms\":%llu,\"lease\":\"%s\","
                  "\"tokens\":%llu,\"admitted_tokens\":%llu,\"reference_admitted_tokens\":%llu,"
                  "\"exact_calls\":%llu,\"block_denials\":%llu,"
                  "\"reference_block_denials\":%llu,\"reference_blocks\":%llu,"
                  "\"block_admits\":%llu",
                  (unsigned long long)o->cost_min, (unsigned long long)o->cost_max,
                  (unsigned long long)o->block_ms, o->lease_off ? "off" : "on",
                  (unsigned long long)m->tokens, (unsigned long long)m->admitted_tokens,
                  (unsigned long long)m->ref_admitted_tokens, (unsigned long long)m->exact_calls,
                  (unsigned long long)m->block_denials, (unsigned long long)m->ref_block_denials,
                  (unsigned long long)m->blocks_started, (unsigned long long)m->block_admits);
}

int sim_models_opts(const char *cost, const char *lease, const char *cc, struct sim_opts *o,
                    char *err, size_t errlen)
{
    if (cc[0]) {
        char *end;
        o->cc_limit = strtoull(cc, &end, 10);
        if (*end || o->cc_limit < 1 || o->cc_limit > 1000000) {
            snprintf(err, errlen, "bad --concurrency: want a limit in 1..1000000");
            return -1;
        }
        if (o->service_us == 0) {
            snprintf(err, errlen, "bad --service: a duration > 0 (e.g. 100ms)");
            return -1;
        }
        if (cost[0] || lease[0] || o->block_ms) {
            snprintf(err, errlen, "--concurrency: not with --cost, --lease or --block-for");
            return -1;
        }
    }
    o->cost_min = o->cost_max = 1;
    if (cost[0]) {
        char *end;
        o->cost_min = strtoull(cost, &end, 10);
        o->cost_max = o->cost_min;
        if (*end == ':')
            o->cost_max = strtoull(end + 1, &end, 10);
        if (*end || end == cost || o->cost_min > o->cost_max || o->cost_max > 1000000000) {
            snprintf(err, errlen, "bad --cost: want N or MIN:MAX (0 <= MIN <= MAX)");
            return -1;
        }
    }
    if (lease[0] && strcmp(lease, "on") != 0 && strcmp(lease, "off") != 0) {
        snprintf(err, errlen, "bad --lease: on or off");
        return -1;
    }
    o->lease_off = strcmp(lease, "off") == 0;
    o->models = cost[0] || o->block_ms || o->lease_off || o->cc_limit;
    return 0;
}
