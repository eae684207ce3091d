/* SPDX-License-Identifier: Apache-2.0 */
/* sim_call_args.c - spoa-sim: the script and arguments of the calls the
 * models make (an exact call with its cost, a concurrency acquire or
 * release; a lease job goes as the agent sends it), below sim_fleet_conn.c,
 * which sends them, and sim_cost.c / sim_cc.c, which make them. */
#include "tools/sim_fleet_int.h"

int sim_cost_args(const struct sim *s, const struct lease_job *j, const char *agent,
                  struct script_args *a)
{
    if (!sim_cost_mine(j))
        return script_lease_args(j, agent, s->o->ttl_ms, a);
    if (j->kind >= SIM_CC_ACQUIRE)
        return sim_cc_args(j, a);
    /* limiter_jobs.c's core_job_args for RJOB_EXACT */
    enum store_script sc =
        script_exact_args(j->algorithm, j->limit, j->period_ms, j->burst, j->want, a);
    script_block_arg(a, sc, j->block_ms);
    if (j->algorithm == BUCKET_FIXED_WINDOW)
        script_window_args(a, sc, j->offset_ms);
    return sc;
}

int sim_cc_args(const struct lease_job *j, struct script_args *a)
{
    const struct cc_call *x = (const struct cc_call *)j;

    if (j->kind == SIM_CC_RELEASE)
        return script_cc_release_args(x->id, a);
    return script_cc_acquire_args(j->limit, MAX_HOLD_MS, x->id, a);
}
