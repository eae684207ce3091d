/* SPDX-License-Identifier: Apache-2.0 */
/* limiter.c - the bridge: runs the limiter's core (limiter_core.h) on the
 * limiter's loop and the store. Worker threads decide through the core and
 * queue the jobs it hands back; the loop sends them (a script call, or a new
 * key's first SET), feeds replies and timeouts back into the core, and keeps
 * the lease cache's ticks, Redis' state and the stall warning. */
#include "limiter/limiter.h"
#include "limiter/limiter_int.h"
#include "limiter/limiter_charge.h"
#include "limiter/limiter_cc.h"
#include "limiter/limiter_first.h"

#include <ev.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "limiter/script_args.h"
#include "limits/slots.h"
#include "store/script.h"
#include "store/store.h"
#include "store/store_epoch.h"
#include "store/store_heartbeat.h"
#include "global/gclaim.h"

#define STRIPES 64
#define STALL_PROBE_US 100000       /* while stalled, one decision per 100 ms still asks Redis */
#define STALL_LOG_EVERY_US 10000000 /* a flapping Redis is logged every 10 s at most */

/* ---- Redis calls (limiter thread) ----------------------------------------- */

static void inflight_unlink(struct limiter *l, struct rjob *j)
{
    if (l->icheck == j)
        l->icheck = j->inext;
    if (j->iprev)
        j->iprev->inext = j->inext;
    else
        l->ihead = j->inext;
    if (j->inext)
        j->inext->iprev = j->iprev;
    else
        l->itail = j->iprev;
    j->iprev = j->inext = NULL;
}

static void send_job(struct limiter *l, struct rjob *j);

static void on_reply(void *arg, const struct store_result *res)
{
    struct rjob *j = arg;
    struct limiter *l = j->l;
    uint64_t now = util_now_us();

    inflight_unlink(l, j);
    /* Only an answer in time ends a stall: late answers to calls that timed
     * out say Redis is still slow. */
    if (res->status != STORE_DOWN && !j->timed_out && atomic_load(&l->stalled)) {
        atomic_store(&l->stalled, 0);
        if (l->stall_announced) {
            l->stall_announced = 0;
            LOG_INFO("\"redis answering in time again\"");
        }
    }
    j = core_reply(&l->core, j, res, now); /* frees j, or what is to go next */
    if (j)
        send_job(l, j);
}

/* j's script call (j is in flight). */
static void send_eval(struct limiter *l, struct rjob *j)
{
    struct script_args a;
    const struct lease_job *lj = j->kind == RJOB_LEASE ? j->lj : NULL;
    int fed = lj ? lj->fed : j->fed;
    uint64_t reserve = fed ? gclaim_reserve(l->global, lj ? lj->burst : j->burst) : 0;
    enum store_script script = core_job_args(j, store_agent_id(l->store), l->ttl_ms, reserve, &a);
    size_t keylen;
    const char *key = core_job_key(j, &keylen);

    /* a scope = global rule's key: active in this region (gclaim.h) */
    if (l->global && fed && keylen > l->core.prefix_len) {
        gclaim_note(l->global, key + l->core.prefix_len, keylen - l->core.prefix_len,
                    lj ? lj->limit : j->limit, lj ? lj->period_ms : j->period_ms,
                    lj ? lj->burst : j->burst);
    }
    /* The callback runs now when Redis is down: on_reply unlinks. */
    store_eval(l->store, script, key, keylen, a.argc, a.argv, a.argvlen, on_reply, j);
}

/* The reply to a new key's first SET (limiter_first.c): the script after
 * all, or the reply as the script's would be. */
static void wake(struct limiter *l);

/* A new key's SET answered. A key that was there goes to its script after
 * all: held back (the store corked) until the replies of this read are
 * done, so that those of one batch of SETs go as one batch call, not one
 * call each (a script call's fixed cost in Redis is about that of an
 * operation); wake_cb uncorks. */
static void on_set(void *arg, const struct store_result *res)
{
    struct rjob *j = arg;
    struct limiter *l = j->l;
    struct store_result r;

    if (core_first_reply(j, res, util_wall_us(), &r) == CORE_FIRST_REPLY) {
        on_reply(j, &r);
        return;
    }
    if (!l->evals_corked) {
        l->evals_corked = 1;
        store_cork(l->store, 1);
        wake(l);
    }
    send_eval(l, j);
}

static void send_job(struct limiter *l, struct rjob *j)
{
    j->sent_us = util_now_us();
    if (j->lj)
        j->lj->sent_us = j->sent_us;
    j->iprev = l->itail;
    j->inext = NULL;
    if (l->itail)
        l->itail->inext = j;
    else
        l->ihead = j;
    l->itail = j;
    if (!l->icheck)
        l->icheck = j;
    /* a call for decisions: a claim or top-up (tokens decisions spend), an
     * exact call, a concurrency slot's acquire; not a lease's give-back, a
     * refund or a slot's release (the status page's calls per decision) */
    if (j->kind == RJOB_EXACT || j->kind == RJOB_CC ||
        (j->kind == RJOB_LEASE && j->lj->kind != LEASE_JOB_RETURN))
        METRIC_INC(redis_decision_calls);
    j->l = l;
    const char *argv[CORE_FIRST_ARGC];
    size_t argvlen[CORE_FIRST_ARGC];
    /* a new key: one plain SET (limiter_first.c), routed, pipelined and
     * failed (down: the callback runs now) as a script call on the key is */
    if (core_first_args(j, argv, argvlen) == 0)
        store_write(l->store, argv[1], argvlen[1], CORE_FIRST_ARGC, argv, argvlen, on_set, j);
    else
        send_eval(l, j);
}

static void wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct limiter *l = a->data;
    struct rjob *q, *next, *rev = NULL;

    pthread_mutex_lock(&l->qlock);
    q = l->queue;
    l->queue = NULL;
    pthread_mutex_unlock(&l->qlock);
    for (; q; q = next) { /* the queue is LIFO: restore arrival order */
        next = q->next;
        q->next = rev;
        rev = q;
    }
    store_cork(l->store, 1); /* what workers queued together goes out together */
    for (q = rev; q; q = next) {
        next = q->next;
        send_job(l, q);
    }
    l->evals_corked = 0; /* (on_set's, with them) */
    store_cork(l->store, 0);
}

/* A call went past [redis] timeout: the fallback decided its requests
 * (each agent's backstop, share x the rule) and Redis never saw them until
 * they are repaid: the agent limits less exactly than the operator thinks,
 * a warning (redis_slow) until [redis] errors_quiet passes without one
 * (slow_tick). */
static void slow_note(struct limiter *l, uint64_t now_us)
{
    l->slow_calls++;
    l->slow_last_us = now_us;
    if (l->slow_calls == 1 || (l->slow_calls & (l->slow_calls - 1)) == 0)
        warning_raise(WARNING_REDIS_SLOW,
                      "Redis answered %llu call%s later than [redis] timeout (%llu ms): "
                      "the fallback decided their requests (its backstop, [fallback] share "
                      "of each rule), repaid once Redis answers. Redis is overloaded or "
                      "blocked (slow commands, a fork, swapping), or the network to it is; "
                      "raise timeout only if Redis is healthy and the network slow",
                      (unsigned long long)l->slow_calls, l->slow_calls == 1 ? "" : "s",
                      (unsigned long long)(l->timeout_us / 1000));
}

static void slow_tick(struct limiter *l, uint64_t now_us)
{
    if (l->slow_calls && now_us - l->slow_last_us >= l->slow_quiet_us) {
        l->slow_calls = 0;
        warning_clear(WARNING_REDIS_SLOW);
    }
}

/* Answer from the fallback whatever has waited past the Redis timeout. */
static void timeouts_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct limiter *l = t->data;
    uint64_t now = util_now_us();

    struct rjob *j;

    /* Calls time out in the order they were sent: start past those that
     * already did, so a frozen Redis does not make this scan grow. */
    for (j = l->icheck; j && now - j->sent_us >= l->timeout_us; j = j->inext) {
        l->icheck = j->inext;
        j->timed_out = 1;
        METRIC_INC(redis_errors);
        slow_note(l, now);
        /* Until Redis answers something, new decisions do not wait for it.
         * Not with a cluster: one slow node says nothing of the others (its
         * keys fall back through their own timeouts). */
        if (!store_clustered(l->store) && !atomic_exchange(&l->stalled, 1) &&
            now - l->stall_logged_us >= STALL_LOG_EVERY_US) {
            l->stall_logged_us = now;
            l->stall_announced = 1;
            LOG_WARN("\"redis slower than timeout: rules fall back\" timeout_ms=%llu",
                     (unsigned long long)(l->timeout_us / 1000));
        }
        core_timeout(&l->core, j, now);
    }
}

static void send_jobs(struct limiter *l, struct lease_job *jobs)
{
    struct lease_job *next;

    store_cork(l->store, 1);
    for (; jobs; jobs = next) {
        next = jobs->next;
        send_job(l, core_lease_rjob(jobs));
    }
    store_cork(l->store, 0);
}

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct limiter *l = t->data;
    struct lease_job *jobs = NULL;

    uint64_t now = util_now_us();

    lease_tick(l->core.leases, now, atomic_load(&l->up), &jobs);
    send_jobs(l, jobs);
    slow_tick(l, now);
}

/* "redis down" at most every 10 s for the process (every worker's store
 * goes down with the same Redis; a Redis that breaks each connection at
 * once goes down at each reconnect), with the losses not said since. */
static struct log_gate down_gate;

static void on_state(void *arg, int up)
{
    struct limiter *l = arg;
    unsigned long long before;

    atomic_store(&l->up, up);
    atomic_store(&l->stalled, 0);
    if (!up && (int)LOG_LVL_WARN <= (int)log_level && log_gate_open(&down_gate, 10.0, &before))
        LOG_WARN("\"redis down: rules fall back\" mode=degraded suppressed=%llu", before);
}

/* Sentinel: each answer naming the master starts a new count of what the
 * keys take from it; none for the window makes the fallback charge that
 * count to the backstops (decide_fallback). */
static void on_sentinel(void *arg, int confirmed)
{
    struct limiter *l = arg;

    if (confirmed)
        lease_confirmed(l->core.leases);
    else
        lease_unconfirmed(l->core.leases);
}

/* Redis lost the buckets (store_epoch.h): the leases held here were granted
 * from buckets that are gone. Give none back (that would add tokens to
 * buckets made afresh) and spend none more: void them all. What the fleet
 * admits across the loss is then at most one extra b per key: the fresh
 * bucket's. */
static void on_state_lost(void *arg)
{
    struct limiter *l = arg;
    size_t held = lease_void_all(l->core.leases);

    LOG_INFO("\"leases dropped: redis state lost\" held=%zu", held);
    /* the heartbeat set went with the rest: share = auto must not shrink */
    store_heartbeat_rebuilding(l->heartbeat);
}

/* ---- decisions (worker threads) ------------------------------------------- */

/* While Redis is stalled (a call timed out, none answered since), decisions
 * do not wait for it, but one request per STALL_PROBE_US still goes, so that
 * recovery is seen even when only exact (lease = off) rules are in use. */
static int redis_stalled(struct limiter *l, uint64_t now_us)
{
    if (!atomic_load_explicit(&l->stalled, memory_order_relaxed))
        return 0;
    uint64_t last = atomic_load_explicit(&l->last_probe_us, memory_order_relaxed);
    if (now_us - last >= STALL_PROBE_US &&
        atomic_compare_exchange_strong(&l->last_probe_us, &last, now_us))
        return 0;
    return 1;
}

/* Queue the core's jobs for the limiter's thread. Returns whether any. */
static int queue_jobs(struct limiter *l, struct core_jobs *o)
{
    struct rjob *j, *next;

    if (!o->head)
        return 0;
    pthread_mutex_lock(&l->qlock);
    for (j = o->head; j; j = next) { /* the queue is LIFO: wake_cb turns it round */
        next = j->next;
        j->next = l->queue;
        l->queue = j;
    }
    pthread_mutex_unlock(&l->qlock);
    return 1;
}

/* Wake the limiter's thread. ev_async_send() fences memory twice even when
 * a wake-up is already pending; the queue is taken under qlock after that
 * flag is cleared, so skipping it then loses nothing (libev:
 * ev_async_pending). */
static void wake(struct limiter *l)
{
    if (l->inline_on && pthread_equal(pthread_self(), l->owner)) {
        l->inline_queued = 1; /* limiter_pump(), before the loop polls */
        return;
    }
    if (!ev_async_pending(&l->wake))
        ev_async_send(l->loop, &l->wake);
}

void limiter_inline(struct limiter *l, int on)
{
    l->owner = pthread_self();
    l->inline_on = on;
}

int limiter_pump(struct limiter *l)
{
    if (!l->inline_queued)
        return 0;
    l->inline_queued = 0;
    wake_cb(l->loop, &l->wake, 0);
    return 1;
}

int limiter_decide(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    struct core_jobs jobs = {0};
    size_t max_entries = req->rs->cfg->max_entries;

    /* max_entries applies at reload: the ruleset carries it */
    if (atomic_load_explicit(&l->core.budget.max, memory_order_relaxed) != max_entries)
        atomic_store_explicit(&l->core.budget.max, max_entries, memory_order_relaxed);

    int up = l->store && atomic_load(&l->up);
    int ask = up && !redis_stalled(l, now_us);
    long decided = core_decide(&l->core, req, now_us, up, ask, &jobs);

    if (queue_jobs(l, &jobs))
        wake(l);
    if (decided < 0)
        return -1;
    return core_decide_end(req, (unsigned)decided);
}

void limiter_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    struct core_jobs jobs = {0};

    core_settle(&l->core, req, now_us, l->store && atomic_load(&l->up), &jobs);
    if (queue_jobs(l, &jobs))
        wake(l);
}

void limiter_parts(struct limiter *l, struct limiter_parts *out)
{
    out->buckets = l->core.buckets;
    out->backstop = l->core.backstop;
    out->leases = l->core.leases;
    out->store = l->store;
    out->slots = l->core.slots;
    out->taken = l->core.taken;
}

void limiter_req_release(struct limiter_req *req)
{
    free(req->waiters);
    req->waiters = NULL;
    req->waiters_cap = 0;
}

/* ---- lifecycle ------------------------------------------------------------ */

struct limiter *limiter_new(struct ev_loop *loop, const struct config *cfg, char *err,
                            size_t errlen)
{
    struct limiter *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&l->qlock, NULL);
    l->loop = loop;
    int standalone = config_standalone(cfg);
    struct lease_config lc = {cfg->lease_interval_ms * 1000,
                              cfg->lease_ttl_ms * 1000,
                              cfg->lease_max_fraction,
                              cfg->lease_rate ? cfg->lease_rate_ttl_ms * 1000 : 0,
                              1,
                              1};
    if (core_init(&l->core, cfg->max_entries, STRIPES, standalone ? NULL : &lc, cfg->redis_prefix) <
        0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (standalone)
        return l;

    l->timeout_us = cfg->redis_timeout_ms * 1000;
    l->slow_quiet_us = cfg->redis_errors_quiet_ms * 1000;
    l->ttl_ms = cfg->lease_ttl_ms;
    ev_async_init(&l->wake, wake_cb);
    l->wake.data = l;
    ev_async_start(loop, &l->wake);
    ev_timer_init(&l->tick, tick_cb, cfg->lease_interval_ms / 1000.,
                  cfg->lease_interval_ms / 1000.);
    l->tick.data = l;
    ev_timer_start(loop, &l->tick);
    double every = cfg->redis_timeout_ms / 1000. / 5;
    if (every < 0.002)
        every = 0.002;
    ev_timer_init(&l->timeouts, timeouts_cb, every, every);
    l->timeouts.data = l;
    ev_timer_start(loop, &l->timeouts);
    struct store_options so;
    store_options_from_config(cfg, &so);
    l->store = store_new(loop, &so, err, errlen);
    if (!l->store)
        goto fail;
    l->core.redis = 1;
    store_on_state(l->store, on_state, l);
    store_on_sentinel(l->store, on_sentinel, l);
    /* the fleet's size (fleet.h): restart-only settings, [redis] prefix and listen */
    l->heartbeat = store_heartbeat_new(loop, l->store, cfg->redis_prefix, cfg->listen);
    if (!l->heartbeat) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* other agents' resets, applied here, read every [rules] poll */
    l->resets = limiter_resets_new(l, cfg->rules_poll_ms / 1000.);
    if (!l->resets) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* the keyspace's epoch: a loss named, leases settled (on_state_lost);
     * epoch_check = 0: not checked */
    if (cfg->redis_epoch_check_ms)
        l->epoch = store_epoch_new(loop, l->store, cfg->redis_prefix,
                                   cfg->redis_epoch_check_ms / 1000., on_state_lost, l);
    if (cfg->redis_epoch_check_ms && !l->epoch) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (config_global(cfg)) { /* [global]: this region's claims, on their own connection */
        l->global = gclaim_new(loop, cfg, l->store, store_agent_id(l->store), err, errlen);
        if (!l->global)
            goto fail;
    }
    atomic_store(&metrics.redis_configured, 1);
    return l;
fail:
    limiter_free(l);
    return NULL;
}

int limiter_redis(const struct limiter *l)
{
    return l->store != NULL;
}

struct store *limiter_store(struct limiter *l)
{
    return l->store;
}

struct store_heartbeat *limiter_heartbeat(struct limiter *l)
{
    return l->heartbeat;
}

int limiter_reconfigure(struct limiter *l, const struct config *cfg)
{
    struct store_options so;

    if (!l->store)
        return 0;
    if (gclaim_reconfigure(l->global, cfg) < 0)
        return -1;
    store_options_from_config(cfg, &so);
    return store_reconfigure(l->store, &so);
}

static void run_until_idle(struct limiter *l, uint64_t deadline)
{
    while (store_up(l->store) && store_pending(l->store) > 0 && util_now_us() < deadline)
        ev_run(l->loop, EVRUN_ONCE);
}

void limiter_shutdown(struct limiter *l, double timeout_s)
{
    uint64_t deadline = util_now_us() + (uint64_t)(timeout_s * 1e6);
    struct lease_job *jobs = NULL;

    if (!l || !l->store)
        return;
    store_heartbeat_leave(l->heartbeat); /* the others' N follows at once */
    store_epoch_stop(l->epoch);
    wake_cb(l->loop, &l->wake, 0); /* what workers queued last */
    run_until_idle(l, deadline);
    /* A reply that came in meanwhile may have granted an entry more (its
     * claim was in flight at the last pass): go again, a few times at most,
     * within the deadline. What still holds a lease then expires in Redis
     * after [lease] ttl (under-admission only). */
    for (int pass = 0; pass < 5 && store_up(l->store) && util_now_us() < deadline; pass++) {
        jobs = NULL;
        lease_drain(l->core.leases, util_now_us(), &jobs);
        if (!jobs)
            break;
        send_jobs(l, jobs);
        run_until_idle(l, deadline);
    }
    ev_timer_stop(l->loop, &l->tick);
    ev_timer_stop(l->loop, &l->timeouts);
    ev_async_stop(l->loop, &l->wake);
    limiter_resets_stop(l->resets);
    gclaim_stop(l->global); /* before its regional store */
    store_free(l->store); /* fails what is still in flight */
    l->store = NULL;
    gclaim_free(l->global);
    l->global = NULL;
    l->core.redis = 0;
    store_heartbeat_free(l->heartbeat); /* after its store */
    l->heartbeat = NULL;
    limiter_resets_free(l->resets);
    l->resets = NULL;
    store_epoch_free(l->epoch);
    l->epoch = NULL;
    while (l->ihead) { /* callbacks already ran; nothing should remain */
        struct rjob *j = l->ihead;
        inflight_unlink(l, j);
        if (j->kind != RJOB_LEASE) /* a lease call is its lease job's */
            free(j);
    }
}

void limiter_free(struct limiter *l)
{
    if (!l)
        return;
    store_heartbeat_stop(l->heartbeat);
    store_epoch_stop(l->epoch);
    limiter_resets_stop(l->resets);
    gclaim_stop(l->global);
    if (l->store) {
        ev_timer_stop(l->loop, &l->tick);
        ev_timer_stop(l->loop, &l->timeouts);
        ev_async_stop(l->loop, &l->wake);
        store_free(l->store);
    }
    store_heartbeat_free(l->heartbeat); /* after its store */
    store_epoch_free(l->epoch);
    limiter_resets_free(l->resets);
    gclaim_free(l->global); /* after its regional store */
    core_free(&l->core);
    pthread_mutex_destroy(&l->qlock);
    free(l);
}

/* The current parameters of a rule by name, from rs->params or (with
 * backstop) rs->backstop; NULL when the rule is gone. A rule with limits
 * from args has them per bucket: each is judged by those of its last take. */
static const struct bucket_params *rule_params(const struct ruleset *rs, const char *rule,
                                               int backstop)
{
    for (size_t i = 0; i < rs->cfg->nrules; i++) {
        if (strcmp(rs->cfg->rules[i].name, rule) != 0)
            continue;
        /* share = auto: a backstop follows the fleet's size, so each bucket
         * is judged by the limits it was last taken with. */
        if (config_rule_per_request(&rs->cfg->rules[i]) ||
            (backstop && rs->cfg->fallback_share == CFG_SHARE_AUTO))
            return &bucket_params_per_bucket;
        return backstop ? &rs->backstop[i] : &rs->params[i];
    }
    return NULL;
}

static const struct bucket_params *params_of(void *ctx, const char *rule)
{
    return rule_params(ctx, rule, 0);
}

static const struct bucket_params *backstop_of(void *ctx, const char *rule)
{
    return rule_params(ctx, rule, 1);
}

size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit)
{
    uint64_t wall = util_wall_us(); /* fixed windows count on it */
    size_t n =
        bucket_table_expire_at(l->core.buckets, now_us, wall, max_visit, params_of, (void *)rs);
    n += bucket_table_expire_at(l->core.backstop, now_us, wall, max_visit, backstop_of, (void *)rs);
    core_cc_expire(&l->core, now_us);
    atomic_store(&metrics.buckets,
                 bucket_table_count(l->core.buckets) + bucket_table_count(l->core.backstop));
    return n;
}
