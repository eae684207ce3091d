/* script_args.c - the argument vector of one script call (moved out of
 * limiter.c so that the simulator builds exactly what the agent sends). */
#include "script_args.h"

#include <string.h>

#include "core/util.h"

_Static_assert((int)RETURN_ARGC <= SCRIPT_MAX_ARGC && (int)EXACT_ARGC_BLOCK <= SCRIPT_MAX_ARGC,
               "a claim takes the most arguments");

static void arg_str(struct script_args *a, int i, const char *s)
{
    a->argv[i] = s;
    a->argvlen[i] = strlen(s);
}

/* Not snprintf: one call per argument of every decision sent to Redis. */
static void arg_num(struct script_args *a, int i, uint64_t v)
{
    a->argvlen[i] = util_u64_dec(a->nums[i], v);
    a->nums[i][a->argvlen[i]] = '\0';
    a->argv[i] = a->nums[i];
}

enum store_script script_lease_args(const struct lease_job *lj, const char *agent,
                                    uint64_t ttl_ms, struct script_args *a)
{
    int sw = lj->algorithm == BUCKET_SLIDING_WINDOW;

    if (lj->kind == LEASE_JOB_EXACT)
        return script_exact_args(lj->algorithm, lj->limit, lj->period_ms, lj->burst, 1, a);

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
        return sw ? SCRIPT_SW_CLAIM : SCRIPT_TB_CLAIM;
    }
    a->argc = RETURN_ARGC;
    arg_str(a, RETURN_ARG_AGENT, agent);
    arg_num(a, RETURN_ARG_LIMIT, lj->limit);
    arg_num(a, RETURN_ARG_PERIOD_MS, lj->period_ms);
    arg_num(a, RETURN_ARG_BURST, lj->burst);
    arg_num(a, RETURN_ARG_USED, lj->used);
    return sw ? SCRIPT_SW_RETURN : SCRIPT_TB_RETURN;
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
    return algorithm == BUCKET_SLIDING_WINDOW ? SCRIPT_SW_EXACT : SCRIPT_TB_EXACT;
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
