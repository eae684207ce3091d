/* bucket.c - exact in-memory rate limit state: the token bucket, sliding
 * window counter and fixed window arithmetic, and a striped hash table of buckets keyed by
 * (rule name, client key).
 *
 * Arithmetic is in doubles (the state is fractional tokens), but every
 * quantity that should be a whole number of tokens or requests is snapped to
 * the nearest integer when it is within rounding noise of it. Without that a
 * refill of exactly one token could come out as 0.99999999999 and a request
 * due at t = 6 s would only pass a microsecond later, or never be reported as
 * "remaining".
 *
 * The table is nstripes independent chained hash tables, each behind its own
 * mutex, chosen by util_stripe() from the key hash; a decision locks exactly
 * one stripe. Memory stays bounded because bucket_table_expire() drops buckets
 * that hold no information any more (see bucket_idle()), and, with a budget
 * ([agent] max_entries), because a new bucket past it drops the least
 * recently used one of its stripe: each stripe keeps its entries on an age
 * list, most recently used last.
 */
#include "bucket.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/dlist.h"
#include "core/util.h"
#include "metrics/metrics.h"

const char *const bucket_algorithm_names[] = {[BUCKET_TOKEN_BUCKET] = "token-bucket",
                                              [BUCKET_SLIDING_WINDOW] = "sliding-window",
                                              [BUCKET_FIXED_WINDOW] = "fixed-window",
                                              [BUCKET_CONCURRENCY] = "concurrency", NULL};

/* Noise below which a token count or a duration in microseconds is taken
 * to be the integer next to it. For token counts it is further capped by
 * tolerance() so that snapping never moves a decision by a microsecond. */
#define SNAP_EPS 1e-9

/* Relative floor of every tolerance: a few units in the last place. */
#define REL_EPS 2e-15

/* Waits that would be longer (rate 0, overflow) are reported as this: about
 * 285 years, small enough that callers can add to it or round it to seconds
 * without overflowing a uint64_t. */
#define MAX_WAIT_US ((uint64_t)1 << 53)

/* Retry hint when a decision could not be made for lack of memory. */
#define OOM_RETRY_US 1000000u

/* Per-stripe slot array bounds; stripes start with no array at all so an
 * idle table costs only its stripes. */
#define MIN_SLOTS 8u
#define MAX_STRIPES 65536u

/* Rule names and keys longer than this are refused (they would not fit the
 * entry's length fields); the caller hashes long keys well before. */
#define MAX_RULE_LEN UINT16_MAX
#define MAX_KEY_LEN UINT32_MAX

/* ---- arithmetic helpers ------------------------------------------------- */

static uint64_t period_of(const struct bucket_params *p)
{
    /* The config rejects an empty period; never divide by zero anyway. */
    if (p->period_us > BUCKET_MAX_PERIOD_US)
        return BUCKET_MAX_PERIOD_US;
    return p->period_us ? p->period_us : 1;
}

/* round(x) without its call (libm's is not inlined, and snap() runs a few
 * times in every decision): the nearest integer, halves away from zero, the
 * sign of x kept (-0.3 gives -0.0), as round() gives. A double of 2^52 or
 * more is an integer already; NaN and infinities pass through. */
static double round_near(double x)
{
    if (!(fabs(x) < 4503599627370496.0))
        return x;
    double t = (double)(int64_t)x; /* toward zero: exact below 2^52 */
    double d = x - t;              /* exact too */
    if (d >= 0.5)
        t += 1;
    else if (d <= -0.5)
        t -= 1;
    return copysign(t, x);
}

/* x, or the integer next to it when closer than eps (or rounding noise). */
static double snap(double x, double eps)
{
    double r = round_near(x);
    double rel = fabs(x) * REL_EPS;
    /* fmax without its call: eps is never NaN, and a NaN x fails either way */
    return fabs(x - r) <= (eps > rel ? eps : rel) ? r : x;
}

/* Tolerance for token counts and window estimates under p: SNAP_EPS, but
 * under a quarter of what one microsecond changes, so that with long periods
 * (1/1d refills 1.2e-11 token per us) rounding never lets a request through
 * a microsecond early. A window estimate falls by at least 1/period per us
 * while it holds a request. */
static double tolerance(const struct bucket_params *p)
{
    double per_us = (p->algorithm == BUCKET_SLIDING_WINDOW ? 1.0 : (double)p->limit) /
                    (double)period_of(p);
    return per_us > 0 && per_us / 4 < SNAP_EPS ? per_us / 4 : SNAP_EPS; /* fmin, no call */
}

/* Microseconds (rounded up, saturated at MAX_WAIT_US) that a rate of
 * limit per period_us needs to produce x tokens. x <= 0 gives 0. */
static uint64_t us_for_tokens(const struct bucket_params *p, double x)
{
    if (x <= 0)
        return 0;
    if (p->limit == 0)
        return MAX_WAIT_US;
    double us = ceil(snap(x * (double)period_of(p) / (double)p->limit, SNAP_EPS));
    if (!(us < (double)MAX_WAIT_US))
        return MAX_WAIT_US;
    return (uint64_t)us;
}

/* whole() of a level that snap() under the same eps already gave: snap()
 * leaves what it gave alone (an integer stays; a value it kept, it keeps),
 * so the second one, with its rounding, is skipped. */
static uint64_t whole_snapped(double x)
{
    double f = floor(x);
    if (f <= 0)
        return 0;
    if (!(f < 18446744073709551616.0))
        return UINT64_MAX;
    return (uint64_t)f;
}

/* Whole units in x, never negative: what "remaining" reports. */
static uint64_t whole(double x, double eps)
{
    double f = floor(snap(x, eps));
    if (f <= 0)
        return 0;
    if (!(f < 18446744073709551616.0))
        return UINT64_MAX;
    return (uint64_t)f;
}

/* ---- token bucket ------------------------------------------------------- */

/* Token level of a bucket last refilled at ts with `tokens`, seen at now.
 * Capped at the burst, which also clamps a bucket whose rule was reloaded
 * with a smaller burst. A clock that went backward adds nothing. */
static double tb_level_eps(double tokens, uint64_t ts, const struct bucket_params *p,
                           uint64_t now, double eps)
{
    uint64_t elapsed = now > ts ? now - ts : 0;
    /* limit * elapsed / period rather than (limit / period) * elapsed: the
     * former is exact whenever the true refill is a whole number. */
    double t = tokens + (double)p->limit * (double)elapsed / (double)period_of(p);
    if (t >= (double)p->burst)
        return (double)p->burst;
    return snap(t, eps);
}

static double tb_level(double tokens, uint64_t ts, const struct bucket_params *p, uint64_t now)
{
    return tb_level_eps(tokens, ts, p, now, tolerance(p));
}

static void tb_take(struct bucket *b, const struct bucket_params *p, uint64_t now, uint64_t n,
                    struct bucket_result *res)
{
    /* n = 0 (a check) passes where 1 would, and takes nothing */
    double need = n ? (double)n : 1.0;
    double burst = (double)p->burst;
    double eps = tolerance(p); /* computed once: tb_level() would again */

    b->tokens = tb_level_eps(b->tokens, b->ts_us, p, now, eps);
    if (now > b->ts_us)
        b->ts_us = now;

    if (b->tokens + eps >= need) {
        b->tokens = snap(b->tokens - (double)n, eps);
        if (b->tokens < 0)
            b->tokens = 0;
        res->allowed = 1;
        res->retry_us = 0;
    } else {
        res->allowed = 0;
        if (need > burst || p->limit == 0) {
            /* n can never fit: there is no honest answer, so suggest one
             * period rather than "now" or "never". */
            res->retry_us = period_of(p);
        } else {
            uint64_t retry = us_for_tokens(p, need - b->tokens);
            /* Rounding must never make the hint early: step forward until
             * the same arithmetic that decides really lets n through. */
            for (int i = 0; i < 4 && retry < MAX_WAIT_US; i++) {
                if (tb_level_eps(b->tokens, b->ts_us, p, b->ts_us + retry, eps) + eps >= need)
                    break;
                retry++;
            }
            res->retry_us = retry ? retry : 1;
        }
    }
    /* b->tokens came from snap(eps), max(0, snap(eps)) or the burst */
    res->remaining = whole_snapped(b->tokens);
    res->reset_us = us_for_tokens(p, burst - b->tokens);
}

/* ---- sliding window counter --------------------------------------------- */

/* Move the window pair forward to the one holding now. Windows are aligned on
 * multiples of the period when (re)started; a reload that changed the period
 * keeps the old phase until both windows have passed, which is harmless. */
static void sw_advance(struct bucket *b, uint64_t period, uint64_t now)
{
    if (now < b->ts_us)
        return;
    uint64_t k = (now - b->ts_us) / period;
    if (k == 1) {
        b->tokens = b->cur;
        b->cur = 0;
        b->ts_us += period;
    } else if (k >= 2) {
        b->tokens = 0;
        b->cur = 0;
        b->ts_us = now - now % period;
    }
}

/* Weighted count at `elapsed` us into the current window: the previous
 * window's count scaled by the part of it still covered, plus the current. */
static double sw_estimate(double prev, double cur, uint64_t period, uint64_t elapsed)
{
    return prev * (double)(period - elapsed) / (double)period + cur;
}

/* Whether n more fit at now, for a window pair in state *b (not modified). */
static int sw_fits(const struct bucket *b, const struct bucket_params *p, uint64_t now, uint64_t n)
{
    struct bucket c = *b;
    uint64_t period = period_of(p);
    sw_advance(&c, period, now);
    uint64_t elapsed = now > c.ts_us ? now - c.ts_us : 0;
    double est = sw_estimate(c.tokens, c.cur, period, elapsed);
    return est + (double)n <= (double)p->limit + tolerance(p);
}

/* Earliest wait after which n fit, assuming nothing more is admitted. The
 * estimate only falls with time: linearly through the current window as the
 * previous count fades, then through the next as the current count fades.
 * Solve prev * (1 - e/P) + cur + n <= limit in the current window, else
 * cur * (1 - e/P) + n <= limit in the next one. */
static uint64_t sw_retry(const struct bucket *b, const struct bucket_params *p, uint64_t now,
                         uint64_t n)
{
    uint64_t period = period_of(p);
    uint64_t elapsed = now > b->ts_us ? now - b->ts_us : 0;
    double P = (double)period;
    double room_now = (double)p->limit - (double)n - b->cur;
    double room_next = (double)p->limit - (double)n;
    uint64_t retry;

    if (room_next < 0)
        return period; /* n can never fit; see tb_take */

    double in_cur = P; /* offset into this window where n fit; P = not in it */
    if (b->tokens > 0 && room_now >= 0)
        in_cur = fmax(0.0, ceil(snap(P * (1.0 - room_now / b->tokens), SNAP_EPS)));

    if (in_cur < P) {
        uint64_t at = (uint64_t)in_cur;
        retry = at > elapsed ? at - elapsed : 1;
    } else {
        uint64_t at = 0;
        if (b->cur > room_next) {
            double e = ceil(snap(P * (1.0 - room_next / b->cur), SNAP_EPS));
            at = e >= P ? period : (uint64_t)e;
        }
        retry = period - elapsed + at;
    }
    for (int i = 0; i < 4 && !sw_fits(b, p, now + retry, n); i++)
        retry++;
    return retry ? retry : 1;
}

static void sw_take(struct bucket *b, const struct bucket_params *p, uint64_t now, uint64_t n,
                    struct bucket_result *res)
{
    uint64_t period = period_of(p);
    double eps = tolerance(p);

    sw_advance(b, period, now);
    if (now < b->ts_us)
        now = b->ts_us; /* clock went backward: as if no time passed */
    uint64_t elapsed = now - b->ts_us;
    double est = sw_estimate(b->tokens, b->cur, period, elapsed);

    /* n = 0 (a check) passes where 1 would, and takes nothing */
    if (est + (double)(n ? n : 1) <= (double)p->limit + eps) {
        b->cur += (double)n;
        est += (double)n;
        res->allowed = 1;
        res->retry_us = 0;
    } else {
        res->allowed = 0;
        res->retry_us = sw_retry(b, p, now, n ? n : 1);
    }
    res->remaining = whole((double)p->limit - est, eps);
    if (b->cur > 0)
        res->reset_us = b->ts_us + 2 * period - now;
    else if (b->tokens > 0)
        res->reset_us = b->ts_us + period - now;
    else
        res->reset_us = 0;
}

/* ---- fixed window ------------------------------------------------------- */

/* Start of the window holding now (wall clock): the latest t <= now with
 * t = offset (mod period). Windows are aligned to the epoch, so 1d starts at
 * 00:00 UTC and 1w on a Thursday (1970-01-01 was one). */
static uint64_t fw_start(const struct bucket_params *p, uint64_t now)
{
    uint64_t period = period_of(p);
    uint64_t off = p->offset_us % period;
    return now - (now % period + period - off) % period;
}

/* Move to the window holding now: a later window starts empty. A clock that
 * went back keeps the current window (and its count): never more than N. */
static void fw_advance(struct bucket *b, const struct bucket_params *p, uint64_t now)
{
    uint64_t start = fw_start(p, now);
    if (start > b->ts_us) {
        b->cur = 0;
        b->ts_us = start;
    }
}

static void fw_take(struct bucket *b, const struct bucket_params *p, uint64_t now, uint64_t n,
                    struct bucket_result *res)
{
    uint64_t period = period_of(p);

    fw_advance(b, p, now);
    if (now < b->ts_us)
        now = b->ts_us; /* clock went backward: as if at the window's start */
    uint64_t end = b->ts_us + period;
    /* n = 0 (a check) passes where 1 would, and takes nothing */
    if (b->cur + (double)(n ? n : 1) <= (double)p->limit) {
        b->cur += (double)n;
        res->allowed = 1;
        res->retry_us = 0;
    } else {
        res->allowed = 0;
        /* n over N never fits: one period, as tb_take says; else the count
         * only falls at the next window's start */
        res->retry_us = (n > p->limit) ? period : end - now;
    }
    res->remaining = whole((double)p->limit - b->cur, 0);
    res->reset_us = b->cur > 0 ? end - now : 0;
}

/* ---- refunds ------------------------------------------------------------ */

/* The level after the refill to now, plus n, capped at the burst: never
 * above what the bucket would hold had the take not happened (the refill
 * is capped there too). */
static uint64_t tb_refund(struct bucket *b, const struct bucket_params *p, uint64_t now,
                          uint64_t n)
{
    double before;

    b->tokens = tb_level(b->tokens, b->ts_us, p, now);
    if (now > b->ts_us)
        b->ts_us = now;
    before = b->tokens;
    b->tokens = snap(fmin((double)p->burst, b->tokens + (double)n), tolerance(p));
    return b->tokens > before ? (uint64_t)floor(b->tokens - before + 0.5) : 0;
}

/* n off the current window's count, while it is the window of the take:
 * after a roll the units sit in the previous window, which they would leave
 * as the estimate fades anyway; giving them back there is not worth the
 * case. */
static uint64_t sw_refund(struct bucket *b, const struct bucket_params *p, uint64_t taken_us,
                          uint64_t now, uint64_t n)
{
    sw_advance(b, period_of(p), now);
    if (taken_us < b->ts_us || b->cur <= 0)
        return 0;
    double back = fmin((double)n, b->cur);
    b->cur = snap(b->cur - back, tolerance(p));
    if (b->cur < 0)
        b->cur = 0;
    return (uint64_t)floor(back + 0.5);
}

/* n off the count while the window of the take runs (wall clock, as the
 * take's): a window that rolled starts empty anyway. */
static uint64_t fw_refund(struct bucket *b, const struct bucket_params *p, uint64_t taken_us,
                          uint64_t now, uint64_t n)
{
    fw_advance(b, p, now);
    if (taken_us < b->ts_us || b->cur <= 0)
        return 0;
    double back = fmin((double)n, b->cur);
    b->cur = b->cur - back;
    return (uint64_t)floor(back + 0.5);
}

uint64_t bucket_refund(struct bucket *b, const struct bucket_params *p, uint64_t taken_us,
                       uint64_t now_us, uint64_t n)
{
    if (n == 0)
        return 0;
    switch (p->algorithm) {
    case BUCKET_TOKEN_BUCKET:
        return tb_refund(b, p, now_us, n);
    case BUCKET_SLIDING_WINDOW:
        return sw_refund(b, p, taken_us, now_us, n);
    case BUCKET_FIXED_WINDOW:
        return fw_refund(b, p, taken_us, now_us, n);
    case BUCKET_CONCURRENCY: /* slots, not tokens: a blocked request's go back
                              * through limiter_cc.c */
        break;
    }
    return 0; /* an algorithm that holds no tokens to give back */
}

/* ---- single bucket API -------------------------------------------------- */

void bucket_init(struct bucket *b, const struct bucket_params *p, uint64_t now_us)
{
    if (p->algorithm == BUCKET_FIXED_WINDOW) {
        b->tokens = 0;
        b->cur = 0;
        b->ts_us = fw_start(p, now_us);
    } else if (p->algorithm == BUCKET_SLIDING_WINDOW) {
        b->tokens = 0;
        b->cur = 0;
        b->ts_us = now_us - now_us % period_of(p);
    } else {
        b->tokens = (double)p->burst;
        b->cur = 0;
        b->ts_us = now_us;
    }
    b->blocked_until_us = 0;
}

/* The most one take can ever get: a token bucket's burst, a window's N. */
static uint64_t bucket_capacity(const struct bucket_params *p)
{
    return p->algorithm == BUCKET_SLIDING_WINDOW ? p->limit : p->burst;
}

void bucket_take(struct bucket *b, const struct bucket_params *p, uint64_t now_us, uint64_t n,
                 struct bucket_result *res)
{
    if (p->block_us && b->blocked_until_us > now_us) {
        /* In the penalty box: denied whatever the bucket holds, which
         * refills meanwhile (a peek's copy: nothing taken). */
        struct bucket c = *b;
        struct bucket_params q = *p;
        uint64_t left = b->blocked_until_us - now_us;

        q.block_us = 0; /* the bucket's own reset, not another block's */
        bucket_take(&c, &q, now_us, 0, res);
        res->allowed = 0;
        res->remaining = 0;
        res->retry_us = left;
        if (res->reset_us < left)
            res->reset_us = left;
        return;
    }
    if (p->algorithm == BUCKET_FIXED_WINDOW)
        fw_take(b, p, now_us, n, res);
    else if (p->algorithm == BUCKET_SLIDING_WINDOW)
        sw_take(b, p, now_us, n, res);
    else
        tb_take(b, p, now_us, n, res);
    /* A cost that never fits is the client's error, not abuse: no block. */
    if (!res->allowed && p->block_us && (n ? n : 1) <= bucket_capacity(p)) {
        b->blocked_until_us = now_us + p->block_us;
        res->retry_us = p->block_us;
        if (res->reset_us < p->block_us)
            res->reset_us = p->block_us;
    }
}

/* A running block: nothing passes until its end, whatever the bucket holds. */
static void bucket_peek_block(struct bucket_state *st)
{
    if (!st->blocked_left_us)
        return;
    st->remaining = 0;
    if (st->reset_us < st->blocked_left_us)
        st->reset_us = st->blocked_left_us;
}

void bucket_peek(const struct bucket *b, const struct bucket_params *p, uint64_t now_us,
                 struct bucket_state *st)
{
    struct bucket c = *b;
    struct bucket_result r;
    double eps = tolerance(p);

    memset(st, 0, sizeof(*st));
    /* Whether one would pass, and when, as a take would say: on a copy. */
    bucket_take(&c, p, now_us, 1, &r);
    st->blocked = !r.allowed;
    st->retry_us = r.retry_us;
    if (p->block_us && b->blocked_until_us > now_us)
        st->blocked_left_us = b->blocked_until_us - now_us;
    c = *b;
    if (p->algorithm == BUCKET_FIXED_WINDOW) {
        fw_advance(&c, p, now_us);
        uint64_t now = now_us > c.ts_us ? now_us : c.ts_us;
        st->cur = c.cur;
        st->level = c.cur;
        st->window_start_us = fw_start(p, now);
        st->remaining = whole((double)p->limit - c.cur, 0);
        if (c.cur > 0)
            st->reset_us = c.ts_us + period_of(p) - now;
        return;
    }
    if (p->algorithm == BUCKET_SLIDING_WINDOW) {
        uint64_t period = period_of(p);
        sw_advance(&c, period, now_us);
        uint64_t now = now_us > c.ts_us ? now_us : c.ts_us;
        st->prev = c.tokens;
        st->cur = c.cur;
        st->level = sw_estimate(c.tokens, c.cur, period, now - c.ts_us);
        st->remaining = whole((double)p->limit - st->level, eps);
        if (c.cur > 0)
            st->reset_us = c.ts_us + 2 * period - now;
        else if (c.tokens > 0)
            st->reset_us = c.ts_us + period - now;
        bucket_peek_block(st);
        return;
    }
    st->level = tb_level(c.tokens, c.ts_us, p, now_us);
    st->remaining = whole(st->level, eps);
    st->reset_us = us_for_tokens(p, (double)p->burst - st->level);
    bucket_peek_block(st);
}

int bucket_idle(const struct bucket *b, const struct bucket_params *p, uint64_t now_us)
{
    if (b->blocked_until_us > now_us)
        return 0; /* dropping it would lift the block */
    if (p->algorithm == BUCKET_FIXED_WINDOW)
        return b->cur <= 0 || (now_us >= b->ts_us && now_us - b->ts_us >= period_of(p));
    if (p->algorithm == BUCKET_SLIDING_WINDOW) {
        if (b->tokens <= 0 && b->cur <= 0)
            return 1;
        return now_us >= b->ts_us && now_us - b->ts_us >= 2 * period_of(p);
    }
    return tb_level(b->tokens, b->ts_us, p, now_us) >= (double)p->burst;
}

/* ---- table -------------------------------------------------------------- */

const struct bucket_params bucket_params_per_bucket = {BUCKET_TOKEN_BUCKET, 0, 0, 0, 0, 0};

/* One (rule, key) bucket. data holds the rule name, a NUL (so that data is
 * the rule as a C string for params_of), then keylen key bytes. */
struct entry {
    struct entry *next;
    struct dlist age; /* on the stripe's age list, most recently used last */
    uint64_t hash;
    struct bucket b;
    uint32_t keylen;
    uint16_t rulelen;
    uint8_t algorithm; /* of the parameters last used, to notice a switch */
    /* The parameters of the last take, for expiry when they differ per
     * bucket (bucket_params_per_bucket): dropping a bucket that is not full
     * by its own parameters would admit more than its limit. */
    uint64_t limit, period_us, burst;
    char data[];
};

/* Aligned to a cache line so that threads working on neighbouring stripes
 * do not bounce each other's lock. */
struct stripe {
    _Alignas(64) pthread_mutex_t lock;
    struct entry **slots; /* nslots chains; NULL while nslots is 0 */
    size_t nslots;        /* 0 or a power of two */
    size_t count;
    struct dlist age;     /* every entry, least recently used first */
    struct entry *spare;  /* freed entries of ENTRY_BLOCK bytes (entry_alloc) */
    unsigned nspare;
};

struct bucket_table {
    struct stripe *stripes;
    unsigned nstripes;            /* power of two */
    struct bucket_budget *budget; /* NULL: no cap */
    /* Expiry cursor: stripe, slot, and entries of that slot's chain already
     * visited and kept. Guarded by cursor_lock, which is always taken before
     * a stripe lock, never after. */
    pthread_mutex_t cursor_lock;
    unsigned cur_stripe;
    size_t cur_slot;
    size_t cur_skip;
};

uint64_t bucket_rule_seed(const char *rule, size_t rulelen)
{
    return util_hash_words(UTIL_HASH_INIT, rule, rulelen);
}

static uint64_t seeded_hash(uint64_t seed, const void *key, size_t keylen)
{
    return util_hash_mix(util_hash_words(seed, key, keylen));
}

static uint64_t key_hash(const char *rule, size_t rulelen, const void *key, size_t keylen)
{
    return seeded_hash(bucket_rule_seed(rule, rulelen), key, keylen);
}

static struct stripe *stripe_of(struct bucket_table *t, uint64_t hash)
{
    return &t->stripes[util_stripe(hash, t->nstripes)];
}

/* Rehash stripe s into nslots chains (a power of two, or 0 only when s
 * holds no entry).
 * Returns 0, or -1 when out of memory with s unchanged. */
static int stripe_resize(struct stripe *s, size_t nslots)
{
    struct entry **slots = NULL;
    if (nslots) {
        slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            return -1;
    }
    for (size_t i = 0; i < s->nslots; i++) {
        struct entry *e = s->slots[i];
        while (e) {
            struct entry *next = e->next;
            size_t j = util_slot(e->hash, nslots);
            e->next = slots[j];
            slots[j] = e;
            e = next;
        }
    }
    free(s->slots);
    s->slots = slots;
    s->nslots = nslots;
    return 0;
}

static struct entry *stripe_find(struct stripe *s, uint64_t hash, const char *rule,
                                 size_t rulelen, const void *key, size_t keylen)
{
    if (!s->nslots)
        return NULL;
    for (struct entry *e = s->slots[util_slot(hash, s->nslots)]; e; e = e->next) {
        if (e->hash == hash && e->rulelen == rulelen && e->keylen == keylen &&
            memcmp(e->data, rule, rulelen) == 0 &&
            memcmp(e->data + rulelen + 1, key, keylen) == 0)
            return e;
    }
    return NULL;
}

/* Entries of up to this many bytes (most: a rule name and a client key
 * under 64 bytes) are one size, kept per stripe when freed for the next new
 * key. A cold key per decision (a million clients) made and freed an entry
 * each time through malloc's bins, a visible part of the standalone cold
 * decision. ASan builds keep none, so a use after free is still caught. */
#define ENTRY_BLOCK (sizeof(struct entry) + 64)
#define SPARE_MAX 256 /* per stripe: the expiry frees a stripe at a time */

#if defined(__SANITIZE_ADDRESS__)
#define ENTRY_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENTRY_PLAIN 1
#endif
#endif

/* An entry of bytes bytes for s (its lock held); NULL when out of memory. */
static struct entry *entry_alloc(struct stripe *s, size_t bytes)
{
    struct entry *e = s->spare;

    if (bytes > ENTRY_BLOCK)
        return malloc(bytes);
    if (!e)
        return malloc(ENTRY_BLOCK);
    s->spare = e->next;
    s->nspare--;
    return e;
}

/* Free e, an entry of s (its lock held). */
static void entry_free(struct stripe *s, struct entry *e)
{
#ifndef ENTRY_PLAIN
    if (sizeof(*e) + e->rulelen + 1 + e->keylen <= ENTRY_BLOCK && s->nspare < SPARE_MAX) {
        e->next = s->spare;
        s->spare = e;
        s->nspare++;
        return;
    }
#else
    (void)s;
#endif
    free(e);
}

/* Add a new entry for (rule, key) to s. Returns it, or NULL when out of
 * memory. Growing keeps the load factor at most 1; when growing fails but
 * there is an array, the entry goes in anyway with longer chains. */
static struct entry *stripe_insert(struct stripe *s, uint64_t hash, const char *rule,
                                   size_t rulelen, const void *key, size_t keylen)
{
    if (s->count + 1 > s->nslots) {
        size_t want = s->nslots ? s->nslots * 2 : MIN_SLOTS;
        if (stripe_resize(s, want) != 0 && !s->nslots)
            return NULL;
    }
    if (keylen > SIZE_MAX - sizeof(struct entry) - rulelen - 1)
        return NULL; /* only reachable where size_t is 32 bits */
    struct entry *e = entry_alloc(s, sizeof(*e) + rulelen + 1 + keylen);
    if (!e)
        return NULL;
    e->hash = hash;
    e->rulelen = (uint16_t)rulelen;
    e->keylen = (uint32_t)keylen;
    memcpy(e->data, rule, rulelen);
    e->data[rulelen] = '\0';
    if (keylen)
        memcpy(e->data + rulelen + 1, key, keylen);
    size_t j = util_slot(hash, s->nslots);
    e->next = s->slots[j];
    s->slots[j] = e;
    dlist_push_tail(&s->age, &e->age);
    s->count++;
    return e;
}

/* Unlink e from its chain and the age list, and free it. */
static void stripe_remove(struct stripe *s, struct entry *e)
{
    struct entry **pp = &s->slots[util_slot(e->hash, s->nslots)];

    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    dlist_del(&e->age);
    s->count--;
    entry_free(s, e);
}

/* Over the budget: drop up to n of the least recently used entries of s. */
static void stripe_evict(struct bucket_table *t, struct stripe *s, unsigned n)
{
    for (; n > 0 && !dlist_empty(&s->age); n--) {
        stripe_remove(s, DLIST_ENTRY(s->age.next, struct entry, age));
        bucket_budget_sub(t->budget, 1);
        METRIC_INC(evictions);
    }
}

struct bucket_table *bucket_table_new(unsigned nstripes)
{
    unsigned n = 1;
    while (n < nstripes && n < MAX_STRIPES)
        n <<= 1;

    struct bucket_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->stripes = aligned_alloc(_Alignof(struct stripe), n * sizeof(struct stripe));
    if (!t->stripes) {
        free(t);
        return NULL;
    }
    memset(t->stripes, 0, n * sizeof(struct stripe));
    t->nstripes = n;
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_init(&t->stripes[i].lock, NULL);
        dlist_init(&t->stripes[i].age);
    }
    pthread_mutex_init(&t->cursor_lock, NULL);
    return t;
}

void bucket_table_set_budget(struct bucket_table *t, struct bucket_budget *b)
{
    t->budget = b;
}

void bucket_table_free(struct bucket_table *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nstripes; i++) {
        struct stripe *s = &t->stripes[i];
        bucket_budget_sub(t->budget, s->count);
        for (size_t j = 0; j < s->nslots; j++) {
            struct entry *e = s->slots[j];
            while (e) {
                struct entry *next = e->next;
                free(e);
                e = next;
            }
        }
        while (s->spare) {
            struct entry *e = s->spare;
            s->spare = e->next;
            free(e);
        }
        free(s->slots);
        pthread_mutex_destroy(&s->lock);
    }
    pthread_mutex_destroy(&t->cursor_lock);
    free(t->stripes);
    free(t);
}

static void deny_oom(struct bucket_result *res)
{
    res->allowed = 0;
    res->remaining = 0;
    res->reset_us = 0;
    res->retry_us = OOM_RETRY_US;
}

int bucket_table_take(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, uint64_t n,
                      struct bucket_result *res)
{
    size_t rulelen = strlen(rule);

    return bucket_table_take_seeded(t, rule, rulelen, bucket_rule_seed(rule, rulelen), key,
                                    keylen, p, now_us, n, res);
}

int bucket_table_take_seeded(struct bucket_table *t, const char *rule, size_t rulelen,
                             uint64_t seed, const void *key, size_t keylen,
                             const struct bucket_params *p, uint64_t now_us, uint64_t n,
                             struct bucket_result *res)
{
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN) {
        deny_oom(res);
        return -1;
    }
    uint64_t hash = seeded_hash(seed, key, keylen);
    struct stripe *s = stripe_of(t, hash);

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (!e) {
        stripe_evict(t, s, bucket_budget_add(t->budget));
        e = stripe_insert(s, hash, rule, rulelen, key, keylen);
        if (!e) {
            bucket_budget_sub(t->budget, 1);
            pthread_mutex_unlock(&s->lock);
            deny_oom(res);
            return -1;
        }
        bucket_init(&e->b, p, now_us);
        e->algorithm = (uint8_t)p->algorithm;
    } else if (e->algorithm != (uint8_t)p->algorithm) {
        /* Tokens and window counts mean different things: start afresh. */
        bucket_init(&e->b, p, now_us);
        e->algorithm = (uint8_t)p->algorithm;
    }
    /* A reload that lowered the burst needs no special case: the refill in
     * bucket_take caps the level at the current burst. */
    bucket_take(&e->b, p, now_us, n, res);
    e->limit = p->limit;
    e->period_us = p->period_us;
    e->burst = p->burst;
    dlist_move_tail(&s->age, &e->age);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

uint64_t bucket_table_refund(struct bucket_table *t, const char *rule, const void *key,
                             size_t keylen, const struct bucket_params *p, uint64_t taken_us,
                             uint64_t now_us, uint64_t n, struct bucket_state *st)
{
    size_t rulelen = strlen(rule);
    uint64_t back = 0;

    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e && e->algorithm == (uint8_t)p->algorithm) {
        back = bucket_refund(&e->b, p, taken_us, now_us, n);
        if (st)
            bucket_peek(&e->b, p, now_us, st);
    }
    pthread_mutex_unlock(&s->lock);
    return back;
}

int bucket_table_peek(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, struct bucket_state *st)
{
    size_t rulelen = strlen(rule);
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);
    int found = 0;

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e && e->algorithm == (uint8_t)p->algorithm) {
        bucket_peek(&e->b, p, now_us, st);
        found = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int bucket_table_drop(struct bucket_table *t, const char *rule, const void *key, size_t keylen)
{
    size_t rulelen = strlen(rule);
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);
    struct entry *e;
    int dropped = 0;

    pthread_mutex_lock(&s->lock);
    e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e) {
        dropped = 1;
        /* The expiry cursor may skip one entry of this chain on its next
         * visit (it counts kept entries): that entry is looked at a round
         * later, which is harmless. */
        stripe_remove(s, e);
        bucket_budget_sub(t->budget, 1);
    }
    pthread_mutex_unlock(&s->lock);
    return dropped;
}

/* Shrink a stripe whose load fell below 1/4 so that expiring a burst of
 * clients gives the slot array back too (entirely when empty). */
static void stripe_maybe_shrink(struct stripe *s)
{
    if (s->count == 0) {
        if (s->nslots)
            stripe_resize(s, 0);
        return;
    }
    if (s->nslots <= MIN_SLOTS || s->count * 4 >= s->nslots)
        return;
    size_t want = MIN_SLOTS;
    while (want < s->count * 2)
        want <<= 1;
    stripe_resize(s, want); /* on failure the larger array simply stays */
}

size_t bucket_table_expire(struct bucket_table *t, uint64_t now_us, size_t max_visit,
                           const struct bucket_params *(*params_of)(void *ctx, const char *rule),
                           void *ctx)
{
    return bucket_table_expire_at(t, now_us, now_us, max_visit, params_of, ctx);
}

size_t bucket_table_expire_at(struct bucket_table *t, uint64_t now_us, uint64_t wall_us,
                              size_t max_visit,
                              const struct bucket_params *(*params_of)(void *ctx,
                                                                       const char *rule),
                              void *ctx)
{
    size_t visited = 0, dropped = 0, scanned = 0, stripes_done = 0;
    /* Empty slots cost time too: bound them so one call holds a stripe lock
     * for a time proportional to max_visit even in a sparse table. */
    size_t slot_budget = max_visit <= (SIZE_MAX - 64) / 4 ? max_visit * 4 + 64 : SIZE_MAX;

    if (max_visit == 0)
        return 0;
    pthread_mutex_lock(&t->cursor_lock);
    while (visited < max_visit && scanned < slot_budget && stripes_done <= t->nstripes) {
        struct stripe *s = &t->stripes[t->cur_stripe];
        pthread_mutex_lock(&s->lock);
        while (t->cur_slot < s->nslots && visited < max_visit && scanned < slot_budget) {
            struct entry **pp = &s->slots[t->cur_slot];
            /* Entries kept by an earlier call are skipped, not re-checked, so
             * a chain longer than max_visit still makes progress. */
            for (size_t skip = t->cur_skip; *pp && skip > 0; skip--)
                pp = &(*pp)->next;
            while (*pp && visited < max_visit) {
                struct entry *e = *pp;
                const struct bucket_params *p = params_of(ctx, e->data);
                struct bucket_params own;
                if (p == &bucket_params_per_bucket) {
                    own = (struct bucket_params){e->algorithm, e->limit, e->period_us, e->burst,
                                                 0, 0};
                    p = &own;
                }
                visited++;
                /* (a fixed window's idleness does not depend on its offset) */
                uint64_t at = e->algorithm == BUCKET_FIXED_WINDOW ? wall_us : now_us;
                if (!p || (uint8_t)p->algorithm != e->algorithm || bucket_idle(&e->b, p, at)) {
                    *pp = e->next;
                    dlist_del(&e->age);
                    entry_free(s, e);
                    s->count--;
                    bucket_budget_sub(t->budget, 1);
                    dropped++;
                } else {
                    pp = &e->next;
                    t->cur_skip++;
                }
            }
            if (*pp)
                break; /* budget spent mid-chain; resume here */
            t->cur_slot++;
            t->cur_skip = 0;
            scanned++;
        }
        if (t->cur_slot >= s->nslots) {
            stripe_maybe_shrink(s);
            t->cur_stripe = (t->cur_stripe + 1) & (t->nstripes - 1);
            t->cur_slot = 0;
            t->cur_skip = 0;
            stripes_done++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->cursor_lock);
    return dropped;
}

size_t bucket_table_count(struct bucket_table *t)
{
    size_t n = 0;
    for (unsigned i = 0; i < t->nstripes; i++) {
        pthread_mutex_lock(&t->stripes[i].lock);
        n += t->stripes[i].count;
        pthread_mutex_unlock(&t->stripes[i].lock);
    }
    return n;
}
