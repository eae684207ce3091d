/* SPDX-License-Identifier: Apache-2.0 */
/* lease_cache.c - the local token lease cache: decisions, claims and give-backs,
 * replies, the tick. Where entries live (stripes, hash chains, the age and
 * active lists, eviction, the sweep) is lease_table.c. */
#include "lease.h"

#include <math.h>
#include <stdlib.h>

#include "core/dlist.h"
#include "core/util.h"
#include "lease_int.h"
#include "metrics/metrics.h"

/* ---- decisions ------------------------------------------------------------ */

/* Tokens in the Redis bucket now, as far as we know: the last report plus the
 * refill since, capped as the script caps it (burst minus what is held). */
static double bucket_now(const struct lease_entry *e, uint64_t now_us)
{
    if (!e->known)
        return 0;
    if (bucket_windowed(e->algorithm))
        return e->t_last;
    double rate = (double)e->limit / (double)e->period_us;
    double mine = e->share > 0 ? (double)e->slice : (double)e->tokens;
    double cap = (double)e->burst - (double)e->others_held - mine;
    double t = e->t_last + rate * (double)lease_since(now_us, e->reply_us);
    if (t > cap)
        t = cap;
    return t < 0 ? 0 : t;
}

static uint64_t reset_estimate(const struct lease_entry *e, uint64_t now_us, double tnow)
{
    if (bucket_windowed(e->algorithm) || !e->known) {
        uint64_t elapsed = lease_since(now_us, e->reply_us) / 1000;
        return e->reset_ms > elapsed ? (e->reset_ms - elapsed) * 1000 : 0;
    }
    double level = tnow + (double)e->tokens + (double)e->others_held;
    double deficit = (double)e->burst - level;
    if (deficit <= 0)
        return 0;
    /* burst 1e15 at 1/365d is 3e28 us: past what a uint64_t holds */
    double us = ceil(deficit * (double)e->period_us / (double)e->limit);
    return us < (double)BUCKET_MAX_PERIOD_US ? (uint64_t)us : BUCKET_MAX_PERIOD_US;
}

static void fill_allowed(const struct lease_entry *e, uint64_t now_us, struct bucket_result *res)
{
    double tnow = bucket_now(e, now_us);
    res->allowed = 1;
    double level = tnow + (double)e->tokens + 1e-9;
    /* the conversion truncates, which is floor() at or above 0 */
    res->remaining = (uint64_t)(level >= 0 ? level : floor(level));
    res->reset_us = reset_estimate(e, now_us, tnow);
    res->retry_us = 0;
}

static void fill_blocked(const struct lease_entry *e, uint64_t now_us, struct bucket_result *res)
{
    res->allowed = 0;
    res->remaining = 0;
    res->reset_us = reset_estimate(e, now_us, bucket_now(e, now_us));
    res->retry_us = e->blocked_until_us > now_us ? e->blocked_until_us - now_us : 1000000;
    if (res->reset_us < res->retry_us)
        res->reset_us = res->retry_us;
}

/* How many tokens to ask for: what the key will spend until the next top-up
 * (its demand over about two intervals, since a claim takes a round trip)
 * plus those waiting, minus what it holds; at least 1 when someone waits; at
 * most max_fraction of the burst; and, when the bucket runs low, no more than
 * a fair share of what is left, so one agent does not strand tokens that
 * another needs. */
static uint64_t claim_size(const struct lease_table *t, const struct lease_entry *e,
                           uint64_t now_us)
{
    double d = e->demand > e->hits ? e->demand : (double)e->hits;
    /* Prefetch only for keys busy for more than a tick: most of a million
     * per-IP keys are seen once or now and then, and a claim of exactly what
     * waits costs them one call per request, with nothing to give back. */
    double want = (double)e->nwait;
    if (e->known && (e->demand >= 1.0 || e->hits >= 2))
        want += ceil(2.0 * d) - (double)e->tokens;
    uint64_t size = bucket_windowed(e->algorithm) ? e->limit : e->burst;
    double cap = floor(t->cfg.max_fraction * (double)size);
    if (cap < 1)
        cap = 1;
    if (e->known) {
        double fair = floor(bucket_now(e, now_us) / (double)(e->holders + 1));
        if (fair < cap)
            cap = fair < 1 ? 1 : fair;
    }
    if (want > cap)
        want = cap;
    /* Ahead of need, a key whose requests cost c > 1 claims c or more: a
     * lease short of one request's cost strands what it holds, and the
     * request goes to Redis anyway. */
    if (!e->nwait && want < (double)e->cost)
        want = 0;
    if (want < (e->nwait ? 1 : 0))
        want = 1;
    return want < 0 ? 0 : (uint64_t)want;
}

static struct lease_job *new_job(const struct lease_table *t, struct lease_entry *e, int kind)
{
    struct lease_job *j = lease_job_alloc(t, &t->stripes[e->stripe]);
    if (!j)
        return NULL;
    j->e = e;
    j->kind = kind;
    j->algorithm = e->algorithm;
    j->limit = e->limit;
    j->fed = e->fed;
    j->period_ms = e->period_ms;
    j->burst = e->burst;
    j->block_ms = e->block_ms;
    j->offset_ms = e->offset_ms;
    j->key = e->key;
    j->keylen = e->keylen;
    /* The report rides on this call: spent tokens since the last one. */
    j->used = e->used;
    e->used = 0;
    e->inflight = j;
    return j;
}

/* Whether claim j of e may go as an exact call instead: it asks for the one
 * token its one waiter needs, and has nothing to report, give back or renew.
 * That is a cold key's claim (most of a million per-IP keys): granted, its
 * token is spent at once and nothing is left to lease. The exact script
 * decides the same request without touching the key's lease fields, which
 * costs Redis less, and its reply is shorter. */
static int exact_will_do(const struct lease_table *t, const struct lease_entry *e,
                         const struct lease_job *j)
{
    return t->cfg.exact_cold && j->want == 1 && e->nwait == 1 && !j->rated && j->used == 0 &&
           j->returned == 0 && e->tokens == 0 && e->share <= 0;
}

/* A claim for e; returned: tokens it gives back (a lease that ended before
 * its reply came). */
static struct lease_job *claim_returning(const struct lease_table *t, struct lease_entry *e,
                                         uint64_t now_us, uint64_t returned)
{
    struct lease_job *j = new_job(t, e, LEASE_JOB_CLAIM);
    if (j) {
        j->returned = returned;
        if (rate_wanted(t, e, now_us))
            rate_claim(t, e, j, now_us);
        else
            j->want = claim_size(t, e, now_us);
        if (exact_will_do(t, e, j)) {
            j->kind = LEASE_JOB_EXACT;
            /* a key seen first now, Redis not heard of: likely new there too */
            j->first = e->seen == 1 && !e->known;
            METRIC_INC(lease_exact_calls);
        } else {
            METRIC_INC(lease_claims);
        }
    }
    return j;
}

static struct lease_job *make_claim(const struct lease_table *t, struct lease_entry *e,
                                    uint64_t now_us)
{
    return claim_returning(t, e, now_us, 0);
}

static struct lease_job *make_return(const struct lease_table *t, struct lease_entry *e)
{
    struct lease_job *j = new_job(t, e, LEASE_JOB_RETURN);
    if (j) {
        j->returned = e->tokens;
        METRIC_ADD(lease_tokens_returned, e->tokens);
        if (e->share > 0) {
            /* Redis counts the slice: all of it but what we give back is
             * reported spent (tb_return gives back held - used). */
            if (j->used < LEASE_VOID)
                j->used = e->slice > e->tokens ? e->slice - e->tokens : 0;
            rate_set_share(e, 0);
            e->slice = 0;
        }
        e->tokens = 0;
    }
    return j;
}

static void set_params(struct lease_entry *e, const struct bucket_params *p)
{
    e->algorithm = p->algorithm;
    e->limit = p->limit;
    e->fed = p->fed;
    e->period_us = p->period_us;
    e->burst = p->burst;
    e->block_us = p->block_us;
    e->offset_us = p->offset_us;
    e->period_ms = p->period_ms;
    e->block_ms = p->block_ms;
    e->offset_ms = p->offset_ms;
}

/* Whether a token lease should be topped up now rather than at the next
 * tick: the key spent more than twice its usual demand since the last tick
 * and holds less than half of that, so at this pace it runs dry before the
 * tick tops it up, and its requests would wait for Redis. That is a key whose
 * demand grows, above all a fresh hot key: each such claim asks for two
 * intervals at the pace seen so far (claim_size), so a lease grows to its
 * demand in a few round trips with no request waiting. A key at its usual
 * pace is left to the tick (two intervals' worth per top-up): no call more
 * than the tick makes; nor is a key whose Redis bucket is (as far as we
 * know) empty: a claim would get nothing, and the request that finds the
 * lease dry claims and caches the denial. One claim in flight per key. */
static int token_prefetch(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us,
                          int redis_up)
{
    return t->cfg.prefetch && redis_up && !e->inflight && e->hits >= 4 && 2 * e->tokens < e->hits &&
           (double)e->hits > 2.0 * e->demand &&
           bucket_now(e, now_us) >= 1; /* 0 while Redis has not said: no prefetch */
}

int lease_decide(struct lease_table *t, const char *key, size_t keylen,
                 const struct bucket_params *p, uint64_t now_us, int redis_up,
                 struct lease_waiter *w, struct bucket_result *res, struct lease_job **job)
{
    return lease_decide_cost(t, key, keylen, p, 1, now_us, redis_up, w, res, job);
}

int lease_decide_cost(struct lease_table *t, const char *key, size_t keylen,
                      const struct bucket_params *p, uint64_t n, uint64_t now_us, int redis_up,
                      struct lease_waiter *w, struct bucket_result *res, struct lease_job **job)
{
    uint64_t need = n ? n : 1; /* a check (n = 0) passes where 1 would */
    uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, keylen));
    unsigned si = util_stripe(h, t->nstripes);
    struct lease_stripe *s = &t->stripes[si];
    struct lease_entry *e;
    int ret;

    pthread_mutex_lock(&s->lock);
    e = lease_entry_get(t, s, si, h, key, keylen, now_us);
    if (!e) {
        pthread_mutex_unlock(&s->lock);
        return LEASE_DOWN; /* out of memory: the fallback still answers */
    }
    set_params(e, p);
    lease_entry_activate(s, e);
    lease_entry_touch(s, e, now_us);
    /* demand in tokens, so that claims are sized for the costs (saturated) */
    e->hits = need > UINT32_MAX - e->hits ? UINT32_MAX : e->hits + (uint32_t)need;
    e->last_hit_us = now_us;
    e->cost = need > UINT32_MAX ? UINT32_MAX : (uint32_t)need;
    if (e->seen++ == 0)
        e->first_us = now_us;
    e->rl_hits++;
    rate_refill(e, now_us);

    if (now_us < e->blocked_until_us) {
        fill_blocked(e, now_us, res);
        /* the cache knows when one token is back: n come (n - 1) / r later */
        if (n > 1 && p->limit > 0) {
            double more = (double)(n - 1) * (double)p->period_us / (double)p->limit;
            res->retry_us += more < 1e15 ? (uint64_t)more : (uint64_t)1e15;
            if (res->reset_us < res->retry_us)
                res->reset_us = res->retry_us;
        }
        METRIC_INC_LOCAL(lease_negative_hits);
        ret = LEASE_DONE;
    } else if (e->tokens >= need && now_us < e->deadline_us) {
        e->tokens -= n; /* a cost is spent at once */
        lease_entry_taken(t, e, n);
        if (e->share > 0) {
            if (rate_prefetch(t, e, now_us))
                *job = make_claim(t, e, now_us); /* renew before it runs dry */
        } else {
            e->used += n;
            if (token_prefetch(t, e, now_us, redis_up))
                *job = make_claim(t, e, now_us); /* top up before it runs dry */
        }
        fill_allowed(e, now_us, res);
        METRIC_INC_LOCAL(lease_local_decisions);
        ret = LEASE_DONE;
    } else if (!redis_up || (e->inflight && e->inflight->timed_out)) {
        /* Redis is down, or already late for this key: do not wait again. */
        ret = LEASE_DOWN;
    } else if (n != 1) {
        /* More than the lease holds (or a check it cannot answer): one exact
         * call, which takes from what no lease holds, so the bound holds. A
         * claim sized for it could strand a large cost's worth of tokens. */
        ret = LEASE_EXACT;
    } else if (e->nwait >= LEASE_MAX_WAITERS) {
        /* Never admit what Redis did not grant: refuse, briefly. */
        e->blocked_until_us = 0;
        fill_blocked(e, now_us, res);
        res->retry_us = 1000000;
        ret = LEASE_DONE;
    } else {
        if (e->tokens > 0 && now_us >= e->deadline_us)
            e->tokens = 0; /* expired here; Redis counts them as spent */
        if (e->share > 0 && now_us >= e->deadline_us)
            rate_set_share(e, 0);
        w->next = NULL;
        w->fallback = 0;
        w->exact = 0;
        if (e->wait_tail)
            e->wait_tail->next = w;
        else
            e->wait_head = w;
        e->wait_tail = w;
        e->nwait++;
        METRIC_INC(lease_waiters);
        if (!e->inflight)
            *job = make_claim(t, e, now_us);
        ret = LEASE_PENDING;
        if (!e->inflight) { /* out of memory for the job: decide by fallback */
            e->wait_head = e->wait_tail = NULL;
            e->nwait = 0;
            ret = LEASE_DOWN;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ret;
}

static void take_waiters(struct lease_entry *e, struct lease_waiter **list, int fallback)
{
    struct lease_waiter *w, *next;
    for (w = e->wait_head; w; w = next) {
        next = w->next;
        w->fallback = fallback;
        w->next = *list;
        *list = w;
    }
    e->wait_head = e->wait_tail = NULL;
    e->nwait = 0;
}

/* A claim or return reply (store/script.h), negative values read as 0. */
struct reply {
    uint64_t granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine;
    uint64_t share_ppm, had;
};

/* A lease is never believed longer than the ttl this agent asked for: its
 * end is bounded by the agent's own view, whatever a reply says. */
static void read_reply(const struct lease_table *t, const struct lease_job *job, const int64_t *v,
                       struct reply *r)
{
    uint64_t ttl_ms = job->ttl_ms ? job->ttl_ms : t->cfg.ttl_us / 1000;

    r->granted = nonneg(v[CLAIM_R_GRANTED]);
    r->remaining = nonneg(v[CLAIM_R_REMAINING]);
    r->held = nonneg(v[CLAIM_R_HELD]);
    r->holders = nonneg(v[CLAIM_R_HOLDERS]);
    r->retry_ms = ms_capped(v[CLAIM_R_RETRY_MS]);
    r->reset_ms = ms_capped(v[CLAIM_R_RESET_MS]);
    r->lease_ms = ms_capped(v[CLAIM_R_LEASE_MS]);
    if (r->lease_ms > ttl_ms)
        r->lease_ms = ttl_ms;
    r->mine = nonneg(v[CLAIM_R_MINE]);
    r->share_ppm = nonneg(v[CLAIM_R_SHARE_PPM]);
    if (r->share_ppm > 1000000)
        r->share_ppm = 1000000;
    r->had = nonneg(v[CLAIM_R_HAD]);
}

/* A call failed. We cannot know whether Redis ran it (the connection may
 * have died after sending). Keeping the lease would be wrong either way: its
 * report, if lost, would come back as tokens in the next `mine` and be spent
 * twice; if it did run, sending it again would hide tokens we still hold. So
 * void the lease: spend nothing more from it, and let the next claim report
 * everything Redis thinks we hold as spent (the script caps the report at
 * that). Under-admission only. */
void lease_entry_void(struct lease_entry *e)
{
    e->tokens = 0;
    e->deadline_us = 0;
    e->used = LEASE_VOID;
    rate_set_share(e, 0);
    e->slice = 0;
}

/* Take in what Redis says: its counts, and our lease. */
static void apply_reply(const struct lease_table *t, struct lease_entry *e,
                        const struct lease_job *job, const struct reply *r, uint64_t now_us)
{
    METRIC_ADD(lease_tokens_granted, r->granted);
    e->known = 1;
    e->t_last = (double)r->remaining;
    e->holders = r->holders;
    e->others_held = r->held > r->mine ? r->held - r->mine : 0;
    e->reset_ms = r->reset_ms;
    e->reply_us = now_us;
    if (job->rated) {
        rate_apply(t, e, job, r->granted, r->mine, r->share_ppm, r->had, r->lease_ms, now_us);
    } else if (r->lease_ms > 0 && r->mine > e->used) {
        /* Redis' count is authoritative: what it says we hold, less what we
         * spent since the call left. The deadline runs from when it left. */
        e->tokens = r->mine - e->used;
        e->deadline_us =
            job->sent_us + r->lease_ms * 1000 - lease_margin_for(t, r->lease_ms * 1000);
    } else {
        e->tokens = 0;
    }
    if (e->holders > 0 && r->mine > 0)
        e->holders--; /* holders counts us; keep "the others" */
}

/* The first waiter, allowed (its token already accounted by the caller). */
static void allow_first_waiter(struct lease_entry *e, uint64_t now_us, struct lease_waiter **done)
{
    struct lease_waiter *w = e->wait_head;

    e->wait_head = w->next;
    if (!e->wait_head)
        e->wait_tail = NULL;
    e->nwait--;
    fill_allowed(e, now_us, w->out);
    w->next = *done;
    *done = w;
}

/* Spend the lease on the waiters, first come first served, while it lasts. */
static void serve_waiters(const struct lease_table *t, struct lease_entry *e, uint64_t now_us,
                          struct lease_waiter **done)
{
    while (e->wait_head && e->tokens > 0 && now_us < e->deadline_us) {
        e->tokens--;
        e->used++;
        lease_entry_taken(t, e, 1);
        allow_first_waiter(e, now_us, done);
    }
}

/* How long a key out of tokens stays cached blocked, from retry_ms, Redis'
 * wait for its next token. Probing at each token would cost a key kept over
 * its limit one call per token it is granted. A rule whose rate brings
 * several tokens per interval waits instead until about an interval's worth
 * is due (at most a claim's max_fraction of the burst), and one claim takes
 * them: over its limit such a key costs a call or two per interval, as a hot
 * key does, not per token. The tokens wait in Redis meanwhile, where any
 * agent may take them (nothing is lost to the bound or to utilisation); the
 * requests in between are denied, as an empty bucket denies them, and are
 * told to come back then. Token buckets only (a sliding window's wait is its
 * window's end), and not for a rate lease (its local refill decides). */
static uint64_t batch_retry_ms(const struct lease_table *t, const struct lease_entry *e,
                               uint64_t retry_ms)
{
    /* With block_for every denial is a block: its end is the retry, exactly */
    if (e->algorithm != BUCKET_TOKEN_BUCKET || e->share > 0 || e->limit == 0 || e->block_us)
        return retry_ms;
    double token_ms = (double)e->period_us / 1000.0 / (double)e->limit;
    double k = floor((double)t->cfg.interval_us / 1000.0 / token_ms);
    double cap = floor(t->cfg.max_fraction * (double)e->burst);
    if (k > cap)
        k = cap;
    if (k < 2)
        return retry_ms;
    /* (k - 1) tokens take at most an interval; the sum keeps ms_capped's
     * cap, which retry_ms may already be at (a reply's retry_ms can be any
     * integer). */
    uint64_t max_ms = BUCKET_MAX_PERIOD_US / 1000;
    double extra = ceil((k - 1) * token_ms);
    if (extra >= (double)max_ms || retry_ms >= max_ms - (uint64_t)extra)
        return max_ms;
    return retry_ms + (uint64_t)extra;
}

/* Redis is out of tokens: answer every waiter blocked until the next ones
 * are due (batch_retry_ms), and make no Redis call until then (one probe
 * claim after). */
static void block_waiters(const struct lease_table *t, struct lease_entry *e, uint64_t now_us,
                          uint64_t retry_ms, struct lease_waiter **done)
{
    uint64_t ms = batch_retry_ms(t, e, retry_ms);
    /* A fed bucket (scope = global) refills when its region's claimer
     * deposits, at any of its rounds, not at the rule's rate: a key new to
     * the region is empty until the first one. The rate's wait (a minute
     * for 1/1m, an hour for 1/1h) would deny it all that time with tokens
     * in the bucket; it waits an interval at most (a penalty box, block_us,
     * ends when Redis says) */
    if (e->fed && !e->block_us) {
        uint64_t cap = t->cfg.interval_us / 1000 ? t->cfg.interval_us / 1000 : 1;
        if (ms > cap)
            ms = cap;
    }
    e->blocked_until_us = now_us + ms * 1000;
    while (e->wait_head) {
        struct lease_waiter *w = e->wait_head;
        e->wait_head = w->next;
        fill_blocked(e, now_us, w->out);
        w->next = *done;
        *done = w;
    }
    e->wait_tail = NULL;
    e->nwait = 0;
}

/* The reply of an exact job (enum script_exact_reply): Redis decided the
 * first waiter itself. What it says of the bucket is kept for the estimates
 * (remaining, reset) of later local decisions; what others hold, it does not
 * say. -1 when v is not such a reply. */
static int apply_exact(const struct lease_table *t, struct lease_entry *e, const int64_t *v, int n,
                       uint64_t now_us, struct lease_waiter **done)
{
    if (n < EXACT_R_COUNT)
        return -1;
    e->known = 1;
    e->t_last = (double)nonneg(v[EXACT_R_REMAINING]);
    e->reset_ms = ms_capped(v[EXACT_R_RESET_MS]);
    e->reply_us = now_us;
    if (v[EXACT_R_ALLOWED] != 1) {
        uint64_t retry_ms = ms_capped(v[EXACT_R_RETRY_MS]);
        block_waiters(t, e, now_us, retry_ms > 0 ? retry_ms : 1, done);
    } else if (!e->wait_head || e->owed > 0) {
        /* The call timed out and the backstop decided its request: Redis
         * took a token for it all the same, which pays for one it admitted.
         * Or it is in time, and the key still owes what a backstop admitted
         * (a key decided by exact calls has no lease to repay from): the
         * token Redis took pays for one of those, and whoever waited is
         * denied as Redis would have denied them had it seen the backstop's
         * admissions. */
        if (e->owed > 0) {
            e->owed--;
            if (e->repaid)
                atomic_fetch_add_explicit(e->repaid, 1, memory_order_relaxed);
        }
        if (e->wait_head) {
            uint64_t retry_ms = ms_capped(v[EXACT_R_RETRY_MS]);
            block_waiters(t, e, now_us, retry_ms > 0 ? retry_ms : 1, done);
        }
    } else {
        METRIC_INC(lease_tokens_granted); /* and spent: granted - returned = spent */
        e->wait_head->exact = 1;          /* from the Redis bucket: a refund goes there */
        lease_entry_taken(t, e, 1);
        e->wait_head->taken_ms = n > EXACT_R_TIME_MS ? nonneg(v[EXACT_R_TIME_MS]) : 0;
        allow_first_waiter(e, now_us, done);
        /* The bucket is dry after it: those who came meanwhile would be
         * denied by a claim now, so they are (a claim's short grant does
         * the same), and the key is cached blocked until the next token. */
        uint64_t retry_ms = ms_capped(v[EXACT_R_RETRY_MS]);
        if (e->wait_head && retry_ms > 0)
            block_waiters(t, e, now_us, retry_ms, done);
    }
    return 0;
}

void lease_reply(struct lease_table *t, struct lease_job *job, int ok, const int64_t *v, int n,
                 uint64_t now_us, struct lease_waiter **done, struct lease_waiter **fallback,
                 struct lease_job **next)
{
    struct lease_entry *e = job->e;
    struct lease_stripe *s = &t->stripes[e->stripe];
    struct reply r;
    int retire = 0;

    pthread_mutex_lock(&s->lock);
    e->inflight = NULL;
    /* Whatever the outcome, Redis ran this call (if at all) before now: a
     * lease it set ends by now + ttl. */
    uint64_t ttl_us = job->ttl_ms ? job->ttl_ms * 1000 : t->cfg.ttl_us;
    if (e->redis_exp_us < now_us + ttl_us)
        e->redis_exp_us = now_us + ttl_us;
    lease_entry_touch(s, e, now_us);
    if (job->kind == LEASE_JOB_EXACT) {
        /* Nothing is held either way: a failure only sends the waiter to
         * the fallback, as an exact rule's would. */
        if (!ok || apply_exact(t, e, v, n, now_us, done) != 0)
            take_waiters(e, fallback, 1);
        else if (e->wait_head)
            *next = make_claim(t, e, now_us); /* those who came meanwhile */
        if (e->wait_head && !*next)
            take_waiters(e, fallback, 1);
        retire = ok && lease_entry_retirable(t, e, now_us);
        goto out;
    }
    if (!ok || n < CLAIM_R_COUNT) {
        lease_entry_void(e);
        take_waiters(e, fallback, 1);
        goto out;
    }
    read_reply(t, job, v, &r);
    apply_reply(t, e, job, &r, now_us);
    /* A grant pays for what the backstop admitted first: a late reply's
     * requests were decided by the backstop, its tokens are theirs. */
    lease_entry_repay(e);
    serve_waiters(t, e, now_us, done);
    if (job->rated) {
        /* A rate lease reports no spends (the waiters' tokens were taken
         * from the central bucket), and never holds more than its slice. */
        e->used = 0;
        if (e->tokens > e->slice)
            e->tokens = e->slice;
    }
    /* A lease that ended before its reply came (a sliding window's last
     * moments, a slow Redis) cannot be spent. Its units go back with the
     * next claim, if one is sent now, rather than stay charged while that
     * claim is charged again (they leave the count if it lands in the same
     * window; otherwise they expired, counted as spent). */
    uint64_t unusable = 0;
    if (e->tokens > 0 && now_us >= e->deadline_us) {
        unusable = e->tokens;
        e->tokens = 0;
    }
    if (e->tokens > 0)
        lease_entry_activate(s, e); /* the tick gives it back or tops it up */
    if (!e->wait_head)
        goto out;
    /* Some wait still: the grant was short. */
    if (r.remaining < 1 && r.granted < job->want) {
        uint64_t retry_ms = r.retry_ms > 0 ? r.retry_ms : 1;
        if (e->share > 0) { /* the local refill may bring one sooner */
            double ms = ceil((1.0 - e->frac) / e->share / 1000.0);
            if (ms < (double)retry_ms)
                retry_ms = ms < 1 ? 1 : (uint64_t)ms;
        }
        block_waiters(t, e, now_us, retry_ms, done);
    } else {
        *next = claim_returning(t, e, now_us, unusable);
        if (!*next)
            take_waiters(e, fallback, 1);
        else if (unusable)
            METRIC_ADD(lease_tokens_returned, unusable);
    }
out:
    lease_job_free(s, job);
    if (retire)
        lease_entry_retire(t, s, e, now_us);
    pthread_mutex_unlock(&s->lock);
}

uint64_t lease_refund(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                      uint64_t now_us, struct bucket_result *res, int *redis)
{
    uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, keylen));
    unsigned si = util_stripe(h, t->nstripes);
    struct lease_stripe *s = &t->stripes[si];
    uint64_t back = 0;

    pthread_mutex_lock(&s->lock);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);
    if (e && n > 0 && now_us < e->deadline_us) {
        if (e->share > 0) {
            /* a rate lease: Redis counts its slice, not its spends */
            back = e->tokens < e->slice ? e->slice - e->tokens : 0;
            back = back < n ? back : n;
            e->tokens += back;
        } else if (e->used >= n) {
            /* Not reported yet: tokens + used stays what Redis counts held
             * for us. A spend a claim already carried is Redis' now. */
            e->used -= n;
            e->tokens += n;
            back = n;
        }
        if (back && res)
            fill_allowed(e, now_us, res);
    }
    *redis = n > 0 && back == 0 && (!e || (e->share <= 0 && e->algorithm == BUCKET_TOKEN_BUCKET));
    if (*redis && e && e->known) {
        /* what tb_refund will do, for the estimates until Redis next says */
        e->t_last += (double)n;
        if (res)
            fill_allowed(e, now_us, res);
    }
    pthread_mutex_unlock(&s->lock);
    return back;
}

void lease_timeout(struct lease_table *t, struct lease_job *job, struct lease_waiter **fallback)
{
    struct lease_entry *e = job->e;
    struct lease_stripe *s = &t->stripes[e->stripe];

    pthread_mutex_lock(&s->lock);
    job->timed_out = 1;
    take_waiters(e, fallback, 1);
    pthread_mutex_unlock(&s->lock);
}

/* The tick's work on one active entry: demand, expiry, give-back, top-up. */
static struct lease_job *tick_entry(const struct lease_table *t, struct lease_entry *e,
                                    uint64_t now_us, int redis_up)
{
    uint32_t hits = e->hits;
    struct lease_job *job = NULL;

    e->demand = lease_demand_fold(e->demand, hits);
    e->hits = 0;
    rate_refill(e, now_us);
    if (e->tokens > 0 && now_us >= e->deadline_us)
        e->tokens = 0;
    if (e->share > 0 && now_us >= e->deadline_us) {
        rate_set_share(e, 0); /* ended here; Redis drops it at its end */
        e->slice = 0;
    }
    if (e->inflight || !redis_up || now_us < e->blocked_until_us)
        return NULL;
    if (e->share > 0) {
        switch (rate_tick(t, e, now_us)) {
        case RATE_RENEW:
            return make_claim(t, e, now_us);
        case RATE_RETURN:
            return make_return(t, e);
        default:
            return NULL;
        }
    }
    if (e->tokens > 0 && hits == 0)
        return make_return(t, e); /* no demand for a tick: give back */
    if (hits >= 2 && ((double)e->tokens < 1.5 * e->demand + 1 ||
                      e->deadline_us - now_us < 2 * t->cfg.interval_us)) {
        /* Busy, and will not last until the next tick or the lease ends
         * soon: top up (a claim also renews it). A key seen once in a tick
         * is not topped up: its next request claims for itself, so a cold
         * key costs one call, not a claim, a top-up and a give-back. */
        job = make_claim(t, e, now_us);
        if (job && job->want == 0 && e->tokens == 0) {
            e->inflight = NULL;
            e->used += job->used;
            lease_job_free(&t->stripes[e->stripe], job);
            job = NULL;
        }
    }
    return job;
}

void lease_tick(struct lease_table *t, uint64_t now_us, int redis_up, struct lease_job **jobs)
{
    uint64_t walked = 0, count = 0;

    for (unsigned i = 0; i < t->nstripes; i++) {
        struct lease_stripe *s = &t->stripes[i];
        struct dlist *n, *next;

        pthread_mutex_lock(&s->lock);
        s->tick++;
        for (n = s->active.next; n != &s->active; n = next) {
            struct lease_entry *e = DLIST_ENTRY(n, struct lease_entry, active);
            struct lease_job *job;

            next = n->next;
            walked++;
            e->demand_tick = s->tick;
            job = tick_entry(t, e, now_us, redis_up);
            if (job) {
                job->next = *jobs;
                *jobs = job;
            }
            /* Off the list once it has neither hits nor tokens; a job in
             * flight comes back through lease_reply, a hit puts it back. */
            if (e->hits == 0 && e->tokens == 0)
                dlist_del(&e->active);
        }
        lease_sweep(t, s, now_us);
        count += s->count;
        pthread_mutex_unlock(&s->lock);
    }
    atomic_store(&metrics.lease_active_keys, walked);
    /* Counted here, not per entry made and dropped: those are a worker's
     * and the Redis thread's, and one shared counter between them cost a
     * cache line passed back and forth per cold key. */
    atomic_store(&metrics.lease_keys, count);
}

void lease_drain(struct lease_table *t, uint64_t now_us, struct lease_job **jobs)
{
    for (unsigned i = 0; i < t->nstripes; i++) {
        struct lease_stripe *s = &t->stripes[i];

        pthread_mutex_lock(&s->lock);
        for (size_t j = 0; j < s->nchains; j++) {
            for (struct lease_entry *e = s->chains[j]; e; e = e->next) {
                if (e->inflight || (e->tokens == 0 && e->share <= 0) || now_us >= e->deadline_us)
                    continue;
                struct lease_job *job = make_return(t, e);
                if (job) {
                    job->next = *jobs;
                    *jobs = job;
                }
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
}
