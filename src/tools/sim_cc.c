/* SPDX-License-Identifier: Apache-2.0 */
/* sim_cc.c - spoa-sim --concurrency N: the rule is algorithm = concurrency
 * (limit N, max_hold 1m). As the agent (limiter_cc.c), each request takes a
 * slot with one cc_acquire call (script_cc_acquire_args, a unique slot id);
 * an admitted request is served for --service and then its release message
 * comes, which sends cc_release for the slot. Client side, the requests of
 * one key admitted and not done yet are counted: never more than the limit,
 * as Redis only frees a slot after the request is done (the release reaches
 * it rtt/2 later). The reference counts slots per key exactly, each held
 * service_us from arrival. Slots are the agent's local table only when
 * Redis is down: not modelled (no --stall). */
#include "tools/sim_fleet_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_CELLS_MAX 50000000

struct sim_cc_run {
    uint64_t next_id;
    uint32_t *inflight; /* per key: admitted, not done */
    /* the reference: per key a ring of cc_limit slot ends, in order (one
     * service time for all: they end in the order they began) */
    uint64_t *ends;
    uint32_t *head, *n;
};

int sim_cc_setup(struct sim *s, uint64_t keys, char *err, size_t errlen)
{
    uint64_t limit = s->o->cc_limit;
    struct sim_cc_run *cc;

    if (keys * limit > REF_CELLS_MAX) {
        snprintf(err, errlen, "--concurrency keeps limit slots per key: keys x limit at most %d",
                 REF_CELLS_MAX);
        return -1;
    }
    if (!(cc = s->cc = calloc(1, sizeof(*cc))) ||
        !(cc->inflight = calloc(keys, sizeof(*cc->inflight))) ||
        !(cc->ends = calloc(keys * limit, sizeof(*cc->ends))) ||
        !(cc->head = calloc(keys, sizeof(*cc->head))) || !(cc->n = calloc(keys, sizeof(*cc->n)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->sc.nobound = 1;
    return 0;
}

void sim_cc_free(struct sim *s)
{
    if (!s->cc)
        return;
    free(s->cc->inflight);
    free(s->cc->ends);
    free(s->cc->head);
    free(s->cc->n);
    free(s->cc);
    s->cc = NULL;
}

int sim_cc_reference(struct sim *s, uint32_t key)
{
    struct sim_cc_run *cc = s->cc;
    uint64_t limit = s->o->cc_limit, *ring = cc->ends + (uint64_t)key * limit;

    while (cc->n[key] && ring[cc->head[key]] <= s->now) { /* done: free */
        cc->head[key] = (uint32_t)((cc->head[key] + 1) % limit);
        cc->n[key]--;
    }
    if (cc->n[key] >= limit)
        return 0;
    ring[(cc->head[key] + cc->n[key]) % limit] = s->now + s->o->service_us;
    cc->n[key]++;
    s->res->ref_admitted++;
    s->res->models.ref_admitted_tokens++;
    return 1;
}

static struct cc_call *call_new(struct sim *s, int kind, const char *name, size_t len)
{
    struct cc_call *x = calloc(1, sizeof(*x));

    if (!x) {
        s->oom = 1;
        return NULL;
    }
    memcpy(x->name, name, len);
    x->j.kind = kind;
    x->j.key = x->name;
    x->j.keylen = len;
    return x;
}

void sim_cc_acquire(struct sim *s, unsigned ai, const char *name, size_t len, struct wait *w)
{
    struct cc_call *x = call_new(s, SIM_CC_ACQUIRE, name, len);

    if (!x)
        return;
    x->w = w;
    x->key = w->key;
    x->agent = ai;
    x->id = ++s->cc->next_id;
    x->j.limit = s->o->cc_limit;
    s->res->models.exact_calls++;
    sim_fleet_conn_send(s, ai, &x->j, 1);
    sim_fleet_uncork(s, ai);
}

struct wait *sim_cc_reply(struct sim *s, struct lease_job *j, int ok, const int64_t *v, int nv)
{
    struct cc_call *x = (struct cc_call *)j;
    struct wait *w = x->w;

    if (j->kind == SIM_CC_RELEASE) {
        s->res->models.cc_released += ok && nv >= 1 && v[CC_RELEASE_R_RELEASED] == 1;
        free(x);
        return NULL;
    }
    w->out.allowed = ok && nv >= EXACT_R_COUNT && v[EXACT_R_ALLOWED] == 1;
    w->w.fallback = !(ok && nv >= EXACT_R_COUNT);
    if (!w->out.allowed) {
        free(x);
        return w;
    }
    /* served from now: done service_us later, then its release goes out */
    uint32_t *in = &s->cc->inflight[x->key];
    if (++*in > s->res->models.cc_max_inflight)
        s->res->models.cc_max_inflight = *in;
    x->j.kind = SIM_CC_RELEASE;
    x->w = NULL;
    sim_fleet_push(s, s->now + s->o->service_us, EV_CC_END, x->agent, (struct command *)x, x->key);
    return w;
}

void sim_cc_end(struct sim *s, unsigned ai, uint32_t key, void *release)
{
    struct cc_call *x = release;

    s->cc->inflight[key]--;
    /* the release message reaches the agent that decided it */
    sim_fleet_conn_send(s, ai, &x->j, 1);
    sim_fleet_uncork(s, ai);
}
