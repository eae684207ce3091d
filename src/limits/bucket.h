/* SPDX-License-Identifier: Apache-2.0 */
/* bucket.h - exact in-memory rate limit state: token bucket, sliding
 * window counter and fixed window, plus a thread-safe table of them keyed by
 * (rule, client).
 *
 * Time is always passed in, never read here, so the logic is deterministic
 * under test: microseconds on a monotonic clock, except for fixed windows,
 * which are aligned to the Unix epoch and so take the wall clock
 * (CLOCK_REALTIME, microseconds since 1970-01-01 00:00 UTC). No I/O.
 */
#ifndef BUCKET_H
#define BUCKET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* How a rule counts. The config's algorithm values are these. */
enum bucket_algorithm {
    BUCKET_TOKEN_BUCKET = 0,   /* refill limit per period, capacity burst */
    BUCKET_SLIDING_WINDOW = 1, /* at most limit per period, two-window estimate */
    BUCKET_FIXED_WINDOW = 2,   /* at most limit per window [k x period + offset, +period)
                                  of the wall clock: a quota that resets at a set time */
    /* at most limit requests in flight (slots.h), each slot held at most
     * period_us (max_hold); never decided by bucket_take() */
    BUCKET_CONCURRENCY = 3,
};

/* The algorithms' names as the config spells them, indexed by enum
 * bucket_algorithm and ended by NULL: the one table the config's parser,
 * --print, /key, the status page and spoa-sim all read. */
extern const char *const bucket_algorithm_names[];

/* Whether an algorithm counts in windows (N per window, no burst): a
 * sliding or a fixed window. Such a rule's capacity is N. */
static inline int bucket_windowed(enum bucket_algorithm a)
{
    return a == BUCKET_SLIDING_WINDOW || a == BUCKET_FIXED_WINDOW;
}

/* The longest period the arithmetic takes (about 285 years): a longer one
 * counts as this, so that 2 x period, and period x tokens in a double, stay
 * exact and far from overflow. The config caps durations at a year; the
 * fallback backstop stretches them by 1/share up to this. */
#define BUCKET_MAX_PERIOD_US ((uint64_t)1 << 53)

/* Limit parameters of one rule. */
struct bucket_params {
    enum bucket_algorithm algorithm;
    uint64_t limit;     /* N of the rate */
    uint64_t period_us; /* DURATION of the rate (also the sliding window) */
    uint64_t burst;     /* token bucket capacity */
    uint64_t block_us;  /* block_for: a denial keeps the key denied this long (0: off) */
    uint64_t offset_us; /* fixed window: windows start at offset (mod period) after
                           the epoch; less than period (else taken mod period) */
    /* The same three in Redis' unit, milliseconds, as the rule wrote them
     * (the config's unit is the ms: period_us is period_ms x 1000): the
     * scripts' arguments. Set where a rule is compiled (ruleset_new, and
     * rules_request_limits for a rate from an arg) and read as they are: no
     * caller converts microseconds back. 0 in a backstop's stretched
     * period, which never leaves the agent. */
    uint64_t period_ms, block_ms, offset_ms;
    /* A scope = global rule's bucket in Redis (doc/design.md, "Regions"):
     * fed by the region's claimer, never refilled by itself; its scripts get
     * the limit negated (script_fed_arg), and the region's reserve of the
     * key (gclaim_reserve). Nothing changes locally. */
    int fed;
};

/* [global] reserve = share of a scope = global rule's burst: a region's
 * reserve of every key is an equal part of share x burst (rounded down, a
 * hair under an integer counting as it; 0 while the regions are not
 * known). The global bucket runs at the burst less the regions' reserves
 * (gplan_global_burst). The agents send the reserve with their calls, the
 * claimer runs the global bucket: both compute it here (gclaim_reserve). */
static inline uint64_t bucket_fed_reserve(double share, unsigned regions, uint64_t burst)
{
    return share > 0 && regions ? (uint64_t)(share * (double)burst + 1e-9) / regions : 0;
}

/* Outcome of one decision. Times are in microseconds. */
struct bucket_result {
    int allowed;
    uint64_t remaining; /* requests left after this one; when denied, the whole
                         * units still there (fewer than n: 0 when n is 1) */
    uint64_t reset_us;  /* until the bucket is full again (window empty) */
    uint64_t retry_us;  /* when denied: until one request would pass (> 0);
                         * one period when n can never fit; 0 when allowed */
};

/* State of one token bucket or sliding window, 32 bytes. */
struct bucket {
    double tokens;  /* token bucket: tokens left; sliding window: count of previous window */
    double cur;     /* sliding and fixed window: count of current window */
    uint64_t ts_us; /* token bucket: last refill; windows: current window start */
    uint64_t blocked_until_us; /* block_for: denied until then (0: not blocked) */
};

/* Initialise a bucket first seen at now (full / empty window). */
void bucket_init(struct bucket *b, const struct bucket_params *p, uint64_t now_us);

/* Take n units if they fit, and describe the result. When denied nothing is
 * taken; n over the capacity (burst; a window's N) never fits. n = 0 is a
 * check: allowed where n = 1 would be, taking nothing. Works for both
 * algorithms. A now_us earlier than the last
 * call counts as no time passed. With p->block_us, a denial of n that could
 * ever fit starts a block: every take denies until now + block_us (retry_us
 * and reset_us count to its end), while the bucket refills as usual. */
void bucket_take(struct bucket *b, const struct bucket_params *p, uint64_t now_us, uint64_t n,
                 struct bucket_result *res);

/* Give back n units that a take at taken_us allowed: another rule blocked
 * the request ([agent] charge = all-or-nothing). Never more than was taken,
 * never more than the request's absence would have left: a token bucket
 * gets n tokens back, capped at the burst (its level then is at most what
 * it would be had the take never happened); a sliding window takes n off
 * the current window's count only while that is still the window of the
 * take, and gives nothing back once it rolled. One case per algorithm: an
 * algorithm that cannot give back returns 0. Returns the units given back. */
uint64_t bucket_refund(struct bucket *b, const struct bucket_params *p, uint64_t taken_us,
                       uint64_t now_us, uint64_t n);

/* Take n tokens from a token bucket whatever it holds: its level may go
 * below zero, from where it refills at its rate. For a charge decided
 * elsewhere (the fallback's backstop paying for what this agent took from a
 * master the sentinels may have replaced: limiter.c). Other algorithms:
 * nothing (they are never charged so). */
void bucket_charge(struct bucket *b, const struct bucket_params *p, uint64_t now_us, uint64_t n);

/* Whether the bucket holds no information any more (full again / both windows
 * past), so that dropping it changes no future decision. */
int bucket_idle(const struct bucket *b, const struct bucket_params *p, uint64_t now_us);

/* The token bucket's rule for state held elsewhere (a Redis hash read by
 * GET /key, the first SET's answer: limiter_admin.c, limiter_first.c), so
 * that the rule is written once, here. */

/* Tokens that a token bucket of p which held `tokens` at ts_us holds at
 * now_us: refilled at limit per period, capped at the burst. A now_us
 * before ts_us adds nothing. */
double bucket_tb_tokens_at(const struct bucket_params *p, double tokens, uint64_t ts_us,
                           uint64_t now_us);

/* Microseconds a token bucket of p takes to refill x tokens, rounded up:
 * 0 when x <= 0; about 285 years when never (a limit of 0). */
uint64_t bucket_tb_wait_us(const struct bucket_params *p, double x);

/* bucket_tb_wait_us() in whole milliseconds, rounded up (the scripts' unit). */
uint64_t bucket_tb_wait_ms(const struct bucket_params *p, double x);

/* ---- entry budget ----------------------------------------------------------- */

/* A cap on the entries that several tables hold together ([agent]
 * max_entries): an agent's bucket tables and its lease table share one. A
 * table that adds an entry while the tables are over the cap drops entries
 * from the least recently used end of the stripe it locked (striping makes
 * that "nearly least recently used": the oldest of 1/nstripes of the keys),
 * so that every decision stays O(1). */
struct bucket_budget {
    atomic_size_t count; /* entries held by all the tables */
    atomic_size_t max;   /* 0: no cap; may change at any time (reload) */
};

/* Count one new entry. Returns how many entries the caller should drop: 0
 * under the cap, else 2 while at least 2 over it, so that a table gives
 * back faster than it takes, and 1 otherwise. b may be NULL (no cap). */
static inline unsigned bucket_budget_add(struct bucket_budget *b)
{
    if (!b)
        return 0;
    size_t n = atomic_fetch_add_explicit(&b->count, 1, memory_order_relaxed) + 1;
    size_t max = atomic_load_explicit(&b->max, memory_order_relaxed);
    if (max == 0 || n <= max)
        return 0;
    return n - max >= 2 ? 2 : 1;
}

/* n entries are gone. */
static inline void bucket_budget_sub(struct bucket_budget *b, size_t n)
{
    if (b && n)
        atomic_fetch_sub_explicit(&b->count, n, memory_order_relaxed);
}

/* A bucket as a request arriving at now would find it, without changing it
 * (the operator's GET /key). */
struct bucket_state {
    double level;             /* token bucket: tokens; sliding window: the weighted estimate */
    double prev, cur;         /* sliding window: counts of the previous and current window */
    uint64_t remaining;       /* whole units a request could take now */
    int blocked;              /* a request of 1 would be denied now */
    uint64_t retry_us;        /* when blocked: until one would pass; else 0 */
    uint64_t reset_us;        /* until full again (both windows empty) */
    uint64_t blocked_left_us; /* block_for: until the running block ends (0: none) */
    uint64_t window_start_us; /* fixed window: start of the window now is in
                                 (wall clock); else 0 */
};

void bucket_peek(const struct bucket *b, const struct bucket_params *p, uint64_t now_us,
                 struct bucket_state *st);

/* ---- table ---------------------------------------------------------------- */

struct bucket_table;

/* A table of buckets striped over nstripes mutexes (rounded up to a power of
 * two). Returns NULL when out of memory. */
struct bucket_table *bucket_table_new(unsigned nstripes);
void bucket_table_free(struct bucket_table *t);

/* Count this table's entries in b (shared with other tables; NULL: no cap).
 * Call before the first bucket_table_take. Past b's max, a new bucket drops
 * the least recently used of its stripe (metrics: evictions): that client
 * starts full again, so it may get one burst more than its limit. */
void bucket_table_set_budget(struct bucket_table *t, struct bucket_budget *b);

/* Decide for (rule, key) with parameters p: find or create the bucket and
 * take n units. Returns 0, or -1 when out of memory or when rule (over 65535
 * bytes) or key (over 4 GiB) cannot be held; res says denied then.
 * Thread-safe. rule identifies the rule across reloads (its name); the table
 * keeps copies of rule and key. When p changed since the bucket's last use,
 * its level is clamped to the new burst; a new algorithm starts it afresh. */
int bucket_table_take(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, uint64_t n,
                      struct bucket_result *res);

/* The part of a bucket's hash that depends on its rule alone (rule is
 * rulelen bytes): a ruleset computes it once per rule, so that a decision
 * hashes only its key. */
uint64_t bucket_rule_seed(const char *rule, size_t rulelen);

/* bucket_table_take() for a rule whose length and seed (bucket_rule_seed)
 * are known: the same bucket, the same decision. */
int bucket_table_take_seeded(struct bucket_table *t, const char *rule, size_t rulelen,
                             uint64_t seed, const void *key, size_t keylen,
                             const struct bucket_params *p, uint64_t now_us, uint64_t n,
                             struct bucket_result *res);

/* bucket_charge() on the bucket of (rule, key), made (full) first when
 * there is none, as a take would make it. Returns 0, or -1 when out of
 * memory or when rule or key cannot be held (nothing charged). */
int bucket_table_charge_seeded(struct bucket_table *t, const char *rule, size_t rulelen,
                               uint64_t seed, const void *key, size_t keylen,
                               const struct bucket_params *p, uint64_t now_us, uint64_t n);

/* What params_of (below) returns for a rule whose parameters differ from
 * one bucket to the next (limits taken per request): each bucket is then
 * judged by the parameters of its last take. Compared by address. */
extern const struct bucket_params bucket_params_per_bucket;

/* Drop idle buckets, visiting at most max_visit entries from where the last
 * call stopped (so a timer can spread the work). params_of returns the
 * current parameters of a rule by name, &bucket_params_per_bucket, or NULL
 * when the rule is gone (its buckets are then dropped); it is called with a
 * stripe lock held and must not call into the table. Returns the number of
 * buckets dropped. */
size_t bucket_table_expire(struct bucket_table *t, uint64_t now_us, size_t max_visit,
                           const struct bucket_params *(*params_of)(void *ctx, const char *rule),
                           void *ctx);

/* The same, where fixed windows are judged at wall_us (the wall clock at
 * now_us) and the others at now_us. bucket_table_expire passes now_us for
 * both (a test's single clock). */
size_t bucket_table_expire_at(struct bucket_table *t, uint64_t now_us, uint64_t wall_us,
                              size_t max_visit,
                              const struct bucket_params *(*params_of)(void *ctx, const char *rule),
                              void *ctx);

/* The bucket of (rule, key) as bucket_peek() sees it at now under p: 1 with
 * *st filled, 0 when there is none, or when it counts with another
 * algorithm than p's (the next take starts it afresh): a request would find
 * it full. Thread-safe; changes nothing. */
int bucket_table_peek(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, struct bucket_state *st);

/* Drop the bucket of (rule, key): the next request finds it full (the
 * operator's POST /reset). 1 when there was one. Thread-safe. */
int bucket_table_drop(struct bucket_table *t, const char *rule, const void *key, size_t keylen);

/* bucket_refund() on the bucket of (rule, key), when it still has one of
 * p's algorithm (a refund never makes a bucket). *st (may be NULL) then
 * gets the bucket as bucket_peek() sees it after. Returns the units given
 * back. Thread-safe. */
uint64_t bucket_table_refund(struct bucket_table *t, const char *rule, const void *key,
                             size_t keylen, const struct bucket_params *p, uint64_t taken_us,
                             uint64_t now_us, uint64_t n, struct bucket_state *st);

/* Number of buckets held. */
size_t bucket_table_count(struct bucket_table *t);

#endif
