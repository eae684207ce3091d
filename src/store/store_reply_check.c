/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_check.c - is a script's reply one it can give (see
 * store_reply_check.h). */
#include "store_reply_check.h"

#include <stdlib.h>

#include "script.h"

/* The values each script answers (script.h). */
static int reply_count(int script)
{
    switch (script) {
    case SCRIPT_TB_CLAIM:
    case SCRIPT_SW_CLAIM:
    case SCRIPT_TB_RETURN:
    case SCRIPT_SW_RETURN:
        return CLAIM_R_COUNT;
    case SCRIPT_TB_EXACT:
    case SCRIPT_SW_EXACT:
        return EXACT_R_COUNT;
    case SCRIPT_TB_RESET:
    case SCRIPT_SW_RESET:
        return RESET_R_COUNT;
    case SCRIPT_TB_REFUND:
    case SCRIPT_SW_REFUND:
        return REFUND_R_COUNT;
    case SCRIPT_CC_ACQUIRE:
        return CC_R_COUNT;
    case SCRIPT_CC_RELEASE:
        return CC_RELEASE_R_COUNT;
    case SCRIPT_CC_RESET:
        return CC_RESET_R_COUNT;
    case SCRIPT_TB_POOL:
        return POOL_R_COUNT;
    case SCRIPT_G_LOCK:
        return LOCK_R_COUNT;
    default:
        return -1;
    }
}

/* ARGV[i] as a number; absent or empty: 0 (as the scripts read it). */
static long long arg(int argc, char *const *argv, int i)
{
    return i < argc && argv[i] ? strtoll(argv[i], NULL, 10) : 0;
}

const char *store_reply_check(int script, const struct store_result *res, size_t elements, int argc,
                              char *const *argv)
{
    const int64_t *v = res->v;
    int want = reply_count(script);

    if (want < 0)
        return NULL; /* not a script of ours: nothing to hold it to */
    if (elements < (size_t)want || res->n < want)
        return "fewer values than the script answers";
    if (elements > (size_t)want)
        return "more values than the script answers";
    /* every script answers counts and times: none is ever negative (the
     * scripts clamp them), but cc_reset's times, which may be 0 or past, and
     * tb_pool's moved, negative for a withdrawal */
    for (int i = 0; i < res->n; i++) {
        if (script == SCRIPT_CC_RESET && i != CC_RESET_R_HELD)
            continue;
        if (script == SCRIPT_TB_POOL && i == POOL_R_MOVED)
            continue;
        if (v[i] < 0)
            return "a negative count or time";
    }
    switch (script) {
    case SCRIPT_TB_CLAIM:
    case SCRIPT_SW_CLAIM:
        /* a token lease gets at most what it asked; a rate lease (a token
         * bucket's claim with a share) grows its slice instead */
        if (arg(argc, argv, CLAIM_ARG_RATE_PPM) <= 0 &&
            v[CLAIM_R_GRANTED] > arg(argc, argv, CLAIM_ARG_WANT))
            return "granted above want";
        if (v[CLAIM_R_SHARE_PPM] > 1000000)
            return "a share above the whole rate";
        break;
    case SCRIPT_TB_RETURN:
    case SCRIPT_SW_RETURN:
        if (v[CLAIM_R_GRANTED] != 0 || v[CLAIM_R_MINE] != 0)
            return "a return that grants";
        break;
    case SCRIPT_TB_EXACT:
    case SCRIPT_SW_EXACT:
    case SCRIPT_CC_ACQUIRE:
        if (v[EXACT_R_ALLOWED] > 1)
            return "allowed neither 0 nor 1";
        if (v[EXACT_R_TIME_MS] == 0)
            return "no time";
        break;
    case SCRIPT_TB_REFUND:
    case SCRIPT_SW_REFUND:
        if (v[REFUND_R_GIVEN] > arg(argc, argv, REFUND_ARG_N))
            return "more given back than taken";
        break;
    case SCRIPT_CC_RELEASE:
        if (v[CC_RELEASE_R_RELEASED] > 1)
            return "released neither 0 nor 1";
        break;
    case SCRIPT_TB_POOL: {
        /* moved: within amt, on its side of 0 */
        long long amt = arg(argc, argv, POOL_ARG_AMOUNT);
        if (amt >= 0 ? v[POOL_R_MOVED] < 0 || v[POOL_R_MOVED] > amt
                     : v[POOL_R_MOVED] > 0 || v[POOL_R_MOVED] < amt)
            return "moved more than asked";
        break;
    }
    case SCRIPT_G_LOCK:
        if (v[LOCK_R_OK] > 1)
            return "ok neither 0 nor 1";
        break;
    default:
        break;
    }
    return NULL;
}
