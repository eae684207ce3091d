/* SPDX-License-Identifier: Apache-2.0 */
/* test_sim_cost.c - spoa-sim's models of a request's cost, block_for and
 * lease = off (sim_cost.c) end to end on small seeded runs: the fleet keeps
 * b + r*T counted in tokens, the reference takes the costs too (utilisation
 * near 1), exact calls decide as the reference does, and a block denies
 * what the bucket alone would have admitted. */
#include <check.h>
#include <string.h>

#include "check_util.h"
#include "tools/sim.h"

/* 20/1s burst 10, [lease] defaults, one hot key, as spoa-sim builds it. */
static struct sim_opts opts(unsigned agents, double rps, double seconds)
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
    o.models = 1;
    o.cost_min = o.cost_max = 1;
    return o;
}

static void run(const struct sim_opts *o, struct sim_result *r)
{
    char err[256];
    ck_assert_msg(sim_models_check(o, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(sim_run(o, r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(r->redis_errors == 0, "%s", r->redis_error);
    ck_assert_uint_eq(r->fallbacks, 0);
    ck_assert_uint_gt(r->decisions, 0);
}

/* The bound in tokens: a fleet that decided a cost as one token would
 * admit several times b + r*T (worst excess far above 0); a reference that
 * took one would admit several times the fleet (utilisation far below 1). */
static void assert_tokens(const struct sim_result *r)
{
    const struct sim_models *m = &r->models;
    ck_assert_msg(r->worst_window_excess <= 1e-9, "excess %f tokens", r->worst_window_excess);
    ck_assert_msg(r->ref_worst_window_excess <= 1e-9, "reference excess %f",
                  r->ref_worst_window_excess);
    ck_assert_uint_gt(m->admitted_tokens, r->admitted); /* costs over 1 were admitted */
    ck_assert_uint_le(m->admitted_tokens, m->tokens);
    ck_assert_msg(r->utilisation > 0.9 && r->utilisation < 1.1, "utilisation %f", r->utilisation);
}

START_TEST(leased_cost_keeps_the_bound_in_tokens)
{
    struct sim_opts o = opts(4, 400, 10);
    struct sim_result r;
    o.cost_min = 1;
    o.cost_max = 5;
    run(&o, &r);
    assert_tokens(&r);
    /* the costs the lease did not hold went as exact calls */
    ck_assert_uint_gt(r.models.exact_calls, 0);
    ck_assert_uint_lt(r.models.exact_calls, r.decisions);
    /* 10 + 20 x 10 s tokens at most, and about that much (utilisation) */
    ck_assert_uint_le(r.models.admitted_tokens, 10 + 20 * 10 + 1);
}
END_TEST

START_TEST(many_keys_fixed_cost_keeps_the_bound)
{
    struct sim_opts o = opts(5, 3000, 5);
    struct sim_result r;
    o.keys = 200;
    o.limit = 100;
    o.period_ms = 60000;
    o.burst = 20;
    o.cost_min = o.cost_max = 3;
    run(&o, &r);
    assert_tokens(&r);
    ck_assert_uint_eq(r.models.tokens, 3 * r.decisions);
    ck_assert_uint_eq(r.models.admitted_tokens, 3 * r.admitted);
}
END_TEST

START_TEST(exact_cost_decides_as_the_reference)
{
    struct sim_opts o = opts(4, 400, 10);
    struct sim_result r;
    o.cost_min = 2;
    o.cost_max = 4;
    o.lease_off = 1;
    run(&o, &r);
    assert_tokens(&r);
    ck_assert_uint_eq(r.models.exact_calls, r.decisions);
    /* Redis decides rtt/2 after the reference: a few decisions apart at most */
    ck_assert_msg(r.false_denials + r.extra_admits <= r.decisions / 50, "%llu + %llu of %llu",
                  (unsigned long long)r.false_denials, (unsigned long long)r.extra_admits,
                  (unsigned long long)r.decisions);
}
END_TEST

START_TEST(exact_block_denies_as_the_reference)
{
    struct sim_opts o = opts(5, 500, 10);
    struct sim_result none, r;
    o.lease_off = 1;
    run(&o, &none);
    o.block_ms = 1000;
    run(&o, &r);
    const struct sim_models *m = &r.models;
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
    ck_assert_uint_eq(none.models.block_denials, 0);
    ck_assert_uint_gt(m->blocks_started, 0);
    ck_assert_uint_gt(m->block_denials, r.decisions / 2); /* over its limit: mostly blocked */
    ck_assert_uint_eq(m->block_admits, 0);                /* an exact call never passes a block */
    ck_assert_msg(m->block_denials + r.decisions / 100 >= m->ref_block_denials &&
                      m->ref_block_denials + r.decisions / 100 >= m->block_denials,
                  "%llu denied by a block, the reference %llu",
                  (unsigned long long)m->block_denials, (unsigned long long)m->ref_block_denials);
    /* a block denies what the bucket alone admits: 1 s blocked after each
     * empty bucket, about half of 10 + 20 x 10 s */
    ck_assert_msg(4 * r.admitted < 3 * none.admitted, "%llu admitted, %llu without a block",
                  (unsigned long long)r.admitted, (unsigned long long)none.admitted);
    ck_assert_msg(r.utilisation > 0.9 && r.utilisation < 1.1, "utilisation %f", r.utilisation);
}
END_TEST

START_TEST(leased_block_keeps_the_bound)
{
    struct sim_opts o = opts(5, 500, 10);
    struct sim_result r;
    o.block_ms = 1000;
    run(&o, &r);
    const struct sim_models *m = &r.models;
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
    ck_assert_uint_gt(m->block_denials, r.decisions / 2);
    ck_assert_msg(10 * m->block_denials >= 9 * m->ref_block_denials, "%llu vs %llu",
                  (unsigned long long)m->block_denials, (unsigned long long)m->ref_block_denials);
    /* the leases held when a block starts are spent, nothing more: a claim
     * is at most max_fraction x burst = 1 token per agent */
    ck_assert_uint_le(m->block_admits, (uint64_t)o.agents * m->blocks_started + o.agents);
    ck_assert_msg(r.utilisation > 0.8 && r.utilisation < 1.2, "utilisation %f", r.utilisation);
}
END_TEST

START_TEST(without_models_a_request_is_a_token)
{
    struct sim_opts o = opts(4, 2000, 3);
    struct sim_result r;
    o.models = 0;
    o.keys = 100;
    char err[256];
    ck_assert_int_eq(sim_run(&o, &r, err, sizeof(err)), 0);
    ck_assert_uint_eq(r.models.tokens, r.decisions);
    ck_assert_uint_eq(r.models.admitted_tokens, r.admitted);
    ck_assert_uint_eq(r.models.exact_calls, 0);
    ck_assert_msg(r.worst_window_excess <= 1e-9, "excess %f", r.worst_window_excess);
}
END_TEST

START_TEST(not_with_regions_or_stall)
{
    struct sim_opts o = opts(2, 100, 1);
    char err[256];
    o.regions = 2;
    ck_assert_int_eq(sim_models_check(&o, err, sizeof(err)), -1);
    o.regions = 0;
    o.stall_len_us = 1000000;
    ck_assert_int_eq(sim_models_check(&o, err, sizeof(err)), -1);
}
END_TEST

/* --concurrency (sim_cc.c): slots by cc_acquire, held for the service
 * time, given back by cc_release. Never more of a key in flight than the
 * limit (an acquire that ignored it, or a slot freed before its request is
 * done, goes over), and about as many admitted as the exact reference. */
START_TEST(concurrency_keeps_in_flight_within_the_limit)
{
    struct sim_opts o = opts(4, 2000, 5);
    struct sim_result r;
    o.keys = 10;
    o.cc_limit = 5;
    o.service_us = 50000;
    run(&o, &r);
    const struct sim_models *m = &r.models;
    ck_assert_msg(m->cc_max_inflight <= o.cc_limit, "%llu in flight, limit %llu",
                  (unsigned long long)m->cc_max_inflight, (unsigned long long)o.cc_limit);
    ck_assert_uint_eq(m->cc_max_inflight, o.cc_limit); /* busy enough to reach it */
    ck_assert_uint_eq(m->cc_released, r.admitted);     /* every slot given back */
    ck_assert_uint_eq(m->exact_calls, r.decisions);    /* one acquire each */
    ck_assert_uint_lt(r.admitted, r.decisions);
    ck_assert_msg(r.utilisation > 0.9 && r.utilisation <= 1.0 + 1e-9, "utilisation %f",
                  r.utilisation);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 120);
    CHECK_ADD(tc, leased_cost_keeps_the_bound_in_tokens, many_keys_fixed_cost_keeps_the_bound,
              exact_cost_decides_as_the_reference, exact_block_denies_as_the_reference,
              leased_block_keeps_the_bound, without_models_a_request_is_a_token,
              not_with_regions_or_stall, concurrency_keeps_in_flight_within_the_limit);
    return check_run_case("sim_cost", tc);
}
