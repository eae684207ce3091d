/* script.h - the contract with the Redis scripts of lua/: which scripts
 * there are, and the position of every argument they take and of every value
 * they answer. What the values mean is in lua/README.md and each script's
 * header comment; the C code reaches them only through these names
 * (argv[CLAIM_ARG_WANT], v[CLAIM_R_MINE]). tests/test_scripts.c calls every
 * script through them and checks each reply position against its name.
 *
 * Pure: constants only (no hiredis), so the lease module includes it too.
 *
 * The token bucket (tb_*) and sliding window (sw_*) script of one job take
 * and answer the same layout; they differ in meaning only:
 *   - burst: the sw_* scripts ignore it (it is passed anyway);
 *   - remaining: tb floor(t), sw floor(limit - estimate);
 *   - held, holders: sw counts only the leases of the current window;
 *   - lease_ms: tb answers ttl_ms, sw min(ttl_ms, ms left in the window)
 *     rounded down, which is 0 in a window's last ms although mine > 0.
 */
#ifndef STORE_SCRIPT_H
#define STORE_SCRIPT_H

/* The scripts, in the order the store loads them. */
enum store_script {
    SCRIPT_TB_CLAIM = 0,
    SCRIPT_TB_RETURN,
    SCRIPT_TB_EXACT,
    SCRIPT_SW_CLAIM,
    SCRIPT_SW_RETURN,
    SCRIPT_SW_EXACT,
    SCRIPT_COUNT,
};

/* ARGV of *_claim (ARGV[i + 1] in Lua): settle the caller's lease, then grant
 * more. Every number is a decimal integer. */
enum script_claim_arg {
    CLAIM_ARG_AGENT = 0, /* the agent id: non-empty, the lease's owner */
    CLAIM_ARG_LIMIT,     /* N of the rule's rate N/period (>= 1) */
    CLAIM_ARG_PERIOD_MS, /* period of the rate (>= 1) */
    CLAIM_ARG_BURST,     /* token bucket capacity (>= 0); sw: ignored */
    CLAIM_ARG_WANT,      /* tokens asked for (>= 0; 0 = only settle the report) */
    CLAIM_ARG_USED,      /* spent from the lease since the last report */
    CLAIM_ARG_RETURNED,  /* unspent tokens given back */
    CLAIM_ARG_TTL_MS,    /* the lease lifetime (>= 1) */
    CLAIM_ARGC,
};

/* ARGV of *_return: settle and close the caller's lease. The first four are
 * those of *_claim. */
enum script_return_arg {
    RETURN_ARG_AGENT = 0,
    RETURN_ARG_LIMIT,
    RETURN_ARG_PERIOD_MS,
    RETURN_ARG_BURST,
    RETURN_ARG_USED, /* spent since the last report: the rest goes back */
    RETURN_ARGC,
};

/* ARGV of *_exact: one decision, no lease. */
enum script_exact_arg {
    EXACT_ARG_LIMIT = 0,
    EXACT_ARG_PERIOD_MS,
    EXACT_ARG_BURST,
    EXACT_ARG_N,              /* optional: the request's cost, default 1 */
    EXACT_ARGC_MAX,           /* with the cost */
    EXACT_ARGC = EXACT_ARG_N, /* what the agent sends: every request costs 1 */
};

/* Reply of *_claim, and of *_return, which answers granted = lease_ms =
 * mine = 0. */
enum script_claim_reply {
    CLAIM_R_GRANTED = 0, /* added to the caller's lease (<= want) */
    CLAIM_R_REMAINING,   /* whole tokens left in Redis after the call */
    CLAIM_R_HELD,        /* tokens held by all leases, the caller's included */
    CLAIM_R_HOLDERS,     /* agents holding a lease, the caller included */
    CLAIM_R_RETRY_MS,    /* 0 when remaining >= 1, else until one is expected */
    CLAIM_R_RESET_MS,    /* until the bucket is full (the window empty) again */
    CLAIM_R_LEASE_MS,    /* how long the caller may spend its lease (0: none) */
    CLAIM_R_MINE,        /* tokens the caller now holds in Redis */
    CLAIM_R_COUNT,
};

/* Reply of *_exact. */
enum script_exact_reply {
    EXACT_R_ALLOWED = 0, /* 1 when n was taken, 0 when nothing was */
    EXACT_R_REMAINING,   /* as CLAIM_R_REMAINING */
    EXACT_R_RETRY_MS,    /* 0 when another request of n would pass now */
    EXACT_R_RESET_MS,    /* as CLAIM_R_RESET_MS */
    EXACT_R_COUNT,
};

#endif
