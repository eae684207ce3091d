/* SPDX-License-Identifier: Apache-2.0 */
/* script_args.h - the argument vector of one script call, each argument at
 * its position in script.h: what the agent sends for a lease job or an exact
 * decision. Shared by the agent (limiter.c) and the fleet simulator
 * (src/tools/sim_fleet.c), so that both send the scripts the same ARGV.
 *
 * Pure: formatting only, no Redis. The argv strings point into the struct
 * itself (nums) or at the caller's agent id: valid while both live.
 */
#ifndef STORE_SCRIPT_ARGS_H
#define STORE_SCRIPT_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "lease/lease.h"
#include "store/script.h"

/* The most arguments a script call takes (a claim). */
#define SCRIPT_MAX_ARGC ((int)CLAIM_ARGC_FIXED)

struct script_args {
    int argc;
    const char *argv[SCRIPT_MAX_ARGC];
    size_t argvlen[SCRIPT_MAX_ARGC];
    char nums[SCRIPT_MAX_ARGC][24];
};

/* Fill *a with the ARGV of lease job lj (a claim or a return) sent by the
 * agent named agent with [lease] ttl ttl_ms (a rate lease's claim carries
 * its own, lj->ttl_ms); returns the script to call. */
enum store_script script_lease_args(const struct lease_job *lj, const char *agent, uint64_t ttl_ms,
                                    struct script_args *a);

/* Fill *a with the ARGV of one exact decision of a request costing cost
 * tokens (0: a check) under a rule of algorithm, limit/period_ms and burst;
 * returns the script to call. A cost of 1 sends no EXACT_ARG_N. A fixed
 * window's call also needs script_window_args. */
enum store_script script_exact_args(enum bucket_algorithm algorithm, uint64_t limit,
                                    uint64_t period_ms, uint64_t burst, uint64_t cost,
                                    struct script_args *a);

/* Append the rule's block_for (ms; 0: none, nothing sent) to the ARGV *a
 * holds for script: the claim and exact scripts take it after the optional
 * arguments before it (a token lease's claim sends the rate lease's two
 * empty; an exact call its cost, 1 included). Other scripts take none.
 * script_lease_args() calls it; an exact call's caller too, before
 * script_window_args(). */
void script_block_arg(struct script_args *a, enum store_script script, uint64_t block_ms);

/* Make *a, the ARGV of sw_* script s, a fixed window's call: append the
 * fixed mode and the windows' offset_ms (script.h's *_ARG_WINDOW_MODE),
 * after the optional arguments before them (a claim's rate lease ones and
 * its block empty, an exact call's cost and block, 1 and 0, when not
 * given). Call it last. */
void script_window_args(struct script_args *a, enum store_script s, uint64_t offset_ms);

/* Fill *a with the ARGV of a refund ([agent] charge = all-or-nothing): n
 * tokens that an exact decision took at Redis time taken_ms (its
 * EXACT_R_TIME_MS) go back; returns the script to call (tb_refund /
 * sw_refund). */
enum store_script script_refund_args(enum bucket_algorithm algorithm, uint64_t limit,
                                     uint64_t period_ms, uint64_t burst, uint64_t n,
                                     uint64_t taken_ms, struct script_args *a);

/* A scope = global rule's call (bucket.h, fed): the limit argument of the
 * token bucket's script s (tb_claim, tb_return, tb_exact, tb_refund,
 * tb_reset) made negative, which tells the script its bucket is fed by the
 * region's claimer (lua/README.md), and the region's reserve (what a
 * missing key holds; 0: none, not sent) appended. Other scripts:
 * unchanged. */
void script_fed_arg(struct script_args *a, enum store_script s, uint64_t reserve);

/* cc_acquire's ARGV: take slot id under limit, freed after hold_ms. */
enum store_script script_cc_acquire_args(uint64_t limit, uint64_t hold_ms, uint64_t id,
                                         struct script_args *a);
/* cc_release's ARGV: free slot id. */
enum store_script script_cc_release_args(uint64_t id, struct script_args *a);
/* A slot id as the scripts store it: 16 hex digits (the token's). */
void script_slot_id(uint64_t id, char out[17]);

#endif
