/* SPDX-License-Identifier: Apache-2.0 */
/* lease.h - the local token lease cache: tokens claimed from the shared Redis
 * bucket in batches and spent locally. Redis counts the tokens agents hold
 * (tokens + held <= burst), so tokens are only spent after Redis granted them
 * and the fleet never admits more than b + r*T in any interval T (README,
 * "What it is, and why leases"; the scripts' contract: lua/README.md).
 *
 * Pure: no Redis, no event loop, no clock reads. The caller passes now_us,
 * sends the jobs (claims, give-backs) this module hands out, and feeds their
 * replies back. Thread-safe: entries live in independently locked stripes;
 * worker threads call lease_decide(), the thread that talks to Redis calls
 * lease_reply(), lease_timeout(), lease_tick() and lease_drain().
 *
 * Ownership: an entry with a job in flight is never removed, so a job's
 * entry pointer stays valid until its reply has been applied. Waiters are
 * owned by the caller; this module only links them while they wait.
 */
#ifndef LEASE_H
#define LEASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "store/script.h"

#define LEASE_MAX_WAITERS 4096 /* per key: past this, requests are answered blocked */

struct lease_config {
    uint64_t interval_us;
    uint64_t ttl_us;
    double max_fraction;
    /* Rate leases (token bucket only; 0: off): a warm key, one seen on this
     * agent now and then but not every interval, holds a share of the rate
     * and a slice of the burst for this long, refilled here. */
    uint64_t rate_ttl_us;
    /* A cold key's claim (one request waits, nothing held or to report)
     * goes as an exact call instead (the agent: on). */
    int exact_cold;
    /* A busy token lease is topped up as it runs low, not only at the tick
     * (token_prefetch in lease_cache.c; the agent: on). */
    int prefetch;
};

/* A decision waiting for a claim. out is where its outcome goes. */
struct lease_waiter {
    struct lease_waiter *next;
    struct bucket_result *out;
    void *req;    /* caller's: the request to complete */
    size_t hit;   /* caller's: which decision of that request */
    int fallback; /* set when it must be decided without Redis */
    /* Set when an exact call (a cold key's) allowed it rather than the
     * lease: its tokens were taken from the Redis bucket at Redis time
     * taken_ms (EXACT_R_TIME_MS), and go back there if they go back. */
    int exact;
    uint64_t taken_ms;
};

enum lease_job_kind {
    LEASE_JOB_CLAIM = 0,  /* the *_claim scripts */
    LEASE_JOB_RETURN = 1, /* the *_return scripts */
    LEASE_JOB_EXACT = 2,  /* the *_exact scripts: one waiter, no lease (a cold key) */
};

struct lease_entry;

/* A script call this module asks the caller to send (at most one in flight
 * per entry). The caller sets sent_us when it sends it. */
struct lease_job {
    struct lease_job *next;
    struct lease_entry *e;
    int kind;
    enum bucket_algorithm algorithm;
    uint64_t limit, period_ms, burst;
    uint64_t block_ms;  /* the rule's block_for (0: none): claims and exact calls send it */
    int fed;            /* a scope = global rule's bucket: the limit goes negated */
    uint64_t offset_ms; /* a fixed window's window_offset */
    uint64_t want, used, returned;
    int rated; /* a rate lease's claim (CLAIM_ARG_RATE_PPM, ..._DEMAND_PPM) */
    int first; /* LEASE_JOB_EXACT on a key this agent has no record of (its entry
                  is new): a token bucket's may go as one plain SET (limiter_first.c) */
    uint64_t rate_ppm, demand_ppm; /* share wanted, demand: millionths of the rate */
    uint64_t ttl_ms;               /* 0: [lease] ttl */
    uint64_t sent_us;
    int timed_out;   /* set by lease_timeout(): later arrivals do not wait on it */
    const char *key; /* the Redis key: valid while the job is in flight */
    size_t keylen;
};

struct lease_table;

/* The room of j (lease_table_set_job_room), zeroed when j was handed out,
 * 16-byte aligned; it goes with j when its reply has been applied. */
void *lease_job_room(struct lease_job *j);

/* NULL when out of memory. */
struct lease_table *lease_table_new(const struct lease_config *cfg, unsigned nstripes);
/* Free every entry. Jobs still in flight must have been settled or dropped. */
void lease_table_free(struct lease_table *t);

/* Count this table's entries in b (bucket.h; shared with the bucket tables;
 * NULL: no cap). Call before the first lease_decide. Past b's max, a new key
 * drops the least recently used entry of its stripe without a job in flight
 * or waiters (metrics: evictions). A spend it had not reported yet is not
 * lost: see stripe_evict in lease_cache.c. */
void lease_table_set_budget(struct lease_table *t, struct bucket_budget *b);

/* Give every job room bytes for the caller (lease_job_room; default 0).
 * The agent keeps its Redis call there, so a cold key's call costs no
 * allocation of its own. Call before the first lease_decide. */
void lease_table_set_job_room(struct lease_table *t, size_t room);

enum lease_verdict {
    LEASE_DONE = 0,    /* *res filled: decided from local state */
    LEASE_PENDING = 1, /* w queued; it comes back through lease_reply/lease_timeout */
    LEASE_DOWN = 2,    /* no local tokens and Redis is down: decide by fallback */
    LEASE_EXACT = 3,   /* lease_decide_cost: the lease does not hold the cost:
                        * decide with one exact call (tb_exact / sw_exact) */
};

/* Decide one request for the Redis key `key` under parameters p. When a
 * claim must be sent, *job is set (the caller sends it); otherwise *job is
 * left untouched. */
int lease_decide(struct lease_table *t, const char *key, size_t keylen,
                 const struct bucket_params *p, uint64_t now_us, int redis_up,
                 struct lease_waiter *w, struct bucket_result *res, struct lease_job **job);

/* Apply the reply of job: v[0..n) when ok, laid out as enum
 * script_claim_reply (fewer than CLAIM_R_COUNT values count as a failure),
 * or failure. Decided waiters are appended to *done, waiters to decide by
 * fallback to *fallback (both lists for the caller to complete, outside any
 * lock). A follow-up claim for the same entry may be returned in *next (for
 * waiters a small grant did not cover). The job is freed. */
void lease_reply(struct lease_table *t, struct lease_job *job, int ok, const int64_t *v, int n,
                 uint64_t now_us, struct lease_waiter **done, struct lease_waiter **fallback,
                 struct lease_job **next);

/* The job has been in flight longer than the Redis timeout: its waiters are
 * moved to *fallback. The job stays in flight; its late reply still settles
 * the grant (tokens are never dropped silently). */
void lease_timeout(struct lease_table *t, struct lease_job *job, struct lease_waiter **fallback);

/* Every interval: update demand, top up leases that will not last until the
 * next tick, give back leases that saw no demand (all for active entries
 * only), forget idle entries (from the old end of the age list, bounded).
 * Jobs to send are prepended to *jobs. */
void lease_tick(struct lease_table *t, uint64_t now_us, int redis_up, struct lease_job **jobs);

/* The reply v (n values, enum script_exact_reply) of the exact call that
 * decided a request of key (a cost its lease did not hold): what Redis
 * says of the bucket is kept for the estimates, as from a claim, so that
 * lease_tick() tops the key up when it is busy. Without it a key whose
 * requests all cost more than one never held a lease: one call each. */
void lease_note_exact(struct lease_table *t, const char *key, size_t keylen, const int64_t *v,
                      int n, uint64_t now_us);

/* At shutdown: give back every lease that holds tokens (entries with a job
 * in flight are skipped: call again once their replies arrived). */
void lease_drain(struct lease_table *t, uint64_t now_us, struct lease_job **jobs);

/* lease_decide for a request that takes n tokens (its rule's cost): spent
 * at once from the lease when it holds them (n = 0, a check: when it holds
 * one); otherwise LEASE_EXACT (Redis up) and nothing is queued. n = 1 is
 * lease_decide. The negative cache answers any n: a key that cannot pass 1
 * cannot pass more. */
int lease_decide_cost(struct lease_table *t, const char *key, size_t keylen,
                      const struct bucket_params *p, uint64_t n, uint64_t now_us, int redis_up,
                      struct lease_waiter *w, struct bucket_result *res, struct lease_job **job);

/* Give back n tokens that an allowed decision on key spent from this
 * agent's lease, when another rule blocked the request ([agent] charge =
 * all-or-nothing): they can be spent here again. Only a spend not yet
 * reported to Redis, of a lease still running, goes back (a rate lease's:
 * up to its slice), so the lease never holds more than Redis granted; what
 * Redis already counts spent stays spent (under-admission only). res (may
 * be NULL) then gets remaining and reset as an allowed decision reports
 * them. Returns the tokens given back. When none could be, *redis is set for a
 * token lease of a token bucket (or a key with no entry left): the caller
 * may give them back to the Redis bucket instead when it is a token bucket
 * (tb_refund, which caps t at b - H), e.g. when the claim that reported the
 * spend left between the decision and the refund. */
uint64_t lease_refund(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                      uint64_t now_us, struct bucket_result *res, int *redis);

/* The fallback is about to decide n tokens of key's token bucket (Redis did
 * not decide: down, late, unconfirmed). The backstop starts from what this
 * agent last knew of the key, not from a fresh burst: a bucket of the
 * entry's own, seeded at Redis' last word (its level at the last reply, less
 * the debt: lease_fallback_note), refilled at the rule's rate up to burst,
 * spent by what the backstop admits. 0 when it holds fewer than n (1 for a
 * check, n = 0): the key stays exhausted, *retry_us says for how long. 1
 * otherwise, and when the entry cannot say (no entry, Redis never answered
 * for it, not a token bucket): the backstop alone decides. */
int lease_fallback_check(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                         uint64_t now_us, uint64_t *retry_us);

/* The backstop admitted n tokens for key while Redis did not decide: the
 * key's entry (if it has one) owes them, at most cap in all (0: the key's
 * burst). The agent passes its backstop's share x (b + r x 1 s): so the
 * fleet's debt on a key is at most about b + r x 1 s, the floor the design
 * states (Redis' bucket is charged at most that beyond what it would have
 * granted), and a stall shorter than 1 s is repaid whole. The debt
 * is paid from the next tokens Redis grants the key, late replies first
 * (lease_reply): they are reported spent, never spent again; each paid
 * token counts in *repaid (the rule's fallback_repaid_total; records live
 * as long as the process). Forgotten with the entry (idle past ttl,
 * evicted). Returns what the key owes now. */
uint64_t lease_fallback_note(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                             uint64_t cap, atomic_uint_fast64_t *repaid);

/* ---- Sentinel: the master confirmed or not (store_on_sentinel) ------------ */

/* A sentinel named the master (each answer): a new confirmation epoch. What
 * each key admits from Redis' grants is counted from the last one (lease
 * spends and exact calls), so that when the master turns unconfirmed, what
 * this agent took from it since can be charged to its backstop: the
 * sentinels may have promoted a replica at any moment after that answer,
 * which hands the same tokens out again (a split brain, doc/design.md). It
 * also ends an unconfirmed streak. */
void lease_confirmed(struct lease_table *t);

/* No sentinel confirmed the master for the window: until lease_confirmed,
 * lease_fallback_unconfirmed charges. */
void lease_unconfirmed(struct lease_table *t);

/* The fallback is about to decide for key while the master is unconfirmed:
 * the tokens key admitted from Redis' grants since the last confirmation
 * that its backstop was not charged yet (each counted once; spends of a
 * lease still held keep adding). 0 when the master is not unconfirmed, or
 * key has no entry. The caller charges them to the backstop
 * (bucket_table_charge_seeded), so that this agent admits over an outage D
 * from the cut at most its backstop's share x (b + r x D) in all. */
uint64_t lease_fallback_unconfirmed(struct lease_table *t, const char *key, size_t keylen);

/* A refund script's reply for key (REFUND_R_REMAINING): Redis' bucket
 * level now, for the estimates (remaining) of later local decisions.
 * Replies come in the order the calls went, so it is newer than any claim
 * reply already applied. Nothing else changes; no entry, nothing. */
void lease_note_refund(struct lease_table *t, const char *key, size_t keylen, uint64_t remaining,
                       uint64_t now_us);

/* ---- one key, for the operator (GET /key, POST /reset) ---------------------- */

/* The local state of one key. */
struct lease_state {
    uint64_t tokens;          /* L: may still be spent here without asking Redis */
    uint64_t unreported;      /* spent since the last report */
    int voided;               /* a failed call voided the lease: the next claim
                               * reports all of it spent */
    uint64_t lease_left_us;   /* until the local deadline; 0: no lease */
    uint64_t blocked_left_us; /* negative cache: answered blocked here, without
                               * Redis, for this long; 0: not */
    int inflight;             /* -1: no call; else its enum lease_job_kind */
    unsigned waiting;         /* decisions waiting for that call */
    double demand;            /* decisions per interval, smoothed */
    double share_per_s;       /* a rate lease: its refill here, tokens/s (0: none) */
    uint64_t slice;           /* a rate lease: its slice of the burst */
    int known;                /* Redis answered for this key; its last words: */
    double bucket_tokens;     /* t (sw: remaining) */
    uint64_t others_held;     /* held by the other agents */
    uint64_t others;          /* other agents holding a lease */
    uint64_t reply_age_us;
};

/* The entry of key at now into *st: 1, or 0 when there is none. Changes
 * nothing. */
int lease_peek(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us,
               struct lease_state *st);

/* The Redis bucket of key was reset (tb_reset / sw_reset): forget the
 * negative cache, and take in what the reset answered (remaining; held and
 * holders over every agent). The lease runs on: its tokens are among those
 * Redis still counts held (t = b - H), so spending them keeps the bound, and
 * voiding it would only under-admit. 1 when the key had an entry, or the
 * ghost of one retired less than ttl ago (lease_entry_retire). */
int lease_forget(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us,
                 uint64_t remaining, uint64_t held, uint64_t holders);

/* Another agent reset key fleet-wide (limiter_reset.c): drop what this
 * agent holds of it, as if it had never seen the key blocked: the negative
 * cache (with block_for, the penalty box) and the lease. The lease is voided,
 * not given back: its tokens were counted held by the reset (t = b - H), so
 * the next claim reports them spent and the reset bucket gains nothing it
 * did not grant. The last word of Redis is forgotten too (a ghost's as
 * well). 1 when the key had an entry or a ghost. */
int lease_reset_local(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us);

/* Redis lost the buckets the leases were granted from (store_epoch.h: its
 * keyspace vanished or changed): void every lease, as a failed call voids
 * one. Nothing goes back to Redis (a give-back to a bucket made afresh would
 * add tokens it never granted) and nothing more is spent here: each key's
 * next claim starts from the new bucket and reports everything it held as
 * spent, which the scripts cap at what Redis now counts (nothing). A claim
 * in flight settles as its reply says, less what this voids. The negative
 * cache stays (it only under-admits). Returns how many entries held tokens. */
size_t lease_void_all(struct lease_table *t);

/* Number of entries. */
size_t lease_count(struct lease_table *t);

/* Number of entries on the active lists: what one tick walks (keys seen since
 * the last tick, or holding tokens). Idle entries are only swept, a bounded
 * number per stripe and tick, once untouched for longer than ttl. */
size_t lease_active(struct lease_table *t);

/* For observers (the simulator's count of stranded tokens): fn(ctx, key,
 * keylen, tokens) for every entry holding tokens it may still spend at
 * now_us. Such entries are all on the active lists: this costs what a tick
 * costs. fn must not call into the table. */
void lease_foreach_held(struct lease_table *t, uint64_t now_us,
                        void (*fn)(void *ctx, const char *key, size_t keylen, uint64_t tokens),
                        void *ctx);

#endif
