/* SPDX-License-Identifier: Apache-2.0 */
/* script_args.c - the argument vector of one script call (moved out of
 * limiter.c so that the simulator builds exactly what the agent sends). */
#include "limiter/script_args.h"

#include <string.h>

#include "core/util.h"

_Static_assert((int)CC_ARGC <= SCRIPT_MAX_ARGC, "cc_acquire's ARGV fits");
_Static_assert((int)RETURN_ARGC_FIXED <= SCRIPT_MAX_ARGC &&
                   (int)EXACT_ARGC_FIXED <= SCRIPT_MAX_ARGC &&
                   (int)RESET_ARGC_FIXED <= SCRIPT_MAX_ARGC &&
                   (int)CLAIM_ARGC_BLOCK <= SCRIPT_MAX_ARGC &&
                   (int)REFUND_ARGC_FIXED <= SCRIPT_MAX_ARGC,
               "a claim takes the most arguments");

static void arg_str(struct script_args *a, int i, const char *s)
{
    a->argv[i] = s;
    a->argvlen[i] = strlen(s);
}

/* The last number written at each position, per thread: a rule's limit,
 * period and burst are the same for every call of its keys (a million cold
 * per-IP keys: three conversions per decision), so they are copied as text
 * instead (a fixed-size copy, cheaper than util_u64_dec). */
static _Thread_local struct {
    uint64_t v;
    size_t len; /* 0: none yet */
    char text[24];
} num_memo[SCRIPT_MAX_ARGC];

/* Not snprintf: one call per argument of every decision sent to Redis. */
static void arg_num(struct script_args *a, int i, uint64_t v)
{
    _Static_assert(sizeof(num_memo[0].text) == sizeof(a->nums[0]), "copied whole");
    if (num_memo[i].len == 0 || num_memo[i].v != v) {
        size_t n = util_u64_dec(num_memo[i].text, v);
        num_memo[i].text[n] = '\0';
        num_memo[i].len = n;
        num_memo[i].v = v;
    }
    memcpy(a->nums[i], num_memo[i].text, sizeof(a->nums[i]));
    a->argvlen[i] = num_memo[i].len;
    a->argv[i] = a->nums[i];
}

void script_fed_arg(struct script_args *a, enum store_script s, uint64_t reserve)
{
    int i = s == SCRIPT_TB_CLAIM    ? CLAIM_ARG_LIMIT
            : s == SCRIPT_TB_RETURN ? RETURN_ARG_LIMIT
            : s == SCRIPT_TB_EXACT  ? EXACT_ARG_LIMIT
            : s == SCRIPT_TB_REFUND ? REFUND_ARG_LIMIT
            : s == SCRIPT_TB_RESET  ? RESET_ARG_LIMIT
                                    : -1;
    if (i < 0 || i >= a->argc || a->argv[i] != a->nums[i] || a->argvlen[i] + 1 >= sizeof(a->nums[i]))
        return;
    memmove(a->nums[i] + 1, a->nums[i], a->argvlen[i] + 1);
    a->nums[i][0] = '-';
    a->argvlen[i]++;
    if (!reserve)
        return;
    /* the reserve goes after the optional arguments before it, sent as
     * "none": empty for a claim's rate lease and block, a cost of 1 and no
     * block for an exact call */
    int at = s == SCRIPT_TB_CLAIM    ? CLAIM_ARG_RESERVE
             : s == SCRIPT_TB_RETURN ? RETURN_ARG_RESERVE
             : s == SCRIPT_TB_EXACT  ? EXACT_ARG_RESERVE
             : s == SCRIPT_TB_REFUND ? REFUND_ARG_RESERVE
                                     : RESET_ARG_RESERVE;
    if (a->argc > at || at >= SCRIPT_MAX_ARGC)
        return;
    for (int j = a->argc; j < at; j++) {
        if (s == SCRIPT_TB_EXACT)
            arg_str(a, j, j == EXACT_ARG_N ? "1" : "0");
        else
            arg_str(a, j, "");
    }
    arg_num(a, at, reserve);
    a->argc = at + 1;
}

enum store_script script_lease_args(const struct lease_job *lj, const char *agent, uint64_t ttl_ms,
                                    struct script_args *a)
{
    int sw = bucket_windowed(lj->algorithm);
    enum store_script s;

    if (lj->kind == LEASE_JOB_EXACT) {
        s = script_exact_args(lj->algorithm, lj->limit, lj->period_ms, lj->burst, 1, a);
        goto done;
    }

    if (lj->kind == LEASE_JOB_CLAIM) {
        a->argc = CLAIM_ARGC;
        arg_str(a, CLAIM_ARG_AGENT, agent);
        arg_num(a, CLAIM_ARG_LIMIT, lj->limit);
        arg_num(a, CLAIM_ARG_PERIOD_MS, lj->period_ms);
        arg_num(a, CLAIM_ARG_BURST, lj->burst);
        arg_num(a, CLAIM_ARG_WANT, lj->want);
        arg_num(a, CLAIM_ARG_USED, lj->used);
        arg_num(a, CLAIM_ARG_RETURNED, lj->returned);
        arg_num(a, CLAIM_ARG_TTL_MS, lj->ttl_ms ? lj->ttl_ms : ttl_ms);
        if (lj->rated && !sw) {
            a->argc = CLAIM_ARGC_RATED;
            arg_num(a, CLAIM_ARG_RATE_PPM, lj->rate_ppm);
            arg_num(a, CLAIM_ARG_DEMAND_PPM, lj->demand_ppm);
        }
        s = sw ? SCRIPT_SW_CLAIM : SCRIPT_TB_CLAIM;
        goto done;
    }
    a->argc = RETURN_ARGC;
    arg_str(a, RETURN_ARG_AGENT, agent);
    arg_num(a, RETURN_ARG_LIMIT, lj->limit);
    arg_num(a, RETURN_ARG_PERIOD_MS, lj->period_ms);
    arg_num(a, RETURN_ARG_BURST, lj->burst);
    arg_num(a, RETURN_ARG_USED, lj->used);
    s = sw ? SCRIPT_SW_RETURN : SCRIPT_TB_RETURN;
done:
    script_block_arg(a, s, lj->block_ms);
    if (lj->algorithm == BUCKET_FIXED_WINDOW)
        script_window_args(a, s, lj->offset_ms);
    return s;
}

enum store_script script_exact_args(enum bucket_algorithm algorithm, uint64_t limit,
                                    uint64_t period_ms, uint64_t burst, uint64_t cost,
                                    struct script_args *a)
{
    a->argc = EXACT_ARGC;
    arg_num(a, EXACT_ARG_LIMIT, limit);
    arg_num(a, EXACT_ARG_PERIOD_MS, period_ms);
    arg_num(a, EXACT_ARG_BURST, burst);
    if (cost != 1) { /* a cost of 1 is the scripts' default: not sent */
        a->argc = EXACT_ARGC_MAX;
        arg_num(a, EXACT_ARG_N, cost);
    }
    return bucket_windowed(algorithm) ? SCRIPT_SW_EXACT : SCRIPT_TB_EXACT;
}

void script_window_args(struct script_args *a, enum store_script s, uint64_t offset_ms)
{
    int mode;

    switch (s) {
    case SCRIPT_SW_CLAIM:
        /* the rate lease's arguments and the block come first: empty, none */
        if (a->argc < CLAIM_ARGC_RATED) {
            arg_str(a, CLAIM_ARG_RATE_PPM, "");
            arg_str(a, CLAIM_ARG_DEMAND_PPM, "");
        }
        if (a->argc < CLAIM_ARGC_BLOCK)
            arg_str(a, CLAIM_ARG_BLOCK_MS, "");
        mode = CLAIM_ARG_WINDOW_MODE;
        break;
    case SCRIPT_SW_EXACT:
        /* the cost and the block come first, now positional: 1, none */
        if (a->argc < EXACT_ARGC_MAX)
            arg_num(a, EXACT_ARG_N, 1);
        if (a->argc < EXACT_ARGC_BLOCK)
            arg_num(a, EXACT_ARG_BLOCK_MS, 0);
        mode = EXACT_ARG_WINDOW_MODE;
        break;
    case SCRIPT_SW_RETURN:
        mode = RETURN_ARG_WINDOW_MODE;
        break;
    case SCRIPT_SW_RESET:
        mode = RESET_ARG_WINDOW_MODE;
        break;
    case SCRIPT_SW_REFUND:
        mode = REFUND_ARG_WINDOW_MODE;
        break;
    default:
        return; /* the token bucket's scripts have no windows */
    }
    arg_num(a, mode, 1);
    arg_num(a, mode + 1, offset_ms);
    a->argc = mode + 2;
}

void script_block_arg(struct script_args *a, enum store_script script, uint64_t block_ms)
{
    if (!block_ms)
        return;
    if (script == SCRIPT_TB_EXACT || script == SCRIPT_SW_EXACT) {
        if (a->argc < EXACT_ARGC_MAX) {
            a->argc = EXACT_ARGC_MAX;
            arg_num(a, EXACT_ARG_N, 1);
        }
        a->argc = EXACT_ARGC_BLOCK;
        arg_num(a, EXACT_ARG_BLOCK_MS, block_ms);
    } else if (script == SCRIPT_TB_CLAIM || script == SCRIPT_SW_CLAIM) {
        if (a->argc < CLAIM_ARGC_RATED) { /* a token lease: no rate lease args */
            arg_str(a, CLAIM_ARG_RATE_PPM, "");
            arg_str(a, CLAIM_ARG_DEMAND_PPM, "");
        }
        a->argc = CLAIM_ARGC_BLOCK;
        arg_num(a, CLAIM_ARG_BLOCK_MS, block_ms);
    }
}

enum store_script script_refund_args(enum bucket_algorithm algorithm, uint64_t limit,
                                     uint64_t period_ms, uint64_t burst, uint64_t n,
                                     uint64_t taken_ms, struct script_args *a)
{
    a->argc = REFUND_ARGC;
    arg_num(a, REFUND_ARG_LIMIT, limit);
    arg_num(a, REFUND_ARG_PERIOD_MS, period_ms);
    arg_num(a, REFUND_ARG_BURST, burst);
    arg_num(a, REFUND_ARG_N, n);
    arg_num(a, REFUND_ARG_TAKEN_MS, taken_ms);
    return bucket_windowed(algorithm) ? SCRIPT_SW_REFUND : SCRIPT_TB_REFUND;
}

void script_slot_id(uint64_t id, char out[17])
{
    static const char hex[] = "0123456789abcdef";

    for (int i = 0; i < 16; i++)
        out[i] = hex[(id >> (4 * (15 - i))) & 15];
    out[16] = '\0';
}

/* The id goes in nums[] as text, like the numbers. */
static void arg_id(struct script_args *a, int i, uint64_t id)
{
    script_slot_id(id, a->nums[i]);
    a->argv[i] = a->nums[i];
    a->argvlen[i] = 16;
}

enum store_script script_cc_acquire_args(uint64_t limit, uint64_t hold_ms, uint64_t id,
                                         struct script_args *a)
{
    a->argc = CC_ARGC;
    arg_num(a, CC_ARG_LIMIT, limit);
    arg_num(a, CC_ARG_HOLD_MS, hold_ms);
    arg_id(a, CC_ARG_ID, id);
    return SCRIPT_CC_ACQUIRE;
}

enum store_script script_cc_release_args(uint64_t id, struct script_args *a)
{
    a->argc = CC_RELEASE_ARGC;
    arg_id(a, CC_RELEASE_ARG_ID, id);
    return SCRIPT_CC_RELEASE;
}
