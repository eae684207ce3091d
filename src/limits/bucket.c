/* SPDX-License-Identifier: Apache-2.0 */
/* bucket.c - exact in-memory rate limit state of one bucket: the token
 * bucket, sliding window counter and fixed window arithmetic, and refunds.
 * The table of buckets keyed by (rule name, client key) is bucket_table.c.
 *
 * Arithmetic is in doubles (the state is fractional tokens), but every
 * quantity that should be a whole number of tokens or requests is snapped to
 * the nearest integer when it is within rounding noise of it. Without that a
 * refill of exactly one token could come out as 0.99999999999 and a request
 * due at t = 6 s would only pass a microsecond later, or never be reported as
 * "remaining".
 *
 */
#include "limits/bucket.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

const char *const bucket_algorithm_names[] = {[BUCKET_TOKEN_BUCKET] = "token-bucket",
                                              [BUCKET_SLIDING_WINDOW] = "sliding-window",
                                              [BUCKET_FIXED_WINDOW] = "fixed-window",
                                              [BUCKET_CONCURRENCY] = "concurrency",
                                              NULL};

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

/* ---- arithmetic helpers ------------------------------------------------- */

/* tolerance()'s integer test: below 2^36 tokens, num << 27 cannot wrap. */
#define TOL_FAST_NUM_MAX ((uint64_t)1 << 36)
#define TOL_FAST_SHIFT 27

/* us_for_tokens()'s integer path (see there for why it is exact). */
#define US_FAST_X_MAX 1048576.0 /* 2^20 tokens */
#define US_FAST_LIMIT_MAX 100000000
#define US_FAST_PERIOD_MAX ((uint64_t)1 << 44)
#define US_FAST_NUM_MAX ((uint64_t)1 << 48)

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
    /* an integer already (a full bucket, a whole take): round_near() would
     * give x back, sign kept, at a distance of 0 */
    if (fabs(x) < 4503599627370496.0 && (double)(int64_t)x == x)
        return x;
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
    /* The common case without the division: num / period >= 2^-27, so a
     * quarter of it is at least 1.8e-9, above SNAP_EPS whatever the
     * rounding (the formula below gives SNAP_EPS for it too). */
    uint64_t num = p->algorithm == BUCKET_SLIDING_WINDOW ? 1 : p->limit;
    if (num && num < TOL_FAST_NUM_MAX && period_of(p) <= num << TOL_FAST_SHIFT)
        return SNAP_EPS;
    double per_us =
        (p->algorithm == BUCKET_SLIDING_WINDOW ? 1.0 : (double)p->limit) / (double)period_of(p);
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
    /* Whole tokens under a rate whose N is at most 1e8, x * period below
     * 2^48: the integer ceil(x * period / N), which is what the doubles
     * give. x * period is exact in a double, and so is the quotient when N
     * divides it; when it does not, the quotient is at least 1/N (>= 1e-8)
     * from an integer, the division's rounding moves it by under 1/(32 N)
     * and snap()'s eps, max(SNAP_EPS, q * REL_EPS) < 0.6/N, cannot reach
     * an integer: the double's ceil is the next integer, as here. */
    if (x < US_FAST_X_MAX && p->limit <= US_FAST_LIMIT_MAX) {
        uint64_t xi = (uint64_t)x, per = period_of(p);
        if ((double)xi == x && per < US_FAST_PERIOD_MAX) {
            uint64_t num = xi * per; /* < 2^20 * 2^44: no wrap */
            if (num < US_FAST_NUM_MAX)
                return (num + p->limit - 1) / p->limit;
        }
    }
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
    if (x >= 1 && x < 18446744073709551616.0)
        return (uint64_t)x; /* truncation is floor() here: no call */
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
static double tb_level_eps(double tokens, uint64_t ts, const struct bucket_params *p, uint64_t now,
                           double eps)
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

double bucket_tb_tokens_at(const struct bucket_params *p, double tokens, uint64_t ts_us,
                           uint64_t now_us)
{
    return tb_level(tokens, ts_us, p, now_us);
}

uint64_t bucket_tb_wait_us(const struct bucket_params *p, double x)
{
    return us_for_tokens(p, x);
}

uint64_t bucket_tb_wait_ms(const struct bucket_params *p, double x)
{
    return (us_for_tokens(p, x) + 999) / 1000;
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
static uint64_t tb_refund(struct bucket *b, const struct bucket_params *p, uint64_t now, uint64_t n)
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

void bucket_charge(struct bucket *b, const struct bucket_params *p, uint64_t now_us, uint64_t n)
{
    if (p->algorithm != BUCKET_TOKEN_BUCKET || n == 0)
        return;
    b->tokens = tb_level(b->tokens, b->ts_us, p, now_us) - (double)n;
    if (now_us > b->ts_us)
        b->ts_us = now_us;
}

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
    return bucket_windowed(p->algorithm) ? p->limit : p->burst;
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
        res->remaining = 0; /* as every answer in the block: the scripts' too */
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
