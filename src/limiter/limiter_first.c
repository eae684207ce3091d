/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_first.c - a token bucket's cold decision on a key this agent has no
 * record of, made by ONE plain pipelined Redis command instead of a tb_exact
 * script call: SET key "2 t px" NX PX px, the state a new full bucket has
 * after this decision (lua/README.md, "2 t px"). Most cold keys on a large key
 * space are new to Redis too, and a plain SET costs Redis about a third of a
 * script operation (no Lua: the script's floor in a batch is the larger part
 * of a cold decision's cost). A key that is there after all (a string or a
 * hash) is left alone by NX and gets the normal tb_exact call: a second round
 * trip, on the few keys the guess missed. Part of the core: it says what
 * to send and what the reply means; the bridge (limiter.c) sends it. */
#include "limiter/limiter_first.h"

#include <string.h>

#include "core/util.h"
#include "lease/lease.h"
#include "limits/bucket.h"
#include "metrics/metrics.h"
#include "store/script.h"
#include "store/store_result.h"

/* The rule's token bucket as the bucket module takes it. */
static struct bucket_params first_params(uint64_t burst, uint64_t limit, uint64_t period_ms)
{
    struct bucket_params p = {.algorithm = BUCKET_TOKEN_BUCKET,
                              .limit = limit,
                              .period_us = period_ms * 1000,
                              .burst = burst,
                              .period_ms = period_ms};
    return p;
}

/* The SET's reply. OK: the key was new and holds the state sent: allowed,
 * answered as tb_exact answers a new key. Nil: the key was there (a string
 * or a hash) and NX wrote nothing: tb_exact decides it. Anything else failed,
 * as a failed script call does. (The SET asks for no GET of the old value:
 * nothing reads it, and the reply of a new key is then 5 bytes, not the
 * old value's bulk; Redis spends less on the command. A WRONGTYPE, which
 * only SET NX GET on a hash gives, is still read as "there".) */
enum core_first_verdict core_first_reply(const struct rjob *j, const struct store_result *res,
                                         uint64_t wall_us, struct store_result *out)
{
    const struct lease_job *lj = j->lj;

    if ((res->status == STORE_OK && res->nstr == 0 && res->n == 0) ||
        (res->status == STORE_ERR && res->err && !strncmp(res->err, "WRONGTYPE", 9)))
        return CORE_FIRST_EVAL;
    if (res->status != STORE_OK || res->nstr != 1 || res->n != 0 || res->str_len[0] != 2 ||
        memcmp(res->str[0], "OK", 2) != 0) {
        *out = *res;
        if (out->status == STORE_OK) {
            out->status = STORE_ERR;
            out->err = "unexpected reply to SET";
        }
        return CORE_FIRST_REPLY;
    }
    /* Cost 1 from a full bucket b: t = b - 1 left, one token to refill. */
    const struct bucket_params p = first_params(lj->burst, lj->limit, lj->period_ms);
    uint64_t b = lj->burst, t = b - 1;
    struct store_result r = {.status = STORE_OK, .n = EXACT_R_COUNT, .latency_us = res->latency_us};
    r.v[EXACT_R_ALLOWED] = 1;
    r.v[EXACT_R_REMAINING] = (int64_t)t;
    r.v[EXACT_R_RETRY_MS] = (int64_t)bucket_tb_wait_ms(&p, 1.0 - (double)t);
    r.v[EXACT_R_RESET_MS] = (int64_t)bucket_tb_wait_ms(&p, (double)(b - t));
    /* Redis' time is not known here: the agent's clock stands in. Only a
     * refund reads time_ms back (as taken_ms), and a token bucket's refund
     * ignores it (tb_refund.lua ARGV[5]). */
    r.v[EXACT_R_TIME_MS] = (int64_t)(wall_us / 1000);
    METRIC_INC(redis_first_sets);
    *out = r;
    return CORE_FIRST_REPLY;
}

/* The SET's value and PX for a rule's parameters. */
struct first_args {
    uint64_t burst, limit, period_ms; /* burst 0: none yet (never a valid one) */
    char val[64], px[24];
    size_t vn, pn;
};

static void first_args_make(struct first_args *fa, uint64_t burst, uint64_t limit,
                            uint64_t period_ms)
{
    /* (util_u64_dec, not snprintf: once per rule now, but cheap anyway) */
    const struct bucket_params p = first_params(burst, limit, period_ms);
    /* tb_exact's TTL: until the bucket is full again, and a second more */
    uint64_t t = burst - 1, ttl = bucket_tb_wait_ms(&p, 1.0) + 1000;

    fa->burst = burst;
    fa->limit = limit;
    fa->period_ms = period_ms;
    fa->pn = util_u64_dec(fa->px, ttl);
    memcpy(fa->val, "2 ", 2);
    fa->vn = 2 + util_u64_dec(fa->val + 2, t);
    fa->val[fa->vn++] = ' ';
    memcpy(fa->val + fa->vn, fa->px, fa->pn);
    fa->vn += fa->pn;
}

int core_first_args(const struct rjob *j, const char *argv[CORE_FIRST_ARGC],
                    size_t argvlen[CORE_FIRST_ARGC])
{
    const struct lease_job *lj = j->lj;

    /* a lease job's exact decision: cost 1, which a burst >= 1 holds */
    /* (a fed bucket, scope = global, starts empty: never a plain SET) */
    if (j->kind != RJOB_LEASE || lj->kind != LEASE_JOB_EXACT || !lj->first || lj->fed ||
        lj->algorithm != BUCKET_TOKEN_BUCKET || lj->burst < 1 || lj->limit < 1 ||
        lj->period_ms < 1 || lj->burst > (uint64_t)1 << 50 || lj->period_ms > (uint64_t)1 << 50)
        return -1;
    /* "2 t px": t = b - 1; px = ceil((b - t) / rate_ms) + 1000, tb_exact's TTL
     * for that state, in exact integers (rate_ms = limit / period_ms). The
     * same for every key of a rule: kept from the last call (one rule is
     * the usual run of new keys), rather than written again per cold key. */
    static _Thread_local struct first_args last;
    struct first_args *fa = &last;
    if (fa->burst != lj->burst || fa->limit != lj->limit || fa->period_ms != lj->period_ms)
        first_args_make(fa, lj->burst, lj->limit, lj->period_ms);
    const char *av[CORE_FIRST_ARGC] = {"SET", lj->key, fa->val, "NX", "PX", fa->px};
    const size_t al[CORE_FIRST_ARGC] = {3, lj->keylen, fa->vn, 2, 2, fa->pn};

    memcpy(argv, av, sizeof(av));
    memcpy(argvlen, al, sizeof(al));
    return 0;
}
