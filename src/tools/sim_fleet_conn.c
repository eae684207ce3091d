/* SPDX-License-Identifier: Apache-2.0 */
/* sim_fleet_conn.c - the token-lease run's Redis side: each agent's
 * connection as store_conn.c makes it (at most CONN_MAX_INFLIGHT calls in
 * flight, the rest go out together as one batch call; limiter.c's in-flight
 * list and timeouts under --stall), and Redis running each call, one at a
 * time in arrival order, on sim_redis with the agent's own script arguments
 * (store/script_args.c). sim_fleet.c, above, pushes the events and hands
 * the replies to the agents' lease tables. */
#include "tools/sim_fleet_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/script.h"
#include "tools/sim_redis.h"

/* ---- the connection (store_conn.c's group commit) -------------------------------------- */

static void wire(struct sim *s, unsigned ai, struct lease_job *list, unsigned n)
{
    /* one block: the command, then its per-job arrays */
    size_t size = sizeof(struct command) + n * (sizeof(int64_t[CLAIM_R_COUNT]) +
                                                sizeof(struct lease_job *) + 2 * sizeof(int));
    struct command *c = calloc(1, size);
    if (!c) {
        s->oom = 1;
        return;
    }
    c->v = (int64_t(*)[CLAIM_R_COUNT])(c + 1);
    c->jobs = (struct lease_job **)(c->v + n);
    c->ok = (int *)(c->jobs + n);
    c->nv = c->ok + n;
    c->agent = ai;
    c->n = n;
    for (unsigned i = 0; i < n; i++, list = list->next)
        c->jobs[i] = list;
    s->agents[ai].inflight++;
    s->res->redis_calls++;
    s->res->script_ops += n;
    /* Redis runs calls one at a time in arrival order, each taking
     * redis_op_us per operation (0: instantly). */
    uint64_t arrive = s->now + s->o->rtt_us / 2;
    c->exec_at = arrive > s->busy_until ? arrive : s->busy_until;
    if (c->exec_at >= s->stall_start && c->exec_at < s->stall_end)
        c->exec_at = s->stall_end; /* frozen: it runs when Redis wakes up */
    s->busy_until = c->exec_at + s->o->redis_op_us * n;
    c->reply_at = s->busy_until + (s->o->rtt_us - s->o->rtt_us / 2);
    sim_fleet_push(s, c->exec_at, EV_EXEC, ai, c, 0);
}

/* Send what is queued: one batch of everything, in groups of at most
 * CONN_BATCH_MAX (a group of one goes as itself). */
static void flush(struct sim *s, unsigned ai)
{
    struct agent *a = &s->agents[ai];
    struct lease_job *q = a->qhead;

    a->qhead = a->qtail = NULL;
    a->qlen = 0;
    while (q) {
        struct lease_job *first = q, *last = q;
        unsigned n = 1;
        while (n < CONN_BATCH_MAX && last->next) {
            last = last->next;
            n++;
        }
        q = last->next;
        last->next = NULL;
        wire(s, ai, first, n);
    }
}

/* store_conn_send(): at once when nothing is queued, fewer than two calls
 * are in flight and the connection is not corked; queued otherwise. The
 * caller (limiter.c's send_job) stamps the job's send time first. */
void sim_fleet_conn_send(struct sim *s, unsigned ai, struct lease_job *j, int corked)
{
    struct agent *a = &s->agents[ai];

    j->sent_us = s->now;
    j->next = NULL;
    if (s->stall_end) { /* limiter.c's in-flight list, for timeouts */
        struct sent *x = s->free_sent;
        if (x)
            s->free_sent = x->next;
        else if (!(x = malloc(sizeof(*x)))) {
            s->oom = 1;
            return;
        }
        x->job = j;
        x->at = s->now;
        x->timed_out = 0;
        x->next = NULL;
        if (a->itail)
            a->itail->next = x;
        else
            a->ihead = x;
        a->itail = x;
        if (!a->icheck)
            a->icheck = x;
    }
    if (j->kind != LEASE_JOB_RETURN)
        s->res->claims++;
    else
        s->res->returns++;
    if (!corked && a->inflight < CONN_MAX_INFLIGHT && !a->qhead) {
        wire(s, ai, j, 1);
        return;
    }
    if (a->qtail)
        a->qtail->next = j;
    else
        a->qhead = j;
    a->qtail = j;
    if (++a->qlen >= CONN_BATCH_MAX)
        flush(s, ai);
}

void sim_fleet_uncork(struct sim *s, unsigned ai)
{
    if (s->agents[ai].qhead && s->agents[ai].inflight < CONN_MAX_INFLIGHT)
        flush(s, ai);
}

/* Job j's reply is in: take it off the in-flight list (it is first: one
 * Redis runs an agent's calls in the order sent). 1 when it had timed out. */
int sim_fleet_sent_done(struct sim *s, struct agent *a, const struct lease_job *j)
{
    struct sent *x = a->ihead, *prev = NULL;

    while (x && x->job != j) /* not reached: replies come in order */
        prev = x, x = x->next;
    if (!x)
        return 0;
    if (prev)
        prev->next = x->next;
    else
        a->ihead = x->next;
    if (a->itail == x)
        a->itail = prev;
    if (a->icheck == x)
        a->icheck = x->next;
    int timed_out = x->timed_out;
    x->next = s->free_sent;
    s->free_sent = x;
    return timed_out;
}

/* ---- Redis ----------------------------------------------------------------------------- */

static void redis_error(struct sim *s, const char *err)
{
    if (s->res->redis_errors++ == 0)
        snprintf(s->res->redis_error, sizeof(s->res->redis_error), "%s", err);
}

/* Run command c as Redis would: one EVALSHA of the job's script, or of the
 * batch script carrying them all; then hand each job its part of the reply
 * as store_conn.c's batch_reply() does. */
void sim_fleet_exec(struct sim *s, struct command *c)
{
    static const char *const digits[] = {"0", "1", "2",  "3",  "4",  "5",  "6",  "7",
                                         "8", "9", "10", "11", "12", "13", "14", "15"};
    _Static_assert(SCRIPT_COUNT <= 16 && SCRIPT_MAX_ARGC <= 16, "digits[] must cover them");
    const char *id = s->agents[c->agent].id;
    struct sim_redis *redis = s->rg ? sim_region_redis(s, c->agent) : s->redis;
    size_t n = 0;
    const char *err;
    int rc;

    if (c->n == 1) {
        struct lease_job *j = c->jobs[0];
        int script = sim_cost_args(s, j, id, &s->args[0]);
        if (s->rg) /* a global rule's regional bucket: fed (lua/README.md) */
            script_fed_arg(&s->args[0], (enum store_script)script, sim_region_reserve(s, c->jobs[0]->burst));
        rc = sim_redis_eval(redis, script, s->now, 1, &j->key, &j->keylen, s->args[0].argc,
                            s->args[0].argv, s->args[0].argvlen, s->reply, REPLY_MAX, &n, &err);
        if (rc != 0)
            redis_error(s, err);
        if (rc == 0) {
            c->ok[0] = 1;
            c->nv[0] = n < CLAIM_R_COUNT ? (int)n : CLAIM_R_COUNT;
            memcpy(c->v[0], s->reply, (size_t)c->nv[0] * sizeof(int64_t));
        }
        return;
    }
    int argc = 0;
    for (unsigned i = 0; i < c->n; i++) {
        struct lease_job *j = c->jobs[i];
        struct script_args *a = &s->args[i];
        int script = sim_cost_args(s, j, id, a);
        if (s->rg)
            script_fed_arg(a, (enum store_script)script, sim_region_reserve(s, j->burst));
        s->bkeys[i] = j->key;
        s->bkeylen[i] = j->keylen;
        s->bargv[argc] = digits[script];
        s->bargvlen[argc++] = strlen(digits[script]);
        s->bargv[argc] = digits[a->argc];
        s->bargvlen[argc++] = strlen(digits[a->argc]);
        for (int k = 0; k < a->argc; k++) {
            s->bargv[argc] = a->argv[k];
            s->bargvlen[argc++] = a->argvlen[k];
        }
    }
    rc = sim_redis_eval(redis, SCRIPT_BATCH, s->now, (int)c->n, s->bkeys, s->bkeylen, argc,
                        s->bargv, s->bargvlen, s->reply, REPLY_MAX, &n, &err);
    if (rc != 0) {
        redis_error(s, err); /* the whole batch failed */
        return;
    }
    size_t at = 0;
    for (unsigned i = 0; i < c->n && at < n; i++) {
        int64_t len = s->reply[at];
        if (len < 0 || (uint64_t)len >= n - at)
            break; /* malformed: the rest fail */
        c->ok[i] = 1;
        c->nv[i] = len < CLAIM_R_COUNT ? (int)len : CLAIM_R_COUNT;
        memcpy(c->v[i], &s->reply[at + 1], (size_t)c->nv[i] * sizeof(int64_t));
        at += 1 + (size_t)len;
    }
}

void sim_fleet_command_free(struct command *c)
{
    free(c);
}
