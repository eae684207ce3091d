/* SPDX-License-Identifier: Apache-2.0 */
/* limiter.h - where decisions are taken: in-memory buckets (standalone mode
 * and the fail-open backstop) or, with Redis, the lease cache and exact
 * script calls.
 *
 * Threads: limiter_decide() runs on worker threads; everything that talks to
 * Redis runs on the loop given to limiter_new() (the main thread), which
 * workers wake with an ev_async. A request whose decisions must wait for
 * Redis is completed from that thread through its done() callback.
 *
 * For the operator (limiter_admin.c): limiter_inspect() reads one client's
 * state and limiter_reset() clears it, in every mode, on the limiter's
 * thread; callers (GET /key, POST /reset, a status page) only render what
 * they deliver.
 */
#ifndef LIMITER_H
#define LIMITER_H

#include <stdatomic.h>
#include <stdint.h>

#include "global/gclaim.h"
#include "limits/bucket.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"
#include "rules/rules.h"

struct ev_loop;
struct config;
struct limiter;
struct store;

/* Standalone when cfg has no Redis. NULL with a message in err on failure. */
struct limiter *limiter_new(struct ev_loop *loop, const struct config *cfg, char *err,
                            size_t errlen);
/* Give back every leased token, wait (at most timeout_s) for Redis to answer,
 * close the connection. The loop must not be running elsewhere. */
void limiter_shutdown(struct limiter *l, double timeout_s);
void limiter_free(struct limiter *l);

/* Decide every hit of req->ev at now_us. Returns 0 when all outcomes are
 * filled, 1 when some wait for Redis (req->done will be called), -1 when
 * out of memory. Either way req is not settled yet: limiter_settle(). */
int limiter_decide(struct limiter *l, struct limiter_req *req, uint64_t now_us);

/* Once every hit of req is decided, before its ACK, by req's owner (the
 * limiter leaves it to the caller of limiter_decide(): one call per request,
 * on every path; calling it again changes nothing): a blocked request
 * (a non-shadow rule denied it) gives back the slots its concurrency hits
 * took (shadow rules' too), since it never reaches the backend and no
 * release will come; and with [agent] charge = all-or-nothing what the
 * other non-shadow rules took for it (limiter_charge.c). A shadow rule is
 * charged alone: it keeps its tokens, and its would_block refunds nothing.
 * Any thread. */
void limiter_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us);

/* One worker decides on the limiter's own loop and thread (server_new()
 * with workers = 1): limiter_inline(l, 1) from that thread, and the worker
 * calls limiter_pump() before the loop polls (an ev_prepare). Jobs queued
 * on that thread are then sent by the pump, all of a loop iteration's
 * together; jobs queued from any other thread still wake the loop. Returns
 * whether the pump sent any. */
void limiter_inline(struct limiter *l, int on);
int limiter_pump(struct limiter *l);

/* Release what limiter_decide() allocated in req (not req itself). */
void limiter_req_release(struct limiter_req *req);

/* Drop idle in-memory buckets (call from a timer on the limiter's loop); rs
 * gives the current parameters. */
size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit);

/* 1 with Redis configured, 0 standalone. */
int limiter_redis(const struct limiter *l);

/* The limiter's store (NULL standalone), for the clients that share its
 * connections from the main loop (the rule store); they stop before
 * limiter_shutdown or limiter_free. */
struct store *limiter_store(struct limiter *l);

/* The fleet's heartbeat (NULL standalone): its last rows for the status
 * page's fleet table (store_heartbeat_rows), on the main loop. */
struct store_heartbeat;
struct store_heartbeat *limiter_heartbeat(struct limiter *l);

/* SIGHUP: apply cfg's [redis] url (url mode) and credentials to the
 * connections (store_reconfigure: they are made again at once when these
 * changed); standalone, nothing. 0, or -1 when out of memory (what was in
 * use stays). The limiter's thread only. */
int limiter_reconfigure(struct limiter *l, const struct config *cfg);

/* ---- one client, for the operator (GET /key, POST /reset, a status page) --- */

struct cfg_rule;

/* One client of one rule, as a request names it. The strings are copied
 * by the call they are given to. */
struct limiter_client {
    unsigned rule; /* index in rs->cfg->rules (below nrules: the caller checks) */
    /* The text of the rule's key args, several joined with '|' (empty for
     * a rule without key). */
    const char *key;
    size_t keylen;
    /* A rule taking its limits per request (rate = arg:NAME, burst =
     * arg:NAME): what those args say ("1000/1m", "50"); NULL when absent
     * or when the rule's limits are fixed. */
    const char *rate, *burst;
};

/* Why a client cannot be looked at: limiter_inspect() / limiter_reset()
 * return these before doing anything (their callback is then not called). */
#define LIMITER_BAD_RATE (-1)  /* rate = arg:NAME and no valid rate given */
#define LIMITER_BAD_BURST (-2) /* burst = arg:NAME and no valid burst given */
#define LIMITER_KEY_LONG (-3)  /* the client or Redis key does not fit */
#define LIMITER_NOMEM (-4)

/* The client as decisions see it: the bucket a request with its key uses. */
struct limiter_who {
    const struct cfg_rule *rule;
    const char *key; /* as given */
    size_t keylen;
    const char *client_key; /* as rules_client_key() builds it (hashed when long) */
    size_t client_keylen;
    const char *redis_key; /* Redis mode: its bucket's key; else NULL */
    size_t redis_keylen;
    struct bucket_params params;   /* its limits */
    struct bucket_params backstop; /* those of its fail-open bucket */
    int redis;                     /* 1 with Redis configured */
};

/* One lease recorded in a client's Redis bucket (field h:AGENT). */
struct limiter_redis_lease {
    const char *agent;
    double held;
    int this_agent;       /* this process' own lease */
    int live;             /* counted in held: unexpired (tb), of the current window (sw) */
    double window;        /* sw: the window it was taken in (Redis time / period) */
    double share_per_s;   /* tb: a rate lease's share of the rate (0: a token lease) */
    double expires_in_ms; /* tb: from Redis' now (negative: expired) */
};

/* A client's Redis bucket as the hash says and as the scripts would see it
 * now (an estimate: the scripts also apply expiries in time order), at
 * Redis' time. Times in ms: retry_after_ms and reset_ms rounded up, the
 * others not rounded. */
struct limiter_redis_state {
    const char *error; /* the reads failed: why (the rest is unset) */
    int exists;
    int64_t ttl_ms; /* PTTL: -1 none, -2 no key */
    /* sliding and fixed window */
    double window, window_left_ms, current, previous, estimate;
    double window_start_ms, window_end_ms; /* Redis time, ms since the epoch */
    /* token bucket */
    double t, refilled_ms_ago, tokens_now;
    /* both */
    double remaining;
    int blocked;
    double retry_after_ms, reset_ms;
    double blocked_left_ms; /* block_for: until the block (field bu) ends; 0: none */
    size_t nleases;
    const struct limiter_redis_lease *leases;
    double held; /* over the live leases */
    unsigned holders;
};

/* A concurrency rule's slots for one client: in this agent's table
 * (standalone; the local share while Redis is down) and, with Redis, in its
 * sorted set (read by cc_reset.lua). Times in ms from now. */
struct limiter_slots_state {
    int concurrency; /* the rule is algorithm = concurrency: the rest is set */
    uint64_t local_held, local_earliest_ms;
    int redis_read; /* with Redis: it answered (else redis_error says why) */
    const char *redis_error;
    uint64_t redis_held, redis_earliest_ms, redis_latest_ms;
};

/* One client's state: standalone its bucket; with Redis its lease entry and
 * its Redis bucket; in both modes its fail-open backstop bucket. */
struct limiter_key_state {
    struct limiter_who who;
    int bucket_found; /* standalone: 0 when it has none (a request finds it full) */
    struct bucket_state bucket;
    int lease_found; /* Redis mode: this agent's entry for the key */
    struct lease_state lease;
    struct limiter_redis_state redis; /* Redis mode */
    int backstop_found;
    struct bucket_state backstop;
    struct limiter_slots_state slots; /* a concurrency rule: only this is set */
    /* a scope = global rule on its region's claimer: what it holds of the
     * key's global bucket (gclaim_key); 0 elsewhere */
    int global_found;
    struct gclaim_key_state global;
};

/* What a reset did. */
struct limiter_reset_result {
    struct limiter_who who;
    int bucket_dropped;   /* standalone: it had a bucket */
    int backstop_dropped; /* it had a backstop bucket */
    /* Redis mode: the bucket is full again less what running leases hold
     * (tb_reset / sw_reset), and this agent's negative cache is forgotten;
     * other agents keep theirs until its retry time. */
    int redis_reset; /* 0: failed, redis_error says why */
    const char *redis_error;
    int64_t remaining_before; /* whole tokens left just before */
    int64_t remaining, held, holders;
    int lease_cache_cleared; /* this agent had an entry for the key */
    /* a scope = global rule: its global bucket reset too (gclaim_reset),
     * or why not */
    int global;
    int global_reset;
    const char *global_error;
    int64_t global_remaining, global_held, global_holders;
    /* the fleet told (limiter_reset.c): agents in the heartbeat set, and
     * those that dropped their state of the key within RESET_WAIT_S, this
     * one included (standalone: 1 of 1) */
    unsigned fleet_agents, fleet_confirmed;
    /* a concurrency rule: the slots held just before they were all freed
     * (local and, with Redis, redis_read or redis_error) */
    struct limiter_slots_state slots;
};

/* Called once with the outcome (it and its strings are valid during the
 * call only: copy what is kept), on the limiter's thread. */
typedef void limiter_inspect_cb(void *arg, const struct limiter_key_state *st);
typedef void limiter_reset_cb(void *arg, const struct limiter_reset_result *res);

/* Read the state of client c of rs (the rules in force: referenced until
 * the callback has run). Changes nothing. cb runs once: standalone before
 * this returns; with Redis once the key's server (Cluster: the master of
 * its slot) answered three reads sent at once (HGETALL, TIME, PTTL, answered
 * in order), or when they failed (Redis down: maybe before this returns; a
 * connection that stops answering is dropped by the store after its
 * timeout), with redis.error set. 0, or a LIMITER_* error (cb not called).
 * The limiter's thread only (the main loop). */
int limiter_inspect(struct limiter *l, struct ruleset *rs, const struct limiter_client *c,
                    limiter_inspect_cb *cb, void *arg);

/* Clear client c: standalone, drop its bucket; with Redis, reset its Redis
 * bucket (tb_reset / sw_reset) and take the answer into its lease entry;
 * in both modes then drop its backstop bucket (with Redis whatever Redis
 * answered). Logs "client reset" unless Redis failed. Callback, threads
 * and errors as for limiter_inspect(). */
int limiter_reset(struct limiter *l, struct ruleset *rs, const struct limiter_client *c,
                  limiter_reset_cb *cb, void *arg);

#endif
