/* SPDX-License-Identifier: Apache-2.0 */
/* sim_fleet_int.h - the token-lease run's private parts, shared by
 * sim_fleet.c (the agents: requests, replies, decisions, and the run) and
 * sim_fleet_conn.c (below it: each agent's Redis connection and the Redis
 * side, which never call back up). Nothing outside those two files
 * includes it. */
#ifndef SIM_FLEET_INT_H
#define SIM_FLEET_INT_H

#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "lease/lease.h"
#include "limiter/script_args.h"
#include "tools/sim.h"
#include "tools/sim_heap.h"
#include "tools/sim_score.h"
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

enum ev_kind {
    EV_REQ,
    EV_TICK,
    EV_EXEC,
    EV_REPLY,
    EV_SAMPLE,
    EV_TIMEOUT,
    /* --regions (sim_region.c; agent is the region) */
    EV_REGION, /* a region's claimer tick */
    EV_GEXEC,  /* its call reaches the global Redis */
    EV_GREPLY, /* the answer (or the failure) reaches the region */
    EV_CC_END, /* --concurrency: an admitted request is done (p: its release) */
};

/* One call on the wire: a script call or a batch. */
struct command {
    unsigned agent, n;
    uint64_t exec_at, reply_at;
    struct lease_job **jobs; /* n */
    int *ok;                 /* per job */
    int *nv;                 /* per job: values */
    int64_t (*v)[CLAIM_R_COUNT];
};

struct agent {
    struct lease_table *leases;
    char id[24];
    unsigned inflight;
    struct lease_job *qhead, *qtail; /* queued for the next batch */
    unsigned qlen;
    int stalled;         /* a call timed out, no reply in time since (limiter.c) */
    uint64_t last_probe; /* while stalled: the last decision that asked Redis */
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
    uint64_t cost; /* --cost: its tokens (else 1) */
    int blocked;   /* --block-for: a block ran on its key when it arrived */
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
    struct sim_score sc; /* the reference, the checks, the waits */
    /* stranded tokens: per-key sums of one sample */
    uint64_t *held;
    uint32_t *touched;
    size_t ntouched;
    struct sim_hist held_h;
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
    struct sim_window *outwin; /* per key: admissions outside the stall */
    struct sim_hist stall_wait_h;
    struct sent *free_sent;
    uint64_t check_every;       /* timeouts are looked for this often (limiter.c) */
    struct sim_regions_run *rg; /* --regions (sim_region.c), else NULL */
    struct sim_rng cost_rng;    /* --cost (sim_cost.c) */
    struct sim_cc_run *cc;      /* --concurrency (sim_cc.c), else NULL */
};

/* Queue an event (kind EV_*; cmd for EV_EXEC and EV_REPLY, key for EV_REQ);
 * out of memory sets s->oom. */
static inline void sim_fleet_push(struct sim *s, uint64_t at, int kind, unsigned agent,
                                  struct command *cmd, uint32_t key)
{
    if (sim_heap_push(&s->q, at, kind, agent, key, cmd) < 0)
        s->oom = 1;
}

/* ---- sim_fleet_conn.c ------------------------------------------------------------------- */

/* Hand job j to agent ai's connection: sent at once, or queued for the next
 * batch (always when corked). */
void sim_fleet_conn_send(struct sim *s, unsigned ai, struct lease_job *j, int corked);
/* The corked sends are done: send what is queued if the connection allows. */
void sim_fleet_uncork(struct sim *s, unsigned ai);
/* Redis runs command c (EV_EXEC). */
void sim_fleet_exec(struct sim *s, struct command *c);
/* Job j of agent a is answered: off the in-flight list (--stall). 1 when it
 * had timed out. */
int sim_fleet_sent_done(struct sim *s, struct agent *a, const struct lease_job *j);
/* Free a command: answered, or never run (a run that ended on an error). */
void sim_fleet_command_free(struct command *c);

/* ---- sim_cost.c ------------------------------------------------------------------------ */

/* --cost, --block-for, --lease off (o->models): the rule's block_for into
 * s->p, costs seeded, the score in tokens. */
void sim_cost_setup(struct sim *s);
/* The next request's cost. */
uint64_t sim_cost_draw(struct sim *s);
/* Whether a block runs on the Redis key name now (its field bu, Redis time). */
int sim_cost_blocked(struct sim *s, const char *name, size_t len);
/* Decide w (its key's Redis name, its cost) by one exact call from agent
 * ai: the rule's lease = off, or a cost the lease does not hold. */
void sim_cost_exact(struct sim *s, unsigned ai, const char *name, size_t len, struct wait *w);
/* The ARGV of job j (an exact call of sim_cost_exact, or the lease table's)
 * in a; the script to call. */
int sim_cost_args(const struct sim *s, const struct lease_job *j, const char *agent,
                  struct script_args *a);
/* j is sim_cost_exact's (not a lease table's). */
static inline int sim_cost_mine(const struct lease_job *j)
{
    return j->e == NULL;
}
/* The reply of such a job: its waiter, its outcome in w->out (allowed 0 when
 * ok is 0: the caller decides it by fallback); j is freed. */
struct wait *sim_cost_reply(struct sim *s, struct lease_job *j, int ok, const int64_t *v, int nv);

/* ---- sim_cc.c ---------------------------------------------------------------------------- */

/* Jobs of kind SIM_CC_ACQUIRE and SIM_CC_RELEASE are sim_cc.c's. */
#define SIM_CC_ACQUIRE 100
#define SIM_CC_RELEASE 101
int sim_cc_setup(struct sim *s, uint64_t keys, char *err, size_t errlen);
void sim_cc_free(struct sim *s);
/* The reference: one slot count per key, each slot held service_us. */
int sim_cc_reference(struct sim *s, uint32_t key);
/* Agent ai takes a slot for w by one cc_acquire. */
void sim_cc_acquire(struct sim *s, unsigned ai, const char *name, size_t len, struct wait *w);
int sim_cc_args(const struct lease_job *j, struct script_args *a);
/* A concurrency call (sim_cc.c): a lease_job with no entry, carrying the
 * request and the slot; sim_call_args.c reads its slot id. */
#define MAX_HOLD_MS 60000 /* max_hold's default */
struct cc_call {
    struct lease_job j; /* first; kind SIM_CC_ACQUIRE or SIM_CC_RELEASE, e NULL */
    struct wait *w;     /* the acquire's request */
    uint64_t id;
    uint32_t key;
    unsigned agent; /* that decided it: its release comes to it */
    char name[KEYBUF];
};

/* A cc job's reply: its waiter (NULL for a release); j is freed or kept
 * as the release of the slot (EV_CC_END). */
struct wait *sim_cc_reply(struct sim *s, struct lease_job *j, int ok, const int64_t *v, int nv);
/* EV_CC_END: the request is done, its release goes out. */
void sim_cc_end(struct sim *s, unsigned ai, uint32_t key, void *release);

/* ---- sim_region.c ------------------------------------------------------------------------ */

/* --regions: build the regions (their Redis and claimers, the global Redis;
 * s->redis becomes region 0's) and queue their ticks. 0, or -1 with err. */
int sim_region_setup(struct sim *s, char *err, size_t errlen);
void sim_region_free(struct sim *s);
/* The Redis agent ai talks to: its region's. */
struct sim_redis *sim_region_redis(struct sim *s, unsigned ai);
/* A region's reserve of a key of burst burst (--global-reserve: [global]
 * reserve, bucket_fed_reserve), as the agents send it. */
uint64_t sim_region_reserve(const struct sim *s, uint64_t burst);
/* A request for key reaches agent ai (the key is active in its region: the
 * claimer follows it), and its decision, for a request that arrived at t0. */
void sim_region_request(struct sim *s, unsigned ai, uint32_t key);
void sim_region_record(struct sim *s, uint32_t key, uint64_t t0, int allowed, int ref_allowed);
/* EV_REGION, EV_GEXEC, EV_GREPLY. */
void sim_region_event(struct sim *s, int kind, unsigned region, uint32_t arg);
void sim_region_finish(struct sim *s, struct sim_result *r);

#endif
