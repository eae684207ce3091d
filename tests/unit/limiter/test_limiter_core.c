/* SPDX-License-Identifier: Apache-2.0 */
/* test_limiter_core.c - the limiter's core (src/limiter/limiter_core.h)
 * deciding whole requests against scripted Redis replies, with no loop and
 * no Redis: standalone buckets and cost, a cold key's first SET, a hot
 * lease spent locally, its negative cache, an exact call with block_for,
 * the fallback (Redis down, a call failed or timed out, on_redis_down =
 * closed), concurrency slots (Redis, local, a late slot given back), and
 * all-or-nothing refunds (local buckets, and a refund call to Redis). */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "limiter/limiter_charge.h"
#include "limiter/limiter_core.h"
#include "limiter/limiter_first.h"
#include "limiter/limiter_req.h"
#include "limiter/script_args.h"
#include "rules/rules.h"
#include "rules_fixture.h"
#include "store/script.h"
#include "store/store_result.h"

#define MS 1000ull
#define S 1000000ull
#define T0 (100 * S)

static const char *const redis_ini = "[redis]\nurl = redis://127.0.0.1:1\n";

/* One test's world: the core, the rules, one request and its jobs. */
struct world {
    struct limiter_core c;
    struct ruleset *rs;
    struct limiter_req req;
    struct core_jobs jobs;
    int done; /* req->done calls */
};

static struct world *the_world; /* the done callback's */

static void on_done(struct limiter_req *req)
{
    ck_assert_ptr_eq(req, &the_world->req);
    the_world->done++;
}

/* A world of rules ini; with Redis (the lease cache under exact_cold) or
 * standalone. */
static void world_open(struct world *w, const char *rules, int redis, int exact_cold)
{
    char ini[2048];
    /* the agent: exact_cold and prefetch on; off: the lease cache alone */
    struct lease_config lc = {100 * MS, 1 * S, 0.1, 0, exact_cold, exact_cold};

    memset(w, 0, sizeof(*w));
    the_world = w;
    snprintf(ini, sizeof(ini), "%s%s", redis ? redis_ini : "", rules);
    w->rs = rt_load(ini);
    ck_assert_int_eq(core_init(&w->c, 100000, 4, redis ? &lc : NULL, "rl:"), 0);
    w->c.redis = redis;
    w->req.rs = w->rs;
    w->req.done = on_done;
}

static void world_close(struct world *w)
{
    ck_assert_ptr_null(w->jobs.head); /* every job answered */
    rules_eval_free(&w->req.ev);
    free(w->req.waiters);
    core_free(&w->c);
    ruleset_unref(w->rs);
}

/* Decide a request of the args kv (n pairs) at now: the decided count, -1
 * when it must wait. Jobs go to w->jobs. */
static int decide(struct world *w, const char *const *kv, int n, uint64_t now, int up)
{
    uint8_t buf[512];
    size_t len = rt_payload(buf, sizeof(buf), "check", kv, n);

    ck_assert_int_eq(rules_match(w->rs, buf, len, &w->req.ev), 0);
    long d = core_decide(&w->c, &w->req, now, up, up, &w->jobs);
    ck_assert_int_ge(d, 0);
    return core_decide_end(&w->req, (unsigned)d) ? -1 : (int)d;
}

static int decide_key(struct world *w, const char *key, uint64_t now, int up)
{
    const char *kv[] = {"key", key};
    return decide(w, kv, 1, now, up);
}

/* The next job the core handed back (the test's stand-in for the queue). */
static struct rjob *next_job(struct world *w)
{
    struct rjob *j = w->jobs.head;

    ck_assert_ptr_nonnull(j);
    w->jobs.head = j->next;
    if (!w->jobs.head)
        w->jobs.tail = NULL;
    j->next = NULL;
    return j;
}

/* Answer j with the integers v (n of them); status STORE_DOWN: failed. */
static struct rjob *answer(struct world *w, struct rjob *j, int status, const int64_t *v, int n,
                           uint64_t now)
{
    struct store_result r = {.status = status, .n = n};

    if (n)
        memcpy(r.v, v, (size_t)n * sizeof(*v));
    return core_reply(&w->c, j, &r, now);
}

static const struct rule_hit *hit(const struct world *w, size_t i)
{
    ck_assert_uint_lt(i, w->req.ev.nhits);
    return &w->req.ev.hits[i];
}

/* ---- standalone ----------------------------------------------------------- */

START_TEST(standalone_cost)
{
    struct world w;
    const char *kv[] = {"key", "k", "cost", "2"};

    world_open(&w, "[rule:a]\nkey = key\nrate = 10/1m\nburst = 3\ncost = arg:cost\nmax_cost = 5\n",
               0, 0);
    ck_assert_int_eq(decide(&w, kv, 2, T0, 0), 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.res.remaining, 1);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_BUCKET);
    ck_assert_int_eq(decide(&w, kv, 2, T0 + 1, 0), 1); /* 1 left: a cost of 2 is denied */
    ck_assert(!hit(&w, 0)->out.res.allowed);
    ck_assert_uint_gt(hit(&w, 0)->out.res.retry_us, 0);
    ck_assert_ptr_null(w.jobs.head); /* standalone: nothing for Redis */
    ck_assert_int_eq(w.done, 0);
    world_close(&w);
}
END_TEST

/* The wall clock fixed windows count on, as the test sets it. */
static uint64_t fake_wall;
static uint64_t wall_of_test(void)
{
    return fake_wall;
}

/* A fixed window counts on the wall clock the core is given, never its
 * own: 2 per minute aligned to the epoch, whatever the monotonic clock. */
START_TEST(standalone_fixed_window_wall)
{
    struct world w;

    world_open(&w, "[rule:q]\nkey = key\nrate = 2/1m\nalgorithm = fixed-window\n", 0, 0);
    w.c.wall_us = wall_of_test;
    fake_wall = 1765000020ull * S + 10 * S; /* 10 s into a minute of the epoch */
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 1);
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.charged_at, fake_wall); /* charged at the wall clock */
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 1);          /* the third in the window */
    ck_assert(!hit(&w, 0)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.res.retry_us, 50 * S); /* until the minute ends */
    /* the monotonic clock stands still; the wall clock crosses the minute */
    fake_wall += 50 * S;
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    world_close(&w);
}
END_TEST

/* ---- a cold key, a hot lease ---------------------------------------------- */

START_TEST(cold_first_set)
{
    struct world w;
    const char *argv[CORE_FIRST_ARGC];
    size_t argvlen[CORE_FIRST_ARGC];
    struct store_result r;

    world_open(&w, "[rule:a]\nkey = key\nrate = 10/1s\nburst = 3\n", 1, 1);
    ck_assert_int_eq(decide_key(&w, "k", T0, 1), -1); /* waits for Redis */
    struct rjob *j = next_job(&w);
    ck_assert_int_eq(j->kind, RJOB_LEASE);
    ck_assert_int_eq(j->lj->kind, LEASE_JOB_EXACT);
    ck_assert_int_eq(core_first_args(j, argv, argvlen), 0); /* a new key: one SET */
    ck_assert_str_eq(argv[0], "SET");
    ck_assert_int_eq(memcmp(argv[1], "rl:t2:a:k", argvlen[1]), 0);
    ck_assert_int_eq(memcmp(argv[2], "2 2 ", 4), 0); /* b - 1 left */
    ck_assert_int_eq(memcmp(argv[3], "NX", 2), 0);
    ck_assert_int_eq(memcmp(argv[4], "PX", 2), 0); /* no GET: nothing reads the old value */
    /* nil: the key was there after all (NX wrote nothing): the script decides */
    struct store_result there = {.status = STORE_OK};
    ck_assert_int_eq(core_first_reply(j, &there, 0, &r), CORE_FIRST_EVAL);
    /* a WRONGTYPE (a SET NX GET on a hash) is "there" too */
    struct store_result wrong = {.status = STORE_ERR, .err = "WRONGTYPE Operation"};
    ck_assert_int_eq(core_first_reply(j, &wrong, 0, &r), CORE_FIRST_EVAL);
    /* any other string is not SET's answer: a failure, as a script's would be */
    const char *s = "x";
    size_t sl = 1;
    struct store_result odd = {.status = STORE_OK, .nstr = 1, .str = &s, .str_len = &sl};
    ck_assert_int_eq(core_first_reply(j, &odd, 0, &r), CORE_FIRST_REPLY);
    ck_assert_int_eq(r.status, STORE_ERR);
    /* OK: the key was new, allowed as tb_exact answers a new key */
    const char *ok = "OK";
    size_t okl = 2;
    struct store_result set = {.status = STORE_OK, .nstr = 1, .str = &ok, .str_len = &okl};
    ck_assert_int_eq(core_first_reply(j, &set, 1765000000000000ull, &r), CORE_FIRST_REPLY);
    ck_assert_int_eq(r.v[EXACT_R_TIME_MS], 1765000000000); /* the wall clock it was given */
    ck_assert_ptr_null(core_reply(&w.c, j, &r, T0 + MS));
    ck_assert_int_eq(w.done, 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.res.remaining, 2);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_EXACT);
    ck_assert_int_eq(hit(&w, 0)->out.degraded, 0);
    world_close(&w);
}
END_TEST

/* A rule's Redis keys from its precomputed head (ruleset_redis_heads, as
 * the agent runs) are the bytes core_redis_key assembles: every algorithm,
 * a client key holding '{' (behind the slot fence), and one too long for
 * the buffer on the stack. */
START_TEST(redis_key_heads_same_bytes)
{
    static const char *const rules =
        "[rule:tb]\nkey = key\nrate = 10/1s\n\n"
        "[rule:fixed]\nkey = key\nrate = 10/1s\nalgorithm = fixed-window\n\n"
        "[rule:sliding]\nkey = key\nrate = 10/1s\nalgorithm = sliding-window\n\n"
        "[rule:conc]\nkey = key\nalgorithm = concurrency\nlimit = 3\nrelease = done\n";
    static char long_key[1500];
    const char *keys[] = {"k", "a{b}c", "{", long_key};
    struct world w;

    memset(long_key, 'x', sizeof(long_key) - 1);
    world_open(&w, rules, 1, 1);
    ck_assert_uint_eq(w.rs->cfg->nrules, 4);
    for (size_t ki = 0; ki < sizeof(keys) / sizeof(*keys); ki++) {
        const char *kv[] = {"key", keys[ki]};
        uint8_t buf[4096];
        size_t len = rt_payload(buf, sizeof(buf), "check", kv, 1);
        struct hit_keys a, b;

        ck_assert_int_eq(rules_match(w.rs, buf, len, &w.req.ev), 0);
        ck_assert_uint_eq(w.req.ev.nhits, 4);
        for (size_t i = 0; i < w.req.ev.nhits; i++) {
            free(w.rs->redis_heads);
            w.rs->redis_heads = NULL;
            core_hit_keys(&w.c, &w.req, i, T0, &a);
            ck_assert_int_eq(ruleset_redis_heads(w.rs, "rl:"), 0);
            core_hit_keys(&w.c, &w.req, i, T0, &b);
            ck_assert_ptr_nonnull(a.redis);
            ck_assert_uint_gt(a.redis_len, 4);
            ck_assert_uint_eq(a.redis_len, b.redis_len);
            ck_assert_int_eq(memcmp(a.redis, b.redis, a.redis_len), 0);
            if (ki == 1 && i == 0)
                ck_assert_int_eq(memcmp(b.redis, "rl:t2:tb:{}a{b}c", b.redis_len), 0);
            core_hit_keys_free(&a);
            core_hit_keys_free(&b);
        }
        rules_eval_free(&w.req.ev);
    }
    world_close(&w);
}
END_TEST

START_TEST(hot_lease_then_negative_cache)
{
    struct world w;

    world_open(&w, "[rule:a]\nkey = key\nrate = 10000/1s\nburst = 1000\n", 1, 0);
    ck_assert_int_eq(decide_key(&w, "k", T0, 1), -1);
    struct rjob *j = next_job(&w);
    ck_assert_int_eq(j->kind, RJOB_LEASE);
    ck_assert_int_eq(j->lj->kind, LEASE_JOB_CLAIM);
    struct script_args a;
    ck_assert_int_eq(core_job_args(j, "agent", 1000, 0, &a), SCRIPT_TB_CLAIM);
    j->lj->sent_us = T0;
    /* granted 5, held for 1 s */
    const int64_t claim[CLAIM_R_COUNT] = {5, 995, 5, 1, 0, 5, 1000, 5, 0, 0};
    ck_assert_ptr_null(answer(&w, j, STORE_OK, claim, CLAIM_R_COUNT, T0 + 200));
    ck_assert_int_eq(w.done, 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_LEASE);
    /* hot: the rest of the lease, spent here without a call */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(decide_key(&w, "k", T0 + 300, 1), 1);
        ck_assert(hit(&w, 0)->out.res.allowed);
        ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_LEASE);
        ck_assert_ptr_null(w.jobs.head);
    }
    /* empty: the next claim finds Redis' bucket empty too */
    ck_assert_int_eq(decide_key(&w, "k", T0 + 400, 1), -1);
    j = next_job(&w);
    ck_assert_int_eq(j->lj->kind, LEASE_JOB_CLAIM);
    j->lj->sent_us = T0 + 400;
    const int64_t empty[CLAIM_R_COUNT] = {0, 0, 5, 1, 500, 500, 0, 0, 0, 0};
    ck_assert_ptr_null(answer(&w, j, STORE_OK, empty, CLAIM_R_COUNT, T0 + 450));
    ck_assert_int_eq(w.done, 2);
    ck_assert(!hit(&w, 0)->out.res.allowed);
    /* the negative cache: denied here until the retry, no call */
    ck_assert_int_eq(decide_key(&w, "k", T0 + 500, 1), 1);
    ck_assert(!hit(&w, 0)->out.res.allowed);
    ck_assert_uint_gt(hit(&w, 0)->out.res.retry_us, 0);
    ck_assert_ptr_null(w.jobs.head);
    world_close(&w);
}
END_TEST

/* ---- exact calls, block_for ----------------------------------------------- */

/* A leased key whose requests all cost 3: each is one exact call until the
 * lease's tick, told of the bucket by those calls' replies, claims for the
 * key; then its requests are decided from the lease, with no call. */
START_TEST(cost_gets_a_lease)
{
    struct world w;
    const char *kv[] = {"key", "k", "cost", "3"};
    const int64_t took[EXACT_R_COUNT] = {1, 994, 0, 6, 100000};

    world_open(&w,
               "[rule:a]\nkey = key\nrate = 10000/1s\nburst = 1000\ncost = arg:cost\n"
               "max_cost = 10\n",
               1, 1);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(decide(&w, kv, 2, T0 + (uint64_t)i * MS, 1), -1);
        struct rjob *j = next_job(&w);
        ck_assert_int_eq(j->kind, RJOB_EXACT); /* the lease holds nothing */
        ck_assert_uint_eq(j->cost, 3);
        ck_assert_int_eq(j->leased, 1);
        ck_assert_ptr_null(
            answer(&w, j, STORE_OK, took, EXACT_R_COUNT, T0 + (uint64_t)i * MS + 200));
        ck_assert(hit(&w, 0)->out.res.allowed);
    }
    /* the tick: a busy key the exact replies told of, holding nothing */
    struct lease_job *lj = NULL;
    lease_tick(w.c.leases, T0 + 100 * MS, 1, &lj);
    ck_assert_ptr_nonnull(lj);
    ck_assert_int_eq(lj->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_ge(lj->want, 3);
    lj->sent_us = T0 + 100 * MS;
    const int64_t claim[CLAIM_R_COUNT] = {12, 982, 12, 1, 0, 12, 1000, 12, 0, 0};
    ck_assert_ptr_null(
        answer(&w, core_lease_rjob(lj), STORE_OK, claim, CLAIM_R_COUNT, T0 + 100 * MS + 200));
    for (int i = 0; i < 4; i++) { /* 12 tokens: four requests of 3, no call */
        ck_assert_int_eq(decide(&w, kv, 2, T0 + 101 * MS, 1), 1);
        ck_assert(hit(&w, 0)->out.res.allowed);
        ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_LEASE);
        if (w.jobs.head) { /* at most a top-up ahead of need, never an exact call */
            struct rjob *j = next_job(&w);
            ck_assert_int_eq(j->kind, RJOB_LEASE);
            ck_assert_int_eq(j->lj->kind, LEASE_JOB_CLAIM);
            j->lj->sent_us = T0 + 101 * MS;
            const int64_t none[CLAIM_R_COUNT] = {0, 982, 12, 1, 0, 12, 1000, 12, 0, 0};
            ck_assert_ptr_null(answer(&w, j, STORE_OK, none, CLAIM_R_COUNT, T0 + 101 * MS));
        }
    }
    world_close(&w);
}
END_TEST

START_TEST(exact_block_for)
{
    struct world w;

    world_open(&w, "[rule:a]\nkey = key\nrate = 60/1m\nburst = 1\nblock_for = 3s\nlease = off\n", 1,
               1);
    ck_assert_int_eq(decide_key(&w, "k", T0, 1), -1);
    struct rjob *j = next_job(&w);
    ck_assert_int_eq(j->kind, RJOB_EXACT);
    ck_assert_uint_eq(j->block_ms, 3000);
    ck_assert_uint_eq(j->cost, 1);
    ck_assert_int_eq(memcmp(j->key, "rl:t2:a:k", j->keylen), 0);
    struct script_args a;
    ck_assert_int_eq(core_job_args(j, "agent", 1000, 0, &a), SCRIPT_TB_EXACT);
    /* denied, blocked for 3 s */
    const int64_t denied[EXACT_R_COUNT] = {0, 0, 3000, 3000, 100000};
    ck_assert_ptr_null(answer(&w, j, STORE_OK, denied, EXACT_R_COUNT, T0 + MS));
    ck_assert_int_eq(w.done, 1);
    ck_assert(!hit(&w, 0)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.res.retry_us, 3 * S);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_NONE);
    world_close(&w);
}
END_TEST

/* ---- the fallback --------------------------------------------------------- */

START_TEST(fallback_down_failed_timeout)
{
    struct world w;

    world_open(&w,
               "[rule:a]\nkey = key\nrate = 10/1m\nburst = 4\nlease = off\n"
               "[rule:c]\nkey = key\nrate = 10/1m\nlease = off\non_redis_down = closed\n",
               1, 1);
    /* Redis down: both at once, a from its backstop, c denied */
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 2);
    ck_assert_ptr_null(w.jobs.head);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_int_eq(hit(&w, 0)->out.degraded, 1);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_BACKSTOP);
    ck_assert(!hit(&w, 1)->out.res.allowed);
    ck_assert_int_eq(hit(&w, 1)->out.degraded, 1);
    ck_assert_uint_eq(hit(&w, 1)->out.res.retry_us, 1 * S);
    /* up: two calls; one fails, one times out, then answers late */
    ck_assert_int_eq(decide_key(&w, "k", T0 + MS, 1), -1);
    struct rjob *ja = next_job(&w), *jc = next_job(&w);
    ck_assert_ptr_null(answer(&w, ja, STORE_DOWN, NULL, 0, T0 + 2 * MS));
    ck_assert_int_eq(w.done, 0);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_BACKSTOP);
    core_timeout(&w.c, jc, T0 + 3 * MS);
    ck_assert_int_eq(w.done, 1);
    ck_assert_ptr_null(jc->w);
    ck_assert_int_eq(hit(&w, 1)->out.degraded, 1);
    const int64_t late[EXACT_R_COUNT] = {1, 9, 0, 6000, 100000};
    ck_assert_ptr_null(answer(&w, jc, STORE_OK, late, EXACT_R_COUNT, T0 + 4 * MS));
    ck_assert_int_eq(w.done, 1); /* answered once */
    world_close(&w);
}
END_TEST

/* ---- concurrency ---------------------------------------------------------- */

static const char *const cc_rules = "[rule:cc]\nkey = key\nalgorithm = concurrency\nlimit = 1\n"
                                    "release = release-slot\nmax_hold = 10s\n";

START_TEST(concurrency_slots)
{
    struct world w;

    /* standalone: one slot, the second request denied */
    world_open(&w, cc_rules, 0, 0);
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_int_eq(hit(&w, 0)->slot_src, RULES_SLOT_LOCAL);
    ck_assert_uint_ne(hit(&w, 0)->slot_id, 0);
    ck_assert_int_eq(decide_key(&w, "k", T0 + 1, 0), 1);
    ck_assert(!hit(&w, 0)->out.res.allowed);
    world_close(&w);

    /* Redis: a cc_acquire, its slot Redis'; one answered after its timeout
     * goes back at once as a release */
    world_open(&w, cc_rules, 1, 1);
    ck_assert_int_eq(decide_key(&w, "k", T0, 1), -1);
    struct rjob *j = next_job(&w);
    ck_assert_int_eq(j->kind, RJOB_CC);
    uint64_t id = j->slot_id;
    const int64_t ok[CC_R_COUNT] = {1, 0, 0, 0, 100000, 0};
    ck_assert_ptr_null(answer(&w, j, STORE_OK, ok, CC_R_COUNT, T0 + MS));
    ck_assert_int_eq(w.done, 1);
    ck_assert(hit(&w, 0)->out.res.allowed);
    ck_assert_int_eq(hit(&w, 0)->slot_src, RULES_SLOT_REDIS);
    ck_assert_uint_eq(hit(&w, 0)->slot_id, id);
    ck_assert_int_eq(decide_key(&w, "k", T0 + 2 * MS, 1), -1);
    j = next_job(&w);
    core_timeout(&w.c, j, T0 + 3 * MS); /* the local share decides */
    ck_assert_int_eq(w.done, 2);
    ck_assert_int_eq(hit(&w, 0)->out.degraded, 1);
    ck_assert_int_eq(hit(&w, 0)->slot_src, RULES_SLOT_LOCAL);
    struct rjob *rel = answer(&w, j, STORE_OK, ok, CC_R_COUNT, T0 + 4 * MS);
    ck_assert_ptr_eq(rel, j);
    ck_assert_int_eq(rel->kind, RJOB_CC_RELEASE);
    const int64_t released[CC_RELEASE_R_COUNT] = {1, 0};
    ck_assert_ptr_null(answer(&w, rel, STORE_OK, released, CC_RELEASE_R_COUNT, T0 + 5 * MS));
    world_close(&w);
}
END_TEST

/* ---- all-or-nothing ------------------------------------------------------- */

START_TEST(all_or_nothing_local)
{
    struct world w;

    world_open(&w,
               "[agent]\ncharge = all-or-nothing\n"
               "[rule:a]\nkey = key\nrate = 10/1m\nburst = 5\n"
               "[rule:b]\nkey = key\nrate = 10/1m\nburst = 1\n",
               0, 0);
    ck_assert_int_eq(decide_key(&w, "k", T0, 0), 2);
    ck_assert(hit(&w, 0)->out.res.allowed && hit(&w, 1)->out.res.allowed);
    core_settle(&w.c, &w.req, T0, 0, &w.jobs);
    ck_assert_uint_eq(hit(&w, 0)->out.refunded, 0); /* allowed: kept */
    /* b blocks: a's token goes back, a stays at 4 */
    ck_assert_int_eq(decide_key(&w, "k", T0 + 1, 0), 2);
    ck_assert(hit(&w, 0)->out.res.allowed && !hit(&w, 1)->out.res.allowed);
    ck_assert_uint_eq(hit(&w, 0)->out.res.remaining, 3);
    core_settle(&w.c, &w.req, T0 + 1, 0, &w.jobs);
    ck_assert_uint_eq(hit(&w, 0)->out.refunded, 1);
    ck_assert_uint_eq(hit(&w, 0)->out.res.remaining, 4);
    ck_assert_int_eq(hit(&w, 0)->out.charged, RULE_CHARGED_NONE);
    ck_assert_ptr_null(w.jobs.head);
    world_close(&w);
}
END_TEST

START_TEST(all_or_nothing_redis)
{
    struct world w;

    world_open(&w,
               "[agent]\ncharge = all-or-nothing\n"
               "[rule:a]\nkey = key\nrate = 10/1m\nburst = 5\nlease = off\n"
               "[rule:b]\nkey = key\nrate = 10/1m\nburst = 1\nlease = off\n",
               1, 1);
    ck_assert_int_eq(decide_key(&w, "k", T0, 1), -1);
    struct rjob *ja = next_job(&w), *jb = next_job(&w);
    const int64_t yes[EXACT_R_COUNT] = {1, 4, 0, 6000, 123456};
    const int64_t no[EXACT_R_COUNT] = {0, 0, 6000, 6000, 123456};
    ck_assert_ptr_null(answer(&w, ja, STORE_OK, yes, EXACT_R_COUNT, T0 + MS));
    ck_assert_ptr_null(answer(&w, jb, STORE_OK, no, EXACT_R_COUNT, T0 + MS));
    ck_assert_int_eq(w.done, 1);
    /* b blocked: a's token goes back to Redis with a refund call */
    core_settle(&w.c, &w.req, T0 + 2 * MS, 1, &w.jobs);
    struct rjob *r = next_job(&w);
    ck_assert_int_eq(r->kind, RJOB_REFUND);
    ck_assert_uint_eq(r->cost, 1);
    ck_assert_uint_eq(r->taken_ms, 123456);
    ck_assert_int_eq(memcmp(r->key, "rl:t2:a:k", r->keylen), 0);
    ck_assert_uint_eq(hit(&w, 0)->out.res.remaining, 5); /* as if it had not come */
    uint64_t before = atomic_load(&w.rs->metrics[0]->refunded);
    const int64_t given[REFUND_R_COUNT] = {1, 5};
    ck_assert_ptr_null(answer(&w, r, STORE_OK, given, REFUND_R_COUNT, T0 + 3 * MS));
    ck_assert_uint_eq(atomic_load(&w.rs->metrics[0]->refunded), before + 1);
    world_close(&w);
}
END_TEST

/* A scope = global rule's calls (script_fed_arg): the limit negated, and the
 * region's reserve after the optional arguments, those before it sent as
 * "none" (lua/README.md "The reserve"); without a reserve, nothing added. */
static int arg_is(const struct script_args *a, int i, const char *v)
{
    return i < a->argc && a->argvlen[i] == strlen(v) && memcmp(a->argv[i], v, a->argvlen[i]) == 0;
}

START_TEST(fed_args_carry_the_reserve)
{
    struct script_args a;
    struct lease_job lj = {.kind = LEASE_JOB_CLAIM, .algorithm = BUCKET_TOKEN_BUCKET, .limit = 20,
                           .period_ms = 1000, .burst = 10, .fed = 1, .want = 2};
    enum store_script s = script_lease_args(&lj, "A", 1000, &a);
    script_fed_arg(&a, s, 0);
    ck_assert_int_eq(a.argc, CLAIM_ARGC);
    ck_assert(arg_is(&a, CLAIM_ARG_LIMIT, "-20"));
    s = script_lease_args(&lj, "A", 1000, &a);
    script_fed_arg(&a, s, 3);
    ck_assert_int_eq(a.argc, CLAIM_ARG_RESERVE + 1);
    ck_assert(arg_is(&a, CLAIM_ARG_LIMIT, "-20") && arg_is(&a, CLAIM_ARG_RATE_PPM, "") &&
              arg_is(&a, CLAIM_ARG_DEMAND_PPM, "") && arg_is(&a, CLAIM_ARG_BLOCK_MS, "") &&
              arg_is(&a, CLAIM_ARG_RESERVE, "3"));
    lj.block_ms = 5000; /* a block sent stays */
    s = script_lease_args(&lj, "A", 1000, &a);
    script_block_arg(&a, s, lj.block_ms);
    script_fed_arg(&a, s, 3);
    ck_assert(arg_is(&a, CLAIM_ARG_BLOCK_MS, "5000") && arg_is(&a, CLAIM_ARG_RESERVE, "3"));
    lj.kind = LEASE_JOB_RETURN;
    s = script_lease_args(&lj, "A", 1000, &a);
    script_fed_arg(&a, s, 3);
    ck_assert_int_eq(s, SCRIPT_TB_RETURN);
    ck_assert_int_eq(a.argc, RETURN_ARG_RESERVE + 1);
    ck_assert(arg_is(&a, RETURN_ARG_LIMIT, "-20") && arg_is(&a, RETURN_ARG_RESERVE, "3"));
    s = script_exact_args(BUCKET_TOKEN_BUCKET, 20, 1000, 10, 1, &a); /* a cost of 1 sends no n */
    script_fed_arg(&a, s, 3);
    ck_assert_int_eq(a.argc, EXACT_ARG_RESERVE + 1);
    ck_assert(arg_is(&a, EXACT_ARG_LIMIT, "-20") && arg_is(&a, EXACT_ARG_N, "1") &&
              arg_is(&a, EXACT_ARG_BLOCK_MS, "0") && arg_is(&a, EXACT_ARG_RESERVE, "3"));
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, standalone_cost, standalone_fixed_window_wall, cold_first_set,
              redis_key_heads_same_bytes, hot_lease_then_negative_cache, cost_gets_a_lease,
              exact_block_for, fallback_down_failed_timeout, concurrency_slots,
              all_or_nothing_local, all_or_nothing_redis, fed_args_carry_the_reserve);
    return check_run_case("limiter_core", tc);
}
