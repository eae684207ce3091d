/* sim_fleet.c - one simulation run: a fleet of agents, each with its own
 * lease table driven exactly as limiter.c drives it (lease_decide for every
 * request, lease_tick every interval, lease_reply for every answer), their
 * script calls built by the agent's own argument code (store/script_args.c),
 * sent over a model of the agent's Redis connection (store_conn.c: at most
 * two calls in flight, the rest go out together as one batch call), and run
 * by sim_redis on the agent's Lua scripts. All in virtual time, one event
 * queue (sim_heap.c); Redis runs each call when it arrives, at the
 * virtual time it reads with TIME.
 *
 * Beside the fleet, one exact in-memory bucket per key (bucket.c, as a
 * standalone agent) decides every request too: the reference for
 * utilisation and false denials.
 *
 * --stall: for a while Redis answers nothing (the connection stays open:
 * calls run when it wakes up, in order). Each call then fails after the
 * timeout (lease_timeout, as limiter.c's timeouts_cb: waiters fall back,
 * the late reply still settles the grant), the agent counts as stalled
 * (decisions do not wait for Redis, one per STALL_PROBE_US still asks)
 * until a reply comes in time, and fallback decisions take from a backstop
 * bucket per agent and key, as limiter.c's decide_fallback (fail open).
 * As there, a call's timeout runs from when the agent hands it to its
 * connection (queued behind the two in flight or not), and is checked every
 * timeout / 5, so waits reach 1.2 x timeout. The watchdog that drops a
 * connection frozen past 10 x timeout is not modelled (the agent then
 * decides by fallback at once, as a stalled agent does between probes). */
#include "tools/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lease/lease.h"
#include "script_args.h"
#include "store/script.h"
#include "tools/sim_heap.h"
#include "tools/sim_redis.h"
#include "tools/sim_stats.h"
#include "tools/sim_traffic.h"

/* As limiter.c (STRIPES) and store_conn.h (STORE_CONN_MAX_INFLIGHT,
 * STORE_CONN_BATCH_MAX), which the simulator mirrors. */
#define STRIPES 64
#define STALL_PROBE_US 100000 /* limiter.c: while stalled, one decision per 100 ms asks */
#define CONN_MAX_INFLIGHT 2
#define CONN_BATCH_MAX 256
#define KEY_PREFIX "rl:"
#define RULE_NAME "sim"
#define KEYBUF 64
#define REPLY_MAX (CONN_BATCH_MAX * (1 + CLAIM_R_COUNT))

enum ev_kind { EV_REQ, EV_TICK, EV_EXEC, EV_REPLY, EV_SAMPLE, EV_TIMEOUT };

/* One call on the wire: a script call or a batch. */
struct command {
    unsigned agent, n;
    uint64_t exec_at, reply_at;
    struct lease_job **jobs;  /* n */
    int *ok;                  /* per job */
    int *nv;                  /* per job: values */
    int64_t (*v)[CLAIM_R_COUNT];
};

struct agent {
    struct lease_table *leases;
    char id[24];
    unsigned inflight;
    struct lease_job *qhead, *qtail; /* queued for the next batch */
    unsigned qlen;
    int stalled;          /* a call timed out, no reply in time since (limiter.c) */
    uint64_t last_probe;  /* while stalled: the last decision that asked Redis */
    /* With a stall: the calls sent, in order (limiter.c's in-flight list;
     * replies come in this order), and the first not timed out yet. */
    struct sent *ihead, *itail, *icheck;
};

struct sent {
    struct lease_job *job;
    uint64_t at;
    int timed_out;
    struct sent *next;
};

/* A request waiting for a claim: the waiter lease_cache.c links, and what the
 * simulator needs to record its decision when it comes. */
struct wait {
    struct lease_waiter w; /* first: a waiter pointer is a wait pointer */
    struct bucket_result out;
    uint64_t t0;
    uint32_t key;
    int ref_allowed;
    struct wait *free_next;
};

struct sim {
    const struct sim_opts *o;
    struct sim_result *res;
    struct bucket_params p;
    struct lease_config lc;
    struct agent *agents;
    struct sim_redis *redis;
    struct sim_traffic *traffic;
    uint64_t now, end, busy_until;
    struct sim_heap q; /* events */
    struct wait *free_waits;
    /* the reference and the checks, per key */
    struct bucket *ref;
    struct sim_window *win, *refwin;
    struct sim_bound bound, refbound;
    /* stranded tokens: per-key sums of one sample */
    uint64_t *held;
    uint32_t *touched;
    size_t ntouched;
    struct sim_hist wait_h, held_h;
    /* a batch's arguments, reused */
    struct script_args *args;
    const char **bkeys, **bargv;
    size_t *bkeylen, *bargvlen;
    int64_t reply[REPLY_MAX];
    int oom;
    /* --stall (absolute virtual times; stall_end 0: no stall) */
    uint64_t stall_start, stall_end, settle_end, last_fb;
    uint64_t nkeys;
    struct bucket *bs;            /* backstop, per agent x key */
    struct sim_window *bswin;     /* its admissions, checked against b' + r' T */
    uint64_t *bs_first, *bs_last; /* first and last fallback decision (0: none) */
    struct sim_bound bsbound, outbound;
    struct sim_window *outwin;    /* per key: admissions outside the stall */
    struct sim_hist stall_wait_h;
    struct sent *free_sent;
    uint64_t check_every; /* timeouts are looked for this often (limiter.c) */
};

/* ---- the event queue --------------------------------------------------------------- */

static void push(struct sim *s, uint64_t at, int kind, unsigned agent, struct command *cmd,
                 uint32_t key)
{
    if (sim_heap_push(&s->q, at, kind, agent, key, cmd) < 0)
        s->oom = 1;
}

/* ---- keys --------------------------------------------------------------------------- */

/* The Redis key of client key k, as limiter.c's redis_key() builds it:
 * prefix, algorithm, rule, client key. */
static size_t key_name(const struct sim *s, uint32_t k, char *buf)
{
    return (size_t)snprintf(buf, KEYBUF, KEY_PREFIX "%s" RULE_NAME ":%u",
                            s->p.algorithm == BUCKET_SLIDING_WINDOW ? "sw:" : "tb:", k);
}

static uint32_t key_id(const char *key, size_t len)
{
    const char *p = key + len;
    while (p > key && p[-1] != ':')
        p--;
    return (uint32_t)strtoul(p, NULL, 10);
}

/* ---- decisions --------------------------------------------------------------------- */

/* A decision for a request that arrived at t0, taken now. */
static void record(struct sim *s, uint32_t key, int allowed, int ref_allowed, uint64_t t0)
{
    struct sim_result *r = s->res;
    uint64_t wait_us = s->now - t0;

    r->decisions++;
    sim_hist_add(&s->wait_h, wait_us);
    if (wait_us > 0)
        r->waited++;
    if (allowed) {
        r->admitted++;
        sim_bound_admit(&s->bound, &s->win[key], s->now - SIM_T0_US);
        if (!ref_allowed)
            r->extra_admits++;
    } else if (ref_allowed) {
        r->false_denials++;
    }
    if (!s->stall_end)
        return;
    if (t0 >= s->stall_start && t0 < s->stall_end) {
        r->stall.decisions++;
        r->stall.admitted += allowed != 0;
        r->stall.false_denials += !allowed && ref_allowed;
        sim_hist_add(&s->stall_wait_h, wait_us);
    }
    if (allowed && (s->now < s->stall_start || s->now >= s->settle_end))
        sim_bound_admit(&s->outbound, &s->outwin[key], s->now - SIM_T0_US);
}

/* Decided without Redis: limiter.c's decide_fallback, fail open, from the
 * agent's backstop bucket for the key. */
static void fallback(struct sim *s, unsigned ai, uint32_t key, int ref_allowed, uint64_t t0)
{
    struct bucket_result br;

    s->res->fallbacks++;
    if (!s->bs) { /* no stall: a fallback is a fault, counted and denied */
        record(s, key, 0, ref_allowed, t0);
        return;
    }
    size_t i = (size_t)ai * s->nkeys + key;
    bucket_take(&s->bs[i], &s->o->backstop, s->now, 1, &br);
    s->res->stall.fallbacks++;
    if (!s->bs_first[i])
        s->bs_first[i] = s->now;
    s->bs_last[i] = s->now;
    s->last_fb = s->now;
    if (br.allowed) {
        s->res->stall.fallback_admitted++;
        sim_bound_admit(&s->bsbound, &s->bswin[i], s->now - SIM_T0_US);
    }
    record(s, key, br.allowed, ref_allowed, t0);
}

static struct wait *wait_get(struct sim *s)
{
    struct wait *w = s->free_waits;
    if (w) {
        s->free_waits = w->free_next;
        return w;
    }
    w = malloc(sizeof(*w));
    if (!w)
        s->oom = 1;
    return w;
}

static void wait_put(struct sim *s, struct wait *w)
{
    w->free_next = s->free_waits;
    s->free_waits = w;
}

/* Waiters of agent ai decided by a reply (done) or left to the fallback (fb). */
static void complete(struct sim *s, unsigned ai, struct lease_waiter *done,
                     struct lease_waiter *fb)
{
    struct lease_waiter *w, *next;
    for (w = done; w; w = next) {
        next = w->next;
        struct wait *x = (struct wait *)w;
        record(s, x->key, x->out.allowed, x->ref_allowed, x->t0);
        wait_put(s, x);
    }
    for (w = fb; w; w = next) {
        next = w->next;
        struct wait *x = (struct wait *)w;
        fallback(s, ai, x->key, x->ref_allowed, x->t0);
        wait_put(s, x);
    }
}

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
    push(s, c->exec_at, EV_EXEC, ai, c, 0);
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
static void conn_send(struct sim *s, unsigned ai, struct lease_job *j, int corked)
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

static void uncork(struct sim *s, unsigned ai)
{
    if (s->agents[ai].qhead && s->agents[ai].inflight < CONN_MAX_INFLIGHT)
        flush(s, ai);
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
static void exec_command(struct sim *s, struct command *c)
{
    static const char *const digits[] = {"0", "1", "2",  "3",  "4",  "5",  "6",  "7",
                                         "8", "9", "10", "11", "12", "13", "14", "15"};
    _Static_assert(SCRIPT_COUNT <= 16 && SCRIPT_MAX_ARGC <= 16, "digits[] must cover them");
    const char *id = s->agents[c->agent].id;
    size_t n = 0;
    const char *err;
    int rc;

    if (c->n == 1) {
        struct lease_job *j = c->jobs[0];
        int script = script_lease_args(j, id, s->o->ttl_ms, &s->args[0]);
        rc = sim_redis_eval(s->redis, script, s->now, 1, &j->key, &j->keylen, s->args[0].argc,
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
        int script = script_lease_args(j, id, s->o->ttl_ms, a);
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
    rc = sim_redis_eval(s->redis, SCRIPT_BATCH, s->now, (int)c->n, s->bkeys, s->bkeylen, argc,
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

static void put_command(struct command *c)
{
    free(c);
}

/* Every check_every: the calls that waited the timeout fail, their waiters
 * fall back and the agent is stalled (limiter.c's timeouts_cb). */
static void on_timeouts(struct sim *s, unsigned ai)
{
    struct agent *a = &s->agents[ai];
    struct sent *x;

    for (x = a->icheck; x && s->now - x->at >= s->o->timeout_us; x = x->next) {
        struct lease_waiter *fb = NULL;
        a->icheck = x->next;
        x->timed_out = 1;
        a->stalled = 1;
        s->res->stall.timeouts++;
        lease_timeout(a->leases, x->job, &fb);
        complete(s, ai, NULL, fb);
    }
}

/* Job j's reply is in: take it off the in-flight list (it is first: one
 * Redis runs an agent's calls in the order sent). 1 when it had timed out. */
static int sent_done(struct sim *s, struct agent *a, const struct lease_job *j)
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

/* The reply reaches the agent: limiter.c's on_reply() for each job, in
 * order; what they send goes out at once when the connection allows. */
static void on_reply(struct sim *s, struct command *c)
{
    unsigned ai = c->agent;
    struct agent *a = &s->agents[ai];

    a->inflight--;
    for (unsigned i = 0; i < c->n; i++) {
        struct lease_waiter *done = NULL, *fb = NULL;
        struct lease_job *next = NULL;
        /* only an answer in time ends a stall */
        if (s->stall_end && !sent_done(s, a, c->jobs[i]))
            a->stalled = 0;
        lease_reply(a->leases, c->jobs[i], c->ok[i], c->v[i], c->nv[i], s->now, &done, &fb, &next);
        complete(s, ai, done, fb);
        if (next)
            conn_send(s, ai, next, 0);
    }
    put_command(c);
    if (a->inflight < CONN_MAX_INFLIGHT && a->qhead)
        flush(s, ai);
}

/* ---- requests, ticks, samples ---------------------------------------------------------- */

static void on_request(struct sim *s, uint32_t key, unsigned ai)
{
    struct agent *a = &s->agents[ai];
    struct bucket_result rr;
    struct lease_job *job = NULL;
    char name[KEYBUF];
    size_t len = key_name(s, key, name);
    struct wait *w = wait_get(s);

    if (!w)
        return;
    bucket_take(&s->ref[key], &s->p, s->now, 1, &rr);
    if (rr.allowed) {
        s->res->ref_admitted++;
        if (s->now >= s->stall_start && s->now < s->stall_end)
            s->res->stall.ref_admitted++;
        sim_bound_admit(&s->refbound, &s->refwin[key], s->now - SIM_T0_US);
    }
    memset(w, 0, sizeof(*w));
    w->w.out = &w->out;
    w->w.req = w;
    w->t0 = s->now;
    w->key = key;
    w->ref_allowed = rr.allowed;
    /* limiter.c's redis_stalled(): while stalled, only a probe asks Redis */
    int up = 1;
    if (a->stalled) {
        if (s->now - a->last_probe >= STALL_PROBE_US)
            a->last_probe = s->now;
        else
            up = 0;
    }
    int v = lease_decide(a->leases, name, len, &s->p, s->now, up, &w->w, &w->out, &job);
    if (v == LEASE_DOWN)
        fallback(s, ai, key, rr.allowed, s->now);
    else if (v == LEASE_DONE)
        record(s, key, w->out.allowed, rr.allowed, s->now);
    if (v != LEASE_PENDING)
        wait_put(s, w);
    if (job) { /* limiter.c queues it; the Redis thread sends it corked */
        conn_send(s, ai, job, 1);
        uncork(s, ai);
    }
}

static void on_tick(struct sim *s, unsigned ai)
{
    struct lease_job *jobs = NULL, *next;

    lease_tick(s->agents[ai].leases, s->now, 1, &jobs);
    for (; jobs; jobs = next) { /* limiter.c's send_jobs(): corked */
        next = jobs->next;
        conn_send(s, ai, jobs, 1);
    }
    uncork(s, ai);
}

static void held_cb(void *ctx, const char *key, size_t keylen, uint64_t tokens)
{
    struct sim *s = ctx;
    uint32_t k = key_id(key, keylen);
    if (s->held[k] == 0)
        s->touched[s->ntouched++] = k;
    s->held[k] += tokens;
}

/* Tokens held on agents, per key that any agent holds some for. */
static void on_sample(struct sim *s)
{
    for (unsigned i = 0; i < s->o->agents; i++)
        lease_foreach_held(s->agents[i].leases, s->now, held_cb, s);
    for (size_t i = 0; i < s->ntouched; i++) {
        sim_hist_add(&s->held_h, s->held[s->touched[i]]);
        s->held[s->touched[i]] = 0;
    }
    s->ntouched = 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

static int setup(struct sim *s, char *err, size_t errlen)
{
    const struct sim_opts *o = s->o;
    uint64_t keys = o->trace ? sim_trace_keys(o->trace) : o->keys;
    struct sim_rng rng;

    s->p.algorithm = o->algorithm;
    s->p.limit = o->limit;
    s->p.period_us = o->period_ms * 1000;
    s->p.burst = o->burst;
    s->lc.interval_us = o->interval_ms * 1000;
    s->lc.ttl_us = o->ttl_ms * 1000;
    s->lc.max_fraction = o->max_fraction;
    s->lc.rate_ttl_us = o->rate_ttl_ms * 1000;
    s->lc.exact_cold = 1; /* as the agent */
    s->lc.prefetch = 1;
    s->end = SIM_T0_US + (uint64_t)(o->seconds * 1e6);
    s->agents = calloc(o->agents, sizeof(*s->agents));
    s->ref = malloc(keys * sizeof(*s->ref));
    s->win = calloc(keys, sizeof(*s->win));
    s->refwin = calloc(keys, sizeof(*s->refwin));
    s->held = calloc(keys, sizeof(*s->held));
    s->touched = malloc(keys * sizeof(*s->touched));
    s->args = malloc(CONN_BATCH_MAX * sizeof(*s->args));
    s->bkeys = malloc(CONN_BATCH_MAX * sizeof(*s->bkeys));
    s->bkeylen = malloc(CONN_BATCH_MAX * sizeof(*s->bkeylen));
    s->bargv = malloc(CONN_BATCH_MAX * (2 + SCRIPT_MAX_ARGC) * sizeof(*s->bargv));
    s->bargvlen = malloc(CONN_BATCH_MAX * (2 + SCRIPT_MAX_ARGC) * sizeof(*s->bargvlen));
    if (!s->agents || !s->ref || !s->win || !s->refwin || !s->held || !s->touched || !s->args ||
        !s->bkeys || !s->bkeylen || !s->bargv || !s->bargvlen) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint64_t k = 0; k < keys; k++) /* full (token bucket) or empty (window) from the start */
        bucket_init(&s->ref[k], &s->p, SIM_T0_US);
    sim_bound_init(&s->bound, o->limit, o->period_ms * 1000,
                   o->algorithm == BUCKET_SLIDING_WINDOW ? o->limit : o->burst);
    s->refbound = s->bound;
    if (!(s->redis = sim_redis_new(err, errlen)) ||
        !(s->traffic = sim_traffic_new(o, err, errlen)))
        return -1;
    if (o->stall_len_us > 0) {
        size_t n = (size_t)o->agents * keys;
        s->nkeys = keys;
        s->stall_start = SIM_T0_US + o->stall_start_us;
        s->stall_end = s->stall_start + o->stall_len_us;
        s->settle_end = s->stall_end + o->timeout_us + s->lc.interval_us;
        if (keys > UINT32_MAX || n / o->agents != keys || n > 50000000) {
            snprintf(err, errlen, "--stall keeps a backstop per agent and key: agents x keys "
                                  "at most 50,000,000");
            return -1;
        }
        s->bs = malloc(n * sizeof(*s->bs));
        s->bswin = calloc(n, sizeof(*s->bswin));
        s->bs_first = calloc(n, sizeof(*s->bs_first));
        s->bs_last = calloc(n, sizeof(*s->bs_last));
        s->outwin = calloc(keys, sizeof(*s->outwin));
        if (!s->bs || !s->bswin || !s->bs_first || !s->bs_last || !s->outwin) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            bucket_init(&s->bs[i], &o->backstop, SIM_T0_US);
        const struct bucket_params *bp = &o->backstop;
        sim_bound_init(&s->bsbound, bp->limit, bp->period_us,
                       bp->algorithm == BUCKET_SLIDING_WINDOW ? bp->limit : bp->burst);
        s->outbound = s->bound;
        s->check_every = o->timeout_us / 5 > 2000 ? o->timeout_us / 5 : 2000;
        for (unsigned i = 0; i < o->agents; i++)
            push(s, SIM_T0_US + s->check_every, EV_TIMEOUT, i, NULL, 0);
    }
    sim_rng_seed(&rng, o->seed ^ 0x5eedull);
    for (unsigned i = 0; i < o->agents; i++) {
        struct agent *a = &s->agents[i];
        snprintf(a->id, sizeof(a->id), "sim-agent-%u", i);
        if (!(a->leases = lease_table_new(&s->lc, STRIPES))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        /* Agents start at different instants: their ticks are not aligned. */
        push(s, SIM_T0_US + (uint64_t)(sim_rng_unit(&rng) * (double)s->lc.interval_us),
             EV_TICK, i, NULL, 0);
    }
    return 0;
}

static void teardown(struct sim *s)
{
    while (s->q.n > 0) { /* only after an error */
        struct sim_event e = sim_heap_pop(&s->q);
        if (e.kind == EV_EXEC || e.kind == EV_REPLY)
            put_command(e.p);
    }
    for (unsigned i = 0; s->agents && i < s->o->agents; i++) {
        struct sent *x, *next;
        for (x = s->agents[i].ihead; x; x = next) { /* only after an error */
            next = x->next;
            free(x);
        }
        lease_table_free(s->agents[i].leases);
    }
    while (s->free_sent) {
        struct sent *x = s->free_sent;
        s->free_sent = x->next;
        free(x);
    }
    while (s->free_waits) {
        struct wait *w = s->free_waits;
        s->free_waits = w->free_next;
        free(w);
    }
    sim_redis_free(s->redis);
    sim_traffic_free(s->traffic);
    free(s->agents);
    free(s->ref);
    free(s->win);
    free(s->refwin);
    free(s->held);
    free(s->touched);
    free(s->args);
    free(s->bkeys);
    free(s->bkeylen);
    free(s->bargv);
    free(s->bargvlen);
    sim_heap_free(&s->q);
    free(s->bs);
    free(s->bswin);
    free(s->bs_first);
    free(s->bs_last);
    free(s->outwin);
}

/* How often stranded tokens are counted: every interval for short runs,
 * 50 samples or more, at most 1 s apart (a count walks every agent). */
static uint64_t sample_every(const struct sim *s)
{
    double every = s->o->seconds * 1e6 / 50;
    if (every > 1e6)
        every = 1e6;
    if (every < (double)s->lc.interval_us)
        every = (double)s->lc.interval_us;
    return (uint64_t)every;
}

static void finish(struct sim *s, struct sim_result *r)
{
    double secs = s->o->seconds;
    r->calls_per_decision = r->decisions ? (double)r->redis_calls / (double)r->decisions : 0;
    r->ops_per_decision = r->decisions ? (double)r->script_ops / (double)r->decisions : 0;
    r->calls_per_s = secs > 0 ? (double)r->redis_calls / secs : 0;
    r->utilisation = r->ref_admitted ? (double)r->admitted / (double)r->ref_admitted : 1;
    r->worst_window_excess = sim_bound_worst(&s->bound);
    r->ref_worst_window_excess = sim_bound_worst(&s->refbound);
    r->stranded_p99 = (double)sim_hist_quantile(&s->held_h, 0.99);
    r->stranded_max = (double)s->held_h.max;
    r->wait_p99_ms = (double)sim_hist_quantile(&s->wait_h, 0.99) / 1000.0;
    r->wait_max_ms = (double)s->wait_h.max / 1000.0;
    r->redis_keys_peak = sim_redis_keys_peak(s->redis);
    r->sim_seconds = secs;
    if (!s->stall_end)
        return;
    struct sim_stall *st = &r->stall;
    const struct bucket_params *bp = &s->o->backstop;
    double rate = (double)bp->limit / (double)bp->period_us;
    size_t n = (size_t)s->o->agents * s->nkeys;
    for (size_t i = 0; i < n; i++)
        if (s->bs_first[i])
            st->backstop_allowed += (double)(bp->algorithm == BUCKET_SLIDING_WINDOW ? bp->limit
                                                                                   : bp->burst) +
                                    rate * (double)(s->bs_last[i] - s->bs_first[i]);
    st->backstop_worst_excess = st->fallbacks ? sim_bound_worst(&s->bsbound) : 0;
    st->outside_worst_window_excess = sim_bound_worst(&s->outbound);
    st->settle_ms = (double)(s->settle_end - s->stall_end) / 1000.0;
    st->wait_p50_ms = (double)sim_hist_quantile(&s->stall_wait_h, 0.5) / 1000.0;
    st->wait_p99_ms = (double)sim_hist_quantile(&s->stall_wait_h, 0.99) / 1000.0;
    st->wait_max_ms = (double)s->stall_wait_h.max / 1000.0;
    st->recovery_ms = s->last_fb > s->stall_end ? (double)(s->last_fb - s->stall_end) / 1000.0 : 0;
}

int sim_run(const struct sim_opts *o, struct sim_result *res, char *err, size_t errlen)
{
    struct sim *s = calloc(1, sizeof(*s));
    struct timespec w0, w1;
    uint64_t at;
    uint32_t key;
    unsigned agent;
    int rc = -1;

    if (o->policy == SIM_POLICY_RATE) {
        free(s);
        return sim_run_rate(o, res, err, errlen);
    }
    clock_gettime(CLOCK_MONOTONIC, &w0);
    memset(res, 0, sizeof(*res));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->o = o;
    s->res = res;
    if (setup(s, err, errlen) < 0)
        goto out;
    uint64_t every = sample_every(s);
    push(s, SIM_T0_US + every, EV_SAMPLE, 0, NULL, 0);
    if (sim_traffic_next(s->traffic, &at, &key, &agent) == 0)
        push(s, SIM_T0_US + at, EV_REQ, agent, NULL, key);
    /* Requests and samples stop at the end, ticks after the tail (leases
     * given back); the calls in flight and the claims they lead to run to
     * completion, so every request is decided. */
    while (s->q.n > 0 && !s->oom) {
        struct sim_event e = sim_heap_pop(&s->q);
        s->now = e.at;
        switch (e.kind) {
        case EV_REQ:
            on_request(s, e.key, e.agent);
            if (sim_traffic_next(s->traffic, &at, &key, &agent) == 0)
                push(s, SIM_T0_US + at, EV_REQ, agent, NULL, key);
            break;
        case EV_TICK:
            if (s->now < s->end + s->o->tail_us) {
                on_tick(s, e.agent);
                push(s, s->now + s->lc.interval_us, EV_TICK, e.agent, NULL, 0);
            }
            break;
        case EV_EXEC:
            exec_command(s, e.p);
            push(s, ((struct command *)e.p)->reply_at, EV_REPLY, e.agent, e.p, 0);
            break;
        case EV_REPLY:
            on_reply(s, e.p);
            break;
        case EV_TIMEOUT:
            /* as the ticks: until the tail's end, while calls are still out */
            if (s->now < s->end + s->o->tail_us || s->agents[e.agent].ihead) {
                on_timeouts(s, e.agent);
                push(s, s->now + s->check_every, EV_TIMEOUT, e.agent, NULL, 0);
            }
            break;
        case EV_SAMPLE:
            if (s->now < s->end) {
                on_sample(s);
                push(s, s->now + every, EV_SAMPLE, 0, NULL, 0);
            }
            break;
        }
    }
    if (s->oom) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    finish(s, res);
    rc = 0;
out:
    teardown(s);
    free(s);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
    return rc;
}
