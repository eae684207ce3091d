/* SPDX-License-Identifier: Apache-2.0 */
/* test_sim_region.c - spoa-sim --regions (sim_region.c) end to end on small
 * seeded runs: regions decide from their own Redis only (no decision waits
 * for the global one), the fleet keeps b + r*T across every region, the
 * global Redis sees far fewer calls than decisions, and with the global
 * Redis unreachable the backstop shares add up to the rule, never more;
 * restarted empty, one extra b at most; a region's claimer killed, the bound
 * holds by the deadline stored in the regional bucket (sim_region_fail.c). */
#include <check.h>
#include <string.h>

#include "check_util.h"
#include "tools/sim.h"

/* 20/1s burst 10, [lease] defaults, one hot key, as spoa-sim builds it. */
static struct sim_opts opts(unsigned regions, unsigned agents, double rps, double seconds)
{
    struct sim_opts o;
    memset(&o, 0, sizeof(o));
    o.agents = agents;
    o.keys = 1;
    o.zipf = 1.1;
    o.rps = rps;
    o.seconds = seconds;
    o.limit = 20;
    o.period_ms = 1000;
    o.burst = 10;
    o.algorithm = BUCKET_TOKEN_BUCKET;
    o.interval_ms = 100;
    o.ttl_ms = 1000;
    o.max_fraction = 0.1;
    o.rtt_us = 300;
    o.timeout_us = 100000;
    o.seed = 1;
    o.policy = SIM_POLICY_TOKEN;
    o.regions = regions;
    o.global_rtt_us = 40000;
    return o;
}

static void run(const struct sim_opts *o, struct sim_result *r)
{
    char err[256];
    ck_assert_msg(sim_region_check(o, 0, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(sim_run(o, r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(r->redis_errors == 0, "%s", r->redis_error);
    ck_assert_uint_eq(r->fallbacks, 0);
    ck_assert_uint_gt(r->decisions, 0);
}

START_TEST(hot_key_keeps_the_bound)
{
    struct sim_opts o = opts(3, 2, 300, 10);
    struct sim_result r;
    run(&o, &r);
    const struct sim_regions *x = &r.regions;
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
    ck_assert_uint_gt(x->global_calls, 0);
    ck_assert_uint_gt(x->granted, 0);
    /* a claim serves many decisions: well below one global call each */
    ck_assert_msg(x->global_calls_per_decision < 0.2, "%f", x->global_calls_per_decision);
    /* the regions together still spend the rule (it is far over its limit) */
    ck_assert_msg(r.utilisation > 0.8, "utilisation %f", r.utilisation);
    /* decided from the regional Redis: no wait reaches the global RTT */
    ck_assert_msg(r.wait_max_ms < 20.0, "wait max %f ms", r.wait_max_ms);
}
END_TEST

START_TEST(many_keys_keep_the_bound)
{
    struct sim_opts o = opts(2, 3, 2000, 5);
    struct sim_result r;
    o.keys = 50;
    o.limit = 100;
    o.period_ms = 60000;
    o.burst = 20;
    o.global_rtt_us = 100000;
    run(&o, &r);
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
    ck_assert_msg(r.regions.global_calls_per_decision < 0.2, "%f",
                  r.regions.global_calls_per_decision);
    ck_assert_msg(r.wait_max_ms < 50.0, "wait max %f ms", r.wait_max_ms);
}
END_TEST

/* Never reachable: each region feeds itself its backstop share (burst and
 * rate / regions), so together they still keep b + r*T; the regional buckets
 * do not refill by themselves. */
START_TEST(global_never_reachable)
{
    struct sim_opts o = opts(2, 2, 300, 6);
    struct sim_result r;
    o.global_down_start_us = 0;
    o.global_down_len_us = 3600ull * 1000000;
    run(&o, &r);
    ck_assert_uint_eq(r.regions.granted, 0);
    ck_assert_uint_gt(r.regions.global_failed, 0);
    ck_assert_uint_gt(r.regions.backstop_tokens, 0);
    ck_assert_uint_gt(r.admitted, 0);
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
    ck_assert_msg(r.wait_max_ms < 20.0, "wait max %f ms", r.wait_max_ms);
}
END_TEST

/* Down for a while: within the stated allowance (what regions held, and the
 * backstop shares), and back to the global bucket after. */
START_TEST(global_down_within_allowance)
{
    struct sim_opts o = opts(2, 2, 300, 12);
    struct sim_result r;
    o.global_down_start_us = 3000000;
    o.global_down_len_us = 4000000;
    run(&o, &r);
    const struct sim_regions *x = &r.regions;
    ck_assert_uint_gt(x->down_decisions, 0);
    ck_assert_uint_eq(x->down_key_admitted, x->down_admitted); /* one key */
    ck_assert_msg((double)x->down_key_admitted <= x->down_allowance, "%llu > %f",
                  (unsigned long long)x->down_key_admitted, x->down_allowance);
    ck_assert_uint_gt(x->global_failed, 0);
    ck_assert_uint_gt(x->granted, 0);
    ck_assert_msg(x->outside_worst_window_excess <= 1e-9, "outside: excess %f",
                  x->outside_worst_window_excess);
    ck_assert_msg(r.wait_max_ms < 20.0, "wait max %f ms", r.wait_max_ms);
}
END_TEST

/* The global Redis restarted empty (sim_region_fail.c): every global bucket
 * full again while the regions still hold their grants. Those came from the
 * old bucket, whose b + r*T counts them: at most one extra b over any
 * interval, and the restart does over-admit (the model dropped the keys). */
START_TEST(global_restart_within_one_b)
{
    struct sim_opts o = opts(2, 2, 400, 15);
    struct sim_result r;
    o.global_restart = 1;
    o.global_restart_us = 8000000;
    run(&o, &r);
    ck_assert_msg(r.regions.restart_allowance == (double)o.burst, "%f",
                  r.regions.restart_allowance);
    ck_assert_msg(r.worst_window_excess > 1.0, "no over-admission: %f", r.worst_window_excess);
    ck_assert_msg(r.worst_window_excess <= r.regions.restart_allowance + 1e-9, "excess %f > b",
                  r.worst_window_excess);
    ck_assert_int_eq(sim_region_verdict(&o, &r), 0);
    r.worst_window_excess = o.burst + 0.5; /* the verdict says so past one b */
    ck_assert_int_eq(sim_region_verdict(&o, &r), -1);
}
END_TEST

/* Region 1's claimer killed at 3 s, no successor for 20 s (of 30); region 1 holds a
 * standing share of a burst of 100 and spends it slowly, region 0 (the
 * key's home agent) in bursts. With the deadline in the regional bucket the
 * region stops spending when its global lease ends: b + r*T holds; without
 * it, the global bucket gives those tokens out again and the bound breaks. */
static struct sim_opts kill_opts(int no_deadline, uint64_t len_us)
{
    struct sim_opts o = opts(2, 2, 4, 30);
    o.burst = 100;
    o.skew = 0.8;
    o.spike_factor = 50;
    o.spike_len_us = 2000000;
    o.spike_every_us = 10000000;
    o.claimer_kill = 1;
    o.claimer_kill_region = 1;
    o.claimer_kill_at_us = 3000000;
    o.claimer_kill_len_us = len_us;
    o.claimer_no_deadline = no_deadline;
    return o;
}

START_TEST(claimer_kill_deadline_keeps_the_bound)
{
    struct sim_opts o = kill_opts(0, 20000000);
    struct sim_result r;
    run(&o, &r);
    ck_assert_msg(r.regions.takeover_ms >= 20000.0, "%f", r.regions.takeover_ms);
    ck_assert_uint_gt(r.regions.deadline_refused, 0); /* the rule did refuse */
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);

    o = kill_opts(1, 20000000); /* the same without the rule */
    run(&o, &r);
    ck_assert_uint_eq(r.regions.deadline_refused, 0);
    ck_assert_msg(r.worst_window_excess > 1.0, "no excess without the deadline: %f",
                  r.worst_window_excess);
}
END_TEST

/* A successor as soon as the lease lock allows (global ttl - regional ttl -
 * 2 intervals): it comes after the dead claimer's deadline all the same (its
 * last renewal was up to half a global ttl old), so the deadline must live
 * in the regional bucket; with it the bound holds. */
START_TEST(claimer_kill_successor_after_the_lock)
{
    struct sim_opts o = kill_opts(0, 0);
    struct sim_result r;
    o.claimer_kill_at_us = 7000000;
    run(&o, &r);
    ck_assert_msg(r.regions.lock_ttl_ms > 0 &&
                      r.regions.takeover_ms >= r.regions.lock_ttl_ms - o.interval_ms,
                  "lock %f, takeover %f", r.regions.lock_ttl_ms, r.regions.takeover_ms);
    ck_assert_msg(r.regions.takeover_ms < r.regions.global_ttl_ms, "%f", r.regions.takeover_ms);
    ck_assert_uint_gt(r.regions.deadline_refused, 0);
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
}
END_TEST

START_TEST(options_refused)
{
    struct sim_opts o = opts(2, 2, 300, 1);
    char err[256];
    o.algorithm = BUCKET_SLIDING_WINDOW;
    ck_assert_int_eq(sim_region_check(&o, 0, err, sizeof(err)), -1);
    o = opts(2, 2, 300, 1);
    ck_assert_int_eq(sim_region_check(&o, 1, err, sizeof(err)), -1); /* --trace */
    o.stall_len_us = 1000;
    ck_assert_int_eq(sim_region_check(&o, 0, err, sizeof(err)), -1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 120);
    CHECK_ADD(tc, hot_key_keeps_the_bound, many_keys_keep_the_bound, global_never_reachable,
              global_down_within_allowance, global_restart_within_one_b,
              claimer_kill_deadline_keeps_the_bound, claimer_kill_successor_after_the_lock,
              options_refused);
    return check_run_case("sim_region", tc);
}
