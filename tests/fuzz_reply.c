/* fuzz_reply.c - fuzz target for what the agent does with Redis' replies to
 * its script calls: bytes as Redis would send them (RESP), parsed by
 * hiredis' own reader, turned into values as the store does
 * (store_reply_values / store_reply_batch_next), then applied: claim and
 * return replies to the lease cache (lease_reply, with decisions, ticks and
 * timeouts in between), exact replies to a decision (store_reply_exact).
 *
 * The first byte is the mode (below); the rest is a stream of RESP replies,
 * each answering the oldest call in flight. Invariants (a broken one aborts):
 *  - a key never admits more than Redis granted it: after a reply saying the
 *    agent holds `mine` tokens with a lease, the decisions allowed until the
 *    next reply for that key are at most mine minus what was spent since the
 *    call left; with no lease, none;
 *  - every answer is sane: a denial has a retry time in (0, 285 years], no
 *    time passes that bound;
 *  - nothing leaks, nothing is read out of bounds (ASan, UBSan).
 *
 * Built two ways, as tests/fuzz_spop.c: tests/fuzz_reply (libFuzzer, "make
 * fuzz") and tests/fuzz_reply_smoke (-DFUZZ_STANDALONE, in "make check").
 */
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "lease.h"
#include "store/script.h"
#include "store/store_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Mode byte. */
#define MODE_KIND_MASK 0x03u /* 0 claim replies, 1 batch replies, 2 exact replies, 3 mixed */
#define MODE_SLIDING 0x04u   /* the rule is a sliding window */
#define MODE_DOWN 0x08u      /* Redis is reported down now and then */
#define MODE_TICKS 0x10u     /* a lease tick between replies */
#define MODE_TIMEOUTS 0x20u  /* calls time out before their reply */
#define MODE_SLOW 0x40u      /* replies come late (past the lease's end) */
#define MODE_EXACT 0x80u     /* a cold key's claim goes as an exact call (the agent's way) */

#define NKEYS 3
#define MAX_REQS 512  /* decisions per input */
#define MAX_JOBS 1024 /* calls in flight, at most */
#define MS 1000ull
#define TTL_US (1000 * MS)

static const struct lease_config lcfg = {100 * MS, TTL_US, 0.5, 0, 0, 1}; /* token leases */
static const struct lease_config lcfg_exact = {100 * MS, TTL_US, 0.5, 0, 1, 1};
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
    unsigned mode;
};

static unsigned long long n_replies, n_allowed, n_blocked;

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
    int exact = j->kind == LEASE_JOB_EXACT;

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
    } else if (ok && n >= CLAIM_R_COUNT && v[CLAIM_R_LEASE_MS] > 0 && v[CLAIM_R_MINE] > 0 &&
               (uint64_t)v[CLAIM_R_MINE] > spent_since_sent) {
        ks->budget = (uint64_t)v[CLAIM_R_MINE] - spent_since_sent;
    }
    complete(r, done, fallback);
    push_job(r, next);
}

static void exact_answer(const int64_t *v, int n)
{
    struct bucket_result out = {0};

    if (store_reply_exact(v, n, &out) == 0) {
        check_result(&out);
        if (!out.allowed && out.retry_us < 1000)
            fail("an exact denial shorter than Redis' millisecond");
    } else if (n >= EXACT_R_COUNT) {
        fail("a long enough exact reply refused");
    }
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
    if (kind == 2 || (kind == 3 && n_replies % 2))
        exact_answer(res.v, res.status == STORE_OK ? res.n : 0);
    else
        answer(r, res.status == STORE_OK, res.v, res.n);
}

/* hiredis 0.14 allocates a multi-bulk array of the announced length up
 * front (and walks it to free it): "*2000000000" costs gigabytes and
 * seconds before a single element arrives. That is the reader's own limit
 * to keep (later hiredis has maxelements), and Redis does not send it to
 * our scripts: such inputs are skipped. */
static int huge_length(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '*' && p[i] != '$')
            continue;
        size_t j = i + 1, digits = 0;
        if (j < n && p[j] == '-')
            continue;
        while (j < n && p[j] >= '0' && p[j] <= '9' && digits < 7) {
            j++;
            digits++;
        }
        if (digits >= 6) /* 100000 and more */
            return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct run r;
    redisReader *rd;
    void *obj;
    unsigned mode, kind;

    if (size < 1 || huge_length(data + 1, size - 1))
        return 0;
    mode = data[0];
    kind = mode & MODE_KIND_MASK;
    memset(&r, 0, sizeof(r));
    r.mode = mode;
    r.t = lease_table_new(mode & MODE_EXACT ? &lcfg_exact : &lcfg, 2);
    r.p = (struct bucket_params){(mode & MODE_SLIDING) ? BUCKET_SLIDING_WINDOW
                                                       : BUCKET_TOKEN_BUCKET,
                                 100, 1000 * MS, 20};
    r.now = 1000000 * MS;
    rd = redisReaderCreate();
    if (!r.t || !rd)
        abort();
    redisReaderFeed(rd, (const char *)data + 1, size - 1);

    /* a call in flight for the first reply */
    decide(&r, 0, 1);
    for (unsigned i = 0; redisReaderGetReply(rd, &obj) == REDIS_OK && obj; i++) {
        int up = !(mode & MODE_DOWN) || i % 5 != 4;

        r.now += (mode & MODE_SLOW) ? 900 * MS : 1 * MS;
        on_reply(&r, obj, kind);
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
 * reset_ms, lease_ms, mine}, exact {allowed, remaining, retry_ms, reset_ms},
 * batches ("n v1 .. vn" per call), errors, odd types. */
#define CLAIM_OK "*8\r\n:5\r\n:10\r\n:5\r\n:1\r\n:0\r\n:500\r\n:1000\r\n:5\r\n"
#define CLAIM_EMPTY "*8\r\n:0\r\n:0\r\n:20\r\n:2\r\n:300\r\n:6000\r\n:0\r\n:0\r\n"
#define CLAIM_STR "*8\r\n$1\r\n3\r\n$2\r\n17\r\n:3\r\n:1\r\n:0\r\n:150\r\n:1000\r\n:3\r\n"
#define CLAIM_HUGE "*8\r\n:9223372036854775807\r\n:-1\r\n:-9223372036854775808\r\n:1\r\n" \
                   ":9223372036854775807\r\n:9223372036854775807\r\n:9223372036854775807\r\n" \
                   ":9223372036854775807\r\n"
#define EXACT_OK "*4\r\n:1\r\n:9\r\n:0\r\n:3000\r\n"
#define EXACT_NO "*4\r\n:0\r\n:0\r\n:2500\r\n:60000\r\n"
#define BATCH "*14\r\n:8\r\n:1\r\n:9\r\n:1\r\n:1\r\n:0\r\n:10\r\n:1000\r\n:1\r\n:4\r\n:1\r\n" \
              ":8\r\n:0\r\n:100\r\n"
#define ERR "-NOSCRIPT No matching script\r\n"
#define NIL "$-1\r\n"

static const struct {
    uint8_t mode;
    const char *resp;
} seeds[] = {
    {0x00, CLAIM_OK CLAIM_OK CLAIM_EMPTY CLAIM_OK},
    {0x10, CLAIM_OK CLAIM_STR CLAIM_OK CLAIM_OK CLAIM_EMPTY CLAIM_OK},
    {0x04, CLAIM_OK CLAIM_OK CLAIM_OK},
    {0x20, CLAIM_OK ERR CLAIM_OK NIL CLAIM_OK},
    {0x48, CLAIM_OK CLAIM_OK CLAIM_HUGE CLAIM_OK},
    {0x01, BATCH BATCH CLAIM_OK BATCH},
    {0x02, EXACT_OK EXACT_NO EXACT_OK ERR},
    {0x13, CLAIM_OK EXACT_NO CLAIM_STR EXACT_OK BATCH},
    {0x80, EXACT_OK CLAIM_OK EXACT_NO CLAIM_OK EXACT_OK},
    {0xb1, EXACT_OK BATCH ERR EXACT_OK CLAIM_OK NIL},
    /* found by libFuzzer: an exact denial's retry_ms past the cap, which the
     * interval's worth of tokens added on top took past BUCKET_MAX_PERIOD_US */
    {0x80, "*4\r\n:0\r\n:0\r\n:9999999999999\r\n:0\r\n"},
};
#define NSEEDS (sizeof(seeds) / sizeof(seeds[0]))

static const char *const fuzz_dict[] = {
    CLAIM_OK, CLAIM_EMPTY, CLAIM_STR, EXACT_OK, EXACT_NO, BATCH, ERR, NIL, "*8\r\n", "*4\r\n",
    ":0\r\n", ":1\r\n", ":-1\r\n", ":1000\r\n", ":9223372036854775807\r\n", "$3\r\n", "+OK\r\n",
    "*-1\r\n", "*0\r\n", "\r\n",
};
#define FUZZ_NDICT (sizeof(fuzz_dict) / sizeof(fuzz_dict[0]))

static size_t fuzz_nseeds(void)
{
    return NSEEDS;
}

static size_t fuzz_seed(size_t k, uint8_t *buf)
{
    size_t n = strlen(seeds[k].resp);
    buf[0] = seeds[k].mode;
    memcpy(buf + 1, seeds[k].resp, n);
    return n + 1;
}

static void fuzz_summary(void)
{
    printf(FUZZ_NAME ": %llu replies, %llu decisions allowed, %llu blocked\n", n_replies,
           n_allowed, n_blocked);
}

#include "fuzz_main.h"

#endif /* FUZZ_STANDALONE */
