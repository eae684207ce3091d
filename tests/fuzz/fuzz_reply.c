/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_reply.c - fuzz target for what the agent does with Redis' replies to
 * its script calls: bytes as Redis would send them (RESP), parsed by
 * hiredis' own reader with the store's caps on replies (store_reply_cap.h),
 * turned into values as the store does
 * (store_reply_values / store_reply_batch_next), then applied: claim and
 * return replies to the lease cache (lease_reply, with decisions, ticks and
 * timeouts in between), exact replies to a decision (store_reply_exact),
 * the same replies read as a refund's (store_reply_refund, noted in the
 * lease cache by lease_note_refund, which moves only its estimates), and
 * the same values as the concurrency scripts' replies (store_reply_cc,
 * store_reply_cc_release).
 *
 * The first byte is the mode (below); a second byte below 0x20 (no RESP type
 * byte is) is a second mode (MODE2_*: rate leases on or off, the clock's
 * pace, the rule); the rest is a stream of RESP replies, each answering the
 * oldest call in flight. Invariants (a broken one aborts):
 *  - a key never admits more than Redis granted it: after a reply saying the
 *    agent holds `mine` tokens with a lease, the decisions allowed until the
 *    next reply for that key are at most mine minus what was spent since the
 *    call left; with no lease, none; after a rate lease's reply, what it had
 *    left, what was granted, and its share of the rate over the lease's life;
 *  - every answer is sane: a denial has a retry time in (0, 285 years], no
 *    time passes that bound;
 *  - every reply read as the rule store's fleet view (rules_fleet.h) is
 *    refused whole or written out whole (fleet_reply);
 *  - no reply the reader hands over is past the caps (within_caps): a
 *    hostile header (an array of 100 million, a bulk string of 512 MB,
 *    arrays nested deep) fails the reader instead, before its allocation;
 *  - nothing leaks, nothing is read out of bounds (ASan, UBSan).
 *
 * Built two ways, as tests/fuzz/fuzz_spop.c: tests/fuzz/fuzz_reply (libFuzzer, "make
 * fuzz") and tests/fuzz/fuzz_reply_smoke (-DFUZZ_STANDALONE, in "make check").
 */
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits/bucket.h"
#include "lease/lease.h"
#include "metrics/metrics.h"
#include "rules_redis/rules_fleet.h"
#include "store/script.h"
#include "store/store_reply.h"
#include "store/store_reply_cap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Mode byte. */
#define MODE_KIND_MASK 0x03u /* 0 claim replies, 1 batch replies, 2 exact replies, 3 mixed */
#define MODE_SLIDING 0x04u   /* the rule is a sliding window */
#define MODE_DOWN 0x08u      /* Redis is reported down now and then */
#define MODE_TICKS 0x10u     /* a lease tick between replies */
#define MODE_TIMEOUTS 0x20u  /* calls time out before their reply */
#define MODE_SLOW 0x40u      /* replies come late (past the lease's end) */
#define MODE_EXACT 0x80u     /* a cold key's claim goes as an exact call (the agent's way) */

/* Second mode byte, when below MODE2_LIMIT. */
#define MODE2_LIMIT 0x20u
#define MODE2_RATE 0x01u        /* rate leases on (warm keys get a share of the rate) */
#define MODE2_WARM 0x02u        /* 300 ms between replies: keys are warm, not hot */
#define MODE2_SLOW_RULE 0x04u   /* 10/1s instead of 100/1s (burst 20 both) */
#define MODE2_NO_PREFETCH 0x08u /* token leases are not topped up before they run dry */
#define MODE2_FRACTION 0x10u    /* max_fraction 1 instead of 0.5 */
/* MODE2_RATE with MODE_SLIDING (windows have no rate leases): a fixed
 * window (the sw_* scripts' fixed mode: the same replies) */
#define MODE2_FIXED MODE2_RATE

/* RESP lengths let through: any that hiredis 0.14 reads without overflowing
 * (it reads digits without a check). The caps bound what a length makes it
 * allocate: an array of the announced length is allocated up front, but
 * the caps refuse one past STORE_REPLY_MAX_ELEMENTS first. */
#define MAX_LEN_DIGITS 18

#define NKEYS 3
#define MAX_REQS 512  /* decisions per input */
#define MAX_JOBS 1024 /* calls in flight, at most */
#define MS 1000ull
#define TTL_US (1000 * MS)
#define RATE_TTL_US (2000 * MS)
static const char *const keys[NKEYS] = {"rl:tb:r:a", "rl:tb:r:b", "rl:tb:r:{}{c}"};

struct req {
    struct lease_waiter w;
    struct bucket_result res;
    int key;
};

struct key_state {
    int have_budget;    /* a reply set how much may be spent */
    uint64_t budget;    /* allowed from the last reply on */
    uint64_t allowed;   /* allowed since that reply */
    uint64_t sent_mark; /* allowed (in all) when its call left */
    uint64_t total;     /* allowed in all */
};

struct run {
    struct lease_table *t;
    struct bucket_params p;
    uint64_t now;
    struct lease_job *jobs[MAX_JOBS];
    size_t njobs;
    struct req reqs[MAX_REQS];
    size_t nreqs;
    struct key_state ks[NKEYS];
    unsigned mode, mode2;
};

static unsigned long long n_replies, n_allowed, n_blocked, n_fleet, n_capped;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_reply: invariant broken: %s\n", what);
    abort();
}

static int key_of(const struct lease_job *j)
{
    for (int k = 0; k < NKEYS; k++)
        if (j->keylen == strlen(keys[k]) && memcmp(j->key, keys[k], j->keylen) == 0)
            return k;
    fail("a job for an unknown key");
    return 0;
}

static void check_result(const struct bucket_result *r)
{
    if (r->allowed) {
        if (r->retry_us != 0)
            fail("allowed with a retry time");
    } else if (r->retry_us == 0 || r->retry_us > BUCKET_MAX_PERIOD_US) {
        fail("denied without a sane retry time");
    }
    if (r->reset_us > BUCKET_MAX_PERIOD_US + TTL_US)
        fail("reset time out of range");
}

static void count_allowed(struct run *r, int k)
{
    struct key_state *ks = &r->ks[k];

    ks->total++;
    n_allowed++;
    if (ks->have_budget && ++ks->allowed > ks->budget)
        fail("more decisions allowed than Redis granted");
}

static void push_job(struct run *r, struct lease_job *j)
{
    if (!j)
        return;
    if (r->njobs == MAX_JOBS)
        fail("too many calls in flight");
    j->sent_us = r->now;
    r->ks[key_of(j)].sent_mark = r->ks[key_of(j)].total;
    r->jobs[r->njobs++] = j;
}

static void complete(struct run *r, struct lease_waiter *done, struct lease_waiter *fallback)
{
    for (struct lease_waiter *w = done; w; w = w->next) {
        struct req *q = w->req;
        check_result(&q->res);
        if (q->res.allowed)
            count_allowed(r, q->key);
        else
            n_blocked++;
    }
    (void)fallback; /* decided by the backstop: not Redis' tokens */
}

static void decide(struct run *r, int k, int up)
{
    struct lease_job *j = NULL;
    struct req *q;

    if (r->nreqs == MAX_REQS)
        return;
    q = &r->reqs[r->nreqs++];
    memset(q, 0, sizeof(*q));
    q->key = k;
    q->w.out = &q->res;
    q->w.req = q;
    int v = lease_decide(r->t, keys[k], strlen(keys[k]), &r->p, r->now, up, &q->w, &q->res, &j);
    if (v == LEASE_DONE) {
        check_result(&q->res);
        if (q->res.allowed)
            count_allowed(r, k);
        else
            n_blocked++;
    }
    push_job(r, j);
}

/* The oldest call in flight gets this reply (values v[0..n), or a failure). */
static void answer(struct run *r, int ok, const int64_t *v, int n)
{
    struct lease_waiter *done = NULL, *fallback = NULL;
    struct lease_job *next = NULL, *j;

    if (r->njobs == 0)
        return;
    j = r->jobs[0];
    memmove(r->jobs, r->jobs + 1, (r->njobs - 1) * sizeof(r->jobs[0]));
    r->njobs--;
    int k = key_of(j);
    struct key_state *ks = &r->ks[k];
    uint64_t spent_since_sent = ks->total - ks->sent_mark;
    int exact = j->kind == LEASE_JOB_EXACT, rated = j->rated;
    uint64_t rate_ttl_ms = j->ttl_ms;
    /* what the lease may still spend, as far as the last reply said */
    uint64_t carry = ks->budget > ks->allowed ? ks->budget - ks->allowed : 0;
    int carry_known = ks->have_budget;

    if (r->mode & MODE_TIMEOUTS && n_replies % 3 == 0) {
        lease_timeout(r->t, j, &fallback);
        complete(r, NULL, fallback);
        fallback = NULL;
    }
    lease_reply(r->t, j, ok, v, n, r->now, &done, &fallback, &next);
    /* What may be spent from now: what Redis says we hold, less what was
     * spent since the call left; nothing when the reply is unusable. */
    ks->allowed = 0;
    ks->have_budget = 1;
    ks->budget = 0;
    if (exact) {
        /* an exact call leases nothing: its one waiter, if Redis allowed it */
        if (ok && n >= EXACT_R_COUNT && v[EXACT_R_ALLOWED] == 1)
            ks->budget = 1;
    } else if (rated && ok && n >= CLAIM_R_COUNT) {
        /* A rate lease: what it kept (when Redis still had it), the granted
         * tokens, and the refill at its share until the lease ends; or, with
         * no share, the granted tokens for the waiters, now. */
        uint64_t granted = v[CLAIM_R_GRANTED] > 0 ? (uint64_t)v[CLAIM_R_GRANTED] : 0;
        if (v[CLAIM_R_SHARE_PPM] > 0 && v[CLAIM_R_MINE] > 0 && v[CLAIM_R_LEASE_MS] > 0) {
            uint64_t ppm =
                v[CLAIM_R_SHARE_PPM] > 1000000 ? 1000000 : (uint64_t)v[CLAIM_R_SHARE_PPM];
            uint64_t lease_ms = (uint64_t)v[CLAIM_R_LEASE_MS];
            if (lease_ms > rate_ttl_ms)
                lease_ms = rate_ttl_ms;
            double refill = (double)ppm / 1e6 * (double)r->p.limit * (double)lease_ms * 1000.0 /
                            (double)r->p.period_us;
            if (v[CLAIM_R_HAD] > 0 && !carry_known)
                ks->have_budget = 0; /* nothing known to carry: no bound */
            ks->budget = (v[CLAIM_R_HAD] > 0 ? carry : 0) + granted + (uint64_t)refill + 1;
        } else {
            ks->budget = granted;
        }
    } else if (ok && n >= CLAIM_R_COUNT && v[CLAIM_R_LEASE_MS] > 0 && v[CLAIM_R_MINE] > 0 &&
               (uint64_t)v[CLAIM_R_MINE] > spent_since_sent) {
        ks->budget = (uint64_t)v[CLAIM_R_MINE] - spent_since_sent;
    }
    complete(r, done, fallback);
    push_job(r, next);
}

/* The same values as a concurrency script's reply (cc_acquire: the exact
 * layout and the expired slots; cc_release: freed or not). */
static void cc_answer(const int64_t *v, int n)
{
    struct bucket_result out = {0};
    uint64_t expired = 0;
    int rel = store_reply_cc_release(v, n);

    if (store_reply_cc(v, n, &out, &expired) == 0) {
        check_result(&out);
        if (out.reset_us != 0 || (out.allowed && out.retry_us != 0))
            fail("a slot with a reset or an admitted one with a retry time");
        if (!out.allowed && out.retry_us < 1000)
            fail("a slot denial shorter than Redis' millisecond");
        if ((int64_t)expired < 0 || (v[CC_R_EXPIRED] > 0 && expired != (uint64_t)v[CC_R_EXPIRED]))
            fail("expired slots misread");
    } else if (n >= CC_R_COUNT) {
        fail("a long enough cc_acquire reply refused");
    }
    if (rel != (n < CC_RELEASE_R_COUNT ? -1 : v[CC_RELEASE_R_RELEASED] == 1))
        fail("a cc_release reply misread");
}

static void exact_answer(const int64_t *v, int n)
{
    struct bucket_result out = {0};

    cc_answer(v, n);
    if (store_reply_exact(v, n, &out) == 0) {
        check_result(&out);
        if (!out.allowed && out.retry_us < 1000)
            fail("an exact denial shorter than Redis' millisecond");
    } else if (n >= EXACT_R_COUNT) {
        fail("a long enough exact reply refused");
    }
}

/* A refund's reply ([agent] charge): counted, and noted in the lease entry
 * of a key this run uses, which must change no decision's budget (the
 * invariants above hold whatever it says). */
static void refund_answer(struct run *r, const int64_t *v, int n)
{
    uint64_t given = 0, remaining = 0;

    if (store_reply_refund(v, n, &given, &remaining) != 0) {
        if (n >= REFUND_R_COUNT)
            fail("a long enough refund reply refused");
        return;
    }
    const char *key = keys[n_replies % NKEYS];
    lease_note_refund(r->t, key, strlen(key), remaining, r->now);
}

/* One parsed reply, as the store and the limiter take it. */
static void on_reply(struct run *r, const redisReply *reply, unsigned kind)
{
    struct store_result res = {0};

    n_replies++;
    if (kind == 1 && reply->type == REDIS_REPLY_ARRAY) {
        /* a batch: one member per call in flight, as many as it covers */
        size_t at = 0;
        for (size_t m = 0; m < 4 && r->njobs > 0; m++) {
            memset(&res, 0, sizeof(res));
            store_reply_batch_next(reply, &at, &res);
            if (res.n < 0 || res.n > STORE_MAX_VALUES || at > reply->elements)
                fail("batch member out of bounds");
            answer(r, res.status == STORE_OK, res.v, res.n);
        }
        return;
    }
    if (reply->type == REDIS_REPLY_ARRAY)
        store_reply_values(reply, &res);
    else
        res.status = STORE_ERR;
    if (res.n < 0 || res.n > STORE_MAX_VALUES)
        fail("values out of bounds");
    if (kind == 2 || (kind == 3 && n_replies % 2)) {
        exact_answer(res.v, res.status == STORE_OK ? res.n : 0);
        refund_answer(r, res.v, res.status == STORE_OK ? res.n : 0);
    } else
        answer(r, res.status == STORE_OK, res.v, res.n);
}

/* Whether a RESP length in p has more digits than hiredis 0.14 reads
 * without overflowing a long long (undefined behaviour in its reader, not
 * ours): inputs holding one are skipped. (A type byte inside a bulk string
 * is taken for one too: that skips a few inputs more, never one less.) */
static int huge_length(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '*' && p[i] != '$' && p[i] != ':')
            continue;
        size_t j = i + 1, digits = 0;
        if (j < n && (p[j] == '-' || p[j] == '+'))
            j++;
        for (; j < n && p[j] >= '0' && p[j] <= '9'; j++)
            if (++digits > MAX_LEN_DIGITS)
                return 1;
    }
    return 0;
}

/* A reply the capped reader handed over is within every cap. */
static void within_caps(const redisReply *r, unsigned depth, size_t *objects, size_t *bytes)
{
    ++*objects;
    if (r->type == REDIS_REPLY_ARRAY) {
        if (depth > STORE_REPLY_MAX_DEPTH || r->elements > STORE_REPLY_MAX_ELEMENTS)
            fail("an array past the caps");
        for (size_t i = 0; i < r->elements; i++)
            within_caps(r->element[i], depth + 1, objects, bytes);
    } else if (r->type != REDIS_REPLY_INTEGER && r->type != REDIS_REPLY_NIL) {
        if (r->len > STORE_REPLY_MAX_STRING)
            fail("a string past the caps");
        *bytes += r->len;
    }
    if (*objects > STORE_REPLY_MAX_OBJECTS + 1 || *bytes > STORE_REPLY_MAX_BYTES)
        fail("a reply past the caps");
}

/* Every reply also as the rule store's fleet view would read it (store_read
 * turns an array into text: store_reply_strings; rules_fleet_parse): a reply
 * of the wrong shape is refused whole; one it takes is written out as JSON
 * and as a table without any control byte but the line ends, with
 * off_current counting the agents off the current version. */
static void fleet_reply(const redisReply *reply)
{
    struct rules_fleet f;
    size_t n = reply->type == REDIS_REPLY_ARRAY ? reply->elements : 0;

    if (n > 4 * RULES_FLEET_MAX + 2)
        return;
    const char **str = calloc(n + 1, sizeof(*str));
    size_t *len = calloc(n + 1, sizeof(*len));
    char(*num)[24] = calloc(n + 1, sizeof(*num));
    if (!str || !len || !num)
        abort();
    store_reply_strings(reply, str, len, num);
    if (rules_fleet_parse(n, str, len, &f) == 0) {
        size_t jlen, off = 0;
        char *json = rules_fleet_json(&f, &jlen);
        char *text = rules_fleet_text(&f);
        if (!json || !text || jlen == 0 || json[jlen - 1] != '\n' || strlen(json) != jlen)
            fail("fleet view not written");
        for (const char *c = text; *c; c++)
            if ((unsigned char)*c < 0x20 && *c != '\n')
                fail("a control byte in the fleet table");
        for (size_t i = 0; i < f.n; i++)
            off += f.agents[i].version != f.current;
        char want[48];
        snprintf(want, sizeof(want), "\"off_current\":%zu,", off);
        if (!strstr(json, want))
            fail("off_current miscounted");
        free(json);
        free(text);
        rules_fleet_clear(&f);
        n_fleet++;
    } else if (f.n || f.agents) {
        fail("a refused fleet reply left agents");
    }
    free(str);
    free(len);
    free(num);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct run r;
    redisReader *rd;
    struct store_reply_cap cap;
    void *obj;
    unsigned mode, mode2 = 0, kind;
    size_t skip = 1;

    if (size < 1)
        return 0;
    mode = data[0];
    if (size > 1 && data[1] < MODE2_LIMIT) {
        mode2 = data[1];
        skip = 2;
    }
    if (huge_length(data + skip, size - skip))
        return 0;
    kind = mode & MODE_KIND_MASK;
    memset(&r, 0, sizeof(r));
    r.mode = mode;
    r.mode2 = mode2;
    const struct lease_config lcfg = {100 * MS,
                                      TTL_US,
                                      mode2 & MODE2_FRACTION ? 1.0 : 0.5,
                                      mode2 & MODE2_RATE ? RATE_TTL_US : 0,
                                      !!(mode & MODE_EXACT),
                                      !(mode2 & MODE2_NO_PREFETCH)};
    r.t = lease_table_new(&lcfg, 2);
    r.p = (struct bucket_params){!(mode & MODE_SLIDING) ? BUCKET_TOKEN_BUCKET
                                 : mode2 & MODE2_FIXED  ? BUCKET_FIXED_WINDOW
                                                        : BUCKET_SLIDING_WINDOW,
                                 mode2 & MODE2_SLOW_RULE ? 10 : 100,
                                 1000 * MS,
                                 20,
                                 0,
                                 0,
                                 1000,
                                 0,
                                 0,
                                 0};
    r.now = 1000000 * MS;
    rd = redisReaderCreate();
    if (!r.t || !rd)
        abort();
    store_reply_cap_install(rd, &cap, NULL); /* as the store's connections have them */
    redisReaderFeed(rd, (const char *)data + skip, size - skip);

    /* a call in flight for the first reply */
    decide(&r, 0, 1);
    for (unsigned i = 0;; i++) {
        int up = !(mode & MODE_DOWN) || i % 5 != 4;
        size_t objects = 0, bytes = 0;

        if (redisReaderGetReply(rd, &obj) != REDIS_OK) {
            n_capped += store_reply_cap_refused(&cap) != NULL;
            break; /* the connection is closed */
        }
        if (!obj)
            break;
        within_caps(obj, 1, &objects, &bytes);

        r.now += (mode & MODE_SLOW) ? 900 * MS : (mode2 & MODE2_WARM) ? 300 * MS : 1 * MS;
        on_reply(&r, obj, kind);
        fleet_reply(obj);
        freeReplyObject(obj);
        /* a few decisions, on every key, before the next reply */
        for (unsigned d = 0; d < 1 + i % 4; d++)
            decide(&r, (int)((i + d) % NKEYS), up);
        if (mode & MODE_TICKS && i % 2) {
            struct lease_job *jobs = NULL, *next;
            lease_tick(r.t, r.now, up, &jobs);
            for (; jobs; jobs = next) {
                next = jobs->next;
                push_job(&r, jobs);
            }
        }
        if (r.njobs == 0)
            decide(&r, (int)(i % NKEYS), 1);
    }
    /* the connection is lost: every call in flight fails */
    while (r.njobs > 0)
        answer(&r, 0, NULL, 0);
    redisReaderFree(rd);
    lease_table_free(r.t);
    return 0;
}

#ifdef FUZZ_STANDALONE

#define FUZZ_NAME "fuzz_reply_smoke"
#define FUZZ_ITERATIONS 100000
#define FUZZ_MAX_INPUT 4096

/* RESP replies: claims {granted, remaining, held, holders, retry_ms,
 * reset_ms, lease_ms, mine, share_ppm, had}, exact {allowed, remaining,
 * retry_ms, reset_ms}, batches ("n v1 .. vn" per call), errors, odd types;
 * claims cut short (8 values, as before rate leases), rate leases. */
#define CLAIM_OK "*10\r\n:5\r\n:10\r\n:5\r\n:1\r\n:0\r\n:500\r\n:1000\r\n:5\r\n:0\r\n:0\r\n"
#define CLAIM_EMPTY "*10\r\n:0\r\n:0\r\n:20\r\n:2\r\n:300\r\n:6000\r\n:0\r\n:0\r\n:0\r\n:0\r\n"
#define CLAIM_STR                                                                                  \
    "*10\r\n$1\r\n3\r\n$2\r\n17\r\n:3\r\n:1\r\n:0\r\n:150\r\n:1000\r\n:3\r\n"                      \
    "$1\r\n0\r\n:0\r\n"
#define CLAIM_SHORT "*8\r\n:5\r\n:10\r\n:5\r\n:1\r\n:0\r\n:500\r\n:1000\r\n:5\r\n"
#define CLAIM_HUGE                                                                                 \
    "*10\r\n:9223372036854775807\r\n:-1\r\n:-9223372036854775808\r\n:1\r\n"                        \
    ":9223372036854775807\r\n:9223372036854775807\r\n:9223372036854775807\r\n"                     \
    ":9223372036854775807\r\n:9223372036854775807\r\n:9223372036854775807\r\n"
#define CLAIM_RATE "*10\r\n:1\r\n:15\r\n:4\r\n:2\r\n:0\r\n:300\r\n:2000\r\n:4\r\n:200000\r\n:0\r\n"
#define CLAIM_RATE_KEPT                                                                            \
    "*10\r\n:0\r\n:12\r\n:6\r\n:2\r\n:0\r\n:400\r\n:2000\r\n:3\r\n"                                \
    ":150000\r\n:3\r\n"
#define CLAIM_RATE_NONE "*10\r\n:1\r\n:0\r\n:1\r\n:1\r\n:100\r\n:2000\r\n:0\r\n:0\r\n:0\r\n:0\r\n"
#define EXACT_OK "*4\r\n:1\r\n:9\r\n:0\r\n:3000\r\n"
#define EXACT_NO "*4\r\n:0\r\n:0\r\n:2500\r\n:60000\r\n"
#define BATCH                                                                                      \
    "*16\r\n:10\r\n:1\r\n:9\r\n:1\r\n:1\r\n:0\r\n:10\r\n:1000\r\n:1\r\n:0\r\n:0\r\n"               \
    ":4\r\n:1\r\n:8\r\n:0\r\n:100\r\n"
#define ERR "-NOSCRIPT No matching script\r\n"
#define NIL "$-1\r\n"
/* lua/rules_fleet.lua's: current, Redis time, then agent, seen, version, error */
#define FLEET                                                                                      \
    "*10\r\n:3\r\n:100000\r\n$35\r\nhost=lb-1 pid=42 listen=127.0.0.1:1\r\n"                       \
    "$5\r\n99000\r\n$1\r\n3\r\n$0\r\n\r\n$6\r\nhost=b\r\n:95000\r\n$1\r\n2\r\n"                    \
    "$24\r\nversion 3: redis:v3:1: x\r\n"
#define NO_MODE2 (-1)
#define LONG_BULK 2000 /* digits of the long bulk string seed */

static const struct {
    uint8_t mode;
    int mode2; /* NO_MODE2: none */
    const char *resp;
} seeds[] = {
    {0x00, NO_MODE2, CLAIM_OK CLAIM_OK CLAIM_EMPTY CLAIM_OK},
    {0x10, NO_MODE2, CLAIM_OK CLAIM_STR CLAIM_OK CLAIM_OK CLAIM_EMPTY CLAIM_OK},
    {0x04, NO_MODE2, CLAIM_OK CLAIM_OK CLAIM_OK},
    {0x20, NO_MODE2, CLAIM_OK ERR CLAIM_OK NIL CLAIM_OK},
    {0x48, NO_MODE2, CLAIM_OK CLAIM_OK CLAIM_HUGE CLAIM_OK CLAIM_SHORT},
    {0x01, NO_MODE2, BATCH BATCH CLAIM_OK BATCH},
    {0x02, NO_MODE2, EXACT_OK EXACT_NO EXACT_OK ERR},
    {0x13, NO_MODE2, CLAIM_OK EXACT_NO CLAIM_STR EXACT_OK BATCH},
    {0x80, NO_MODE2, EXACT_OK CLAIM_OK EXACT_NO CLAIM_OK EXACT_OK},
    {0xb1, NO_MODE2, EXACT_OK BATCH ERR EXACT_OK CLAIM_OK NIL},
    /* found by libFuzzer: an exact denial's retry_ms past the cap, which the
     * interval's worth of tokens added on top took past BUCKET_MAX_PERIOD_US */
    {0x80, NO_MODE2, "*4\r\n:0\r\n:0\r\n:9999999999999\r\n:0\r\n"},
    /* rate leases: warm keys, a slow rule, with and without prefetch */
    {0x00, 0x07,
     CLAIM_OK CLAIM_OK CLAIM_OK CLAIM_RATE CLAIM_RATE CLAIM_RATE_KEPT CLAIM_RATE CLAIM_RATE_NONE
         CLAIM_RATE_KEPT},
    {0x10, 0x0f,
     CLAIM_OK CLAIM_RATE CLAIM_OK CLAIM_RATE_KEPT CLAIM_RATE CLAIM_EMPTY CLAIM_RATE CLAIM_RATE_KEPT
         CLAIM_RATE},
    {0x80, 0x03, EXACT_OK CLAIM_OK EXACT_OK CLAIM_RATE CLAIM_RATE_KEPT CLAIM_RATE ERR CLAIM_RATE},
    {0x30, 0x17,
     CLAIM_RATE CLAIM_RATE_KEPT CLAIM_RATE CLAIM_RATE CLAIM_RATE_KEPT CLAIM_RATE_NONE CLAIM_RATE},
    /* the same without rate leases */
    {0x00, 0x06, CLAIM_OK CLAIM_OK CLAIM_OK CLAIM_RATE CLAIM_RATE CLAIM_RATE_KEPT CLAIM_RATE},
    /* a fixed window: claims, exact calls, a denial to the boundary */
    {0x97, 0x01, CLAIM_OK EXACT_NO CLAIM_OK EXACT_OK BATCH CLAIM_EMPTY},
    /* a long bulk string (built by fuzz_seed), and one announced but not sent */
    {0x02, 0x00, NULL},
    {0x00, 0x00, CLAIM_OK "$99999\r\n12345"},
    /* hostile headers, refused by the caps before what they announce:
     * 100 million elements, a 512 MB bulk string (its body never all in),
     * one past each cap, arrays nested five deep (hiredis takes seven), an
     * array length past an int, the largest lengths hiredis reads */
    {0x00, NO_MODE2, CLAIM_OK "*100000000\r\n:1\r\n:1\r\n:1\r\n" CLAIM_OK},
    {0x01, NO_MODE2, BATCH "$536870912\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},
    {0x02, NO_MODE2, EXACT_OK "*65537\r\n:1\r\n" EXACT_OK},
    {0x02, NO_MODE2, EXACT_OK "$1048577\r\nxxxx" EXACT_OK},
    {0x00, NO_MODE2, CLAIM_OK "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n" CLAIM_OK},
    {0x00, NO_MODE2, CLAIM_OK "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n" CLAIM_OK},
    {0x03, NO_MODE2, EXACT_OK "*2147483648\r\n:1\r\n" BATCH},
    {0x03, NO_MODE2, BATCH "*999999999999999999\r\n$999999999999999999\r\nx"},
    /* the rule store's fleet view (fleet_reply), among claims */
    {0x00, NO_MODE2, CLAIM_OK FLEET CLAIM_OK FLEET},
};
#define NSEEDS (sizeof(seeds) / sizeof(seeds[0]))

static const char *const fuzz_dict[] = {
    CLAIM_OK,
    CLAIM_EMPTY,
    CLAIM_STR,
    CLAIM_RATE,
    CLAIM_RATE_KEPT,
    EXACT_OK,
    EXACT_NO,
    BATCH,
    ERR,
    NIL,
    FLEET,
    "*100000000\r\n",
    "$536870912\r\n",
    "*1\r\n*1\r\n*1\r\n",
    "host=",
    " pid=",
    " listen=",
    "*10\r\n",
    "*8\r\n",
    "*4\r\n",
    ":0\r\n",
    ":1\r\n",
    ":-1\r\n",
    ":1000\r\n",
    ":200000\r\n",
    ":9223372036854775807\r\n",
    "$3\r\n",
    "$1000\r\n",
    "+OK\r\n",
    "*-1\r\n",
    "*0\r\n",
    "\r\n",
};
#define FUZZ_NDICT (sizeof(fuzz_dict) / sizeof(fuzz_dict[0]))

static size_t fuzz_nseeds(void)
{
    return NSEEDS;
}

static size_t fuzz_seed(size_t k, uint8_t *buf)
{
    size_t n = 0;

    buf[n++] = seeds[k].mode;
    if (seeds[k].mode2 != NO_MODE2)
        buf[n++] = (uint8_t)seeds[k].mode2;
    if (!seeds[k].resp) { /* an exact reply whose remaining is LONG_BULK digits */
        n += (size_t)sprintf((char *)buf + n, "*4\r\n:0\r\n$%d\r\n", LONG_BULK);
        memset(buf + n, '9', LONG_BULK);
        n += LONG_BULK;
        n += (size_t)sprintf((char *)buf + n, "\r\n:5\r\n:0\r\n");
        return n;
    }
    memcpy(buf + n, seeds[k].resp, strlen(seeds[k].resp));
    return n + strlen(seeds[k].resp);
}

static void fuzz_summary(void)
{
    printf(FUZZ_NAME ": %llu replies, %llu decisions allowed, %llu blocked, %llu rate lease "
                     "claims, %llu fleet views, %llu inputs refused by the caps\n",
           n_replies, n_allowed, n_blocked,
           (unsigned long long)atomic_load(&metrics.lease_rate_claims), n_fleet, n_capped);
}

#include "fuzz_main.h"

#endif /* FUZZ_STANDALONE */
