/* SPDX-License-Identifier: Apache-2.0 */
/* test_metrics.c - Prometheus rendering, exact counters under threads, the
 * blocked-clients sketch behind /top, and the alert and shadow ticks. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "metrics/metrics.h"

#define S 1000000ull

START_TEST(render_has_every_interface_metric)
{
    /* every metric of README's table (interface.md's six among them); the
     * integration suite (test_ops.Metrics) reads the table itself and checks
     * a live agent's /metrics against it both ways */
    static const char *const names[] = {
        "spoa_ratelimit_decisions_total",
        "spoa_ratelimit_degraded_decisions_total",
        "spoa_ratelimit_cost_over_burst_total",
        "spoa_ratelimit_blocks_started_total",
        "spoa_ratelimit_refunds_total",
        "spoa_ratelimit_decision_seconds",
        "spoa_ratelimit_redis_up",
        "spoa_ratelimit_redis_configured",
        "spoa_ratelimit_redis_commands_total",
        "spoa_ratelimit_redis_batches_total",
        "spoa_ratelimit_redis_batched_calls_total",
        "spoa_ratelimit_redis_keepalives_total",
        "spoa_ratelimit_redis_reconnects_total",
        "spoa_ratelimit_redis_failovers_total",
        "spoa_ratelimit_redis_errors_total",
        "spoa_ratelimit_redis_latency_seconds",
        "spoa_ratelimit_connections",
        "spoa_ratelimit_connections_accepted_total",
        "spoa_ratelimit_frames_total",
        "spoa_ratelimit_acks_total",
        "spoa_ratelimit_protocol_errors_total",
        "spoa_ratelimit_lease_claims_total",
        "spoa_ratelimit_lease_tokens_granted_total",
        "spoa_ratelimit_lease_tokens_returned_total",
        "spoa_ratelimit_lease_local_decisions_total",
        "spoa_ratelimit_lease_negative_hits_total",
        "spoa_ratelimit_lease_waiters_total",
        "spoa_ratelimit_lease_keys",
        "spoa_ratelimit_lease_active_keys",
        "spoa_ratelimit_buckets",
        "spoa_ratelimit_reloads_total",
        "spoa_ratelimit_reload_failures_total",
    };
    struct metrics_rule *r = metrics_rule_get("render");
    size_t len;

    ck_assert_ptr_nonnull(r);
    atomic_fetch_add(&r->allowed, 3);
    atomic_fetch_add(&r->blocked, 2);
    metrics_hist_observe(&metrics.decision, 30000);   /* 30 us */
    metrics_hist_observe(&metrics.decision, 2000000); /* 2 ms */
    char *text = metrics_render(&len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), len);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char want[128];
        snprintf(want, sizeof(want), "# TYPE %s ", names[i]);
        ck_assert_msg(strstr(text, want), "missing %s", names[i]);
    }
    ck_assert_ptr_nonnull(
        strstr(text, "spoa_ratelimit_decisions_total{rule=\"render\",result=\"allowed\"} 3\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "spoa_ratelimit_decisions_total{rule=\"render\",result=\"blocked\"} 2\n"));
    /* cumulative buckets: 30 us is above 25 us, below 50 us */
    ck_assert_ptr_nonnull(
        strstr(text, "spoa_ratelimit_decision_seconds_bucket{le=\"2.5e-05\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "spoa_ratelimit_decision_seconds_bucket{le=\"5e-05\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "spoa_ratelimit_decision_seconds_bucket{le=\"+Inf\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "spoa_ratelimit_decision_seconds_count 2\n"));
    free(text);
    ck_assert_ptr_eq(metrics_rule_get("render"), r); /* one record per name */
}
END_TEST

static void *bump(void *arg)
{
    struct metrics_rule *r = arg;
    for (int i = 0; i < 100000; i++) {
        atomic_fetch_add_explicit(&r->allowed, 1, memory_order_relaxed);
        metrics_hist_observe(&metrics.redis_latency, (uint64_t)i);
    }
    return NULL;
}

START_TEST(counters_exact_under_threads)
{
    struct metrics_rule *r = metrics_rule_get("threads");
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, bump, r);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ck_assert_uint_eq(atomic_load(&r->allowed), 400000);
    uint64_t count = 0;
    for (unsigned i = 0; i < METRICS_HIST_BUCKETS; i++)
        count += atomic_load(&metrics.redis_latency.buckets[i]);
    ck_assert_uint_eq(count, 400000);
}
END_TEST

/* Observations in a batch land exactly where one by one they would. */
START_TEST(hist_batch_equals_one_by_one)
{
    static struct metrics_hist one, many;
    uint64_t t0[300], now = 5000000000ULL;

    for (int i = 0; i < 300; i++) /* 0 us to ~4.4 s ago: every bucket, bounds included */
        t0[i] = now - (i % 3 == 0 ? (uint64_t)i * i * 50 : (uint64_t)(25 << (i % 16)));
    for (int i = 0; i < 300; i++)
        metrics_hist_observe(&one, (now - t0[i]) * 1000);
    metrics_hist_observe_since(&many, now, t0, 300);
    metrics_hist_observe_since(&many, now, t0, 0); /* nothing */
    for (unsigned b = 0; b < METRICS_HIST_BUCKETS; b++)
        ck_assert_uint_eq(atomic_load(&many.buckets[b]), atomic_load(&one.buckets[b]));
    ck_assert_uint_eq(atomic_load(&many.sum_ns), atomic_load(&one.sum_ns));
    unsigned used = 0;
    for (unsigned b = 0; b < METRICS_HIST_BUCKETS; b++)
        used += atomic_load(&one.buckets[b]) > 0;
    ck_assert_uint_ge(used, 10); /* the inputs did spread */
}
END_TEST

START_TEST(top_keeps_heavy_hitters_in_bounded_memory)
{
    struct metrics_rule *r = metrics_rule_get("top");
    char key[32];
    size_t len;

    /* 1000 distinct light clients, and two heavy ones */
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "light-%d", i);
        metrics_top_add(r, key, strlen(key), 10 * S, 0);
        metrics_top_add(r, "heavy-a", 7, 10 * S, 0);
        if (i % 2)
            metrics_top_add(r, "heavy-b", 7, 10 * S, 0);
    }
    ck_assert_uint_le(r->top_cur.n, METRICS_TOP_K);
    char *json = metrics_top_render(10 * S, &len);
    ck_assert_ptr_nonnull(json);
    const char *a = strstr(json, "\"top\":[{\"key\":\"heavy-a\"");
    ck_assert_msg(a, "%s", json);
    ck_assert_ptr_nonnull(strstr(json, "\"key\":\"heavy-b\""));
    free(json);
    /* two minutes later the sketch has rotated out */
    json = metrics_top_render(10 * S + 2 * METRICS_TOP_PERIOD_US + 1, &len);
    ck_assert_ptr_nonnull(strstr(json, "\"top\":[]"));
    free(json);
    /* keys are JSON-escaped */
    metrics_top_add(r, "q\"\\\x01", 4, 200 * S, 0);
    json = metrics_top_render(200 * S, &len);
    ck_assert_ptr_nonnull(strstr(json, "\"q\\\"\\\\\\u0001\""));
    free(json);
}
END_TEST

/* Requests are accounted with the clock read when they arrived: on another
 * worker, or before waiting for Redis, that can be older than the sketch's
 * period start. Such a sample is no time passed: it used to wrap around and
 * clear both minutes. */
START_TEST(top_survives_older_timestamps)
{
    struct metrics_rule *r = metrics_rule_get("older");
    size_t len;

    metrics_top_add(r, "early", 5, 100 * S, 0);
    metrics_top_add(r, "early", 5, 100 * S + METRICS_TOP_PERIOD_US + 1, 0); /* rotates */
    metrics_top_add(r, "late", 4, 100 * S + METRICS_TOP_PERIOD_US + 2, 0);
    metrics_top_add(r, "waited", 6, 100 * S + METRICS_TOP_PERIOD_US - 1000, 0); /* older */
    metrics_top_add(r, "waited", 6, 50 * S, 0);
    ck_assert_uint_eq(r->top_prev.n, 1);
    ck_assert_uint_eq(r->top_cur.n, 3);
    char *json = metrics_top_render(100 * S + METRICS_TOP_PERIOD_US - 5 * S, &len);
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(strstr(json, "\"older\":[{\"key\":\"early\",\"blocked\":2,\"error\":0}"), "%s",
                  json);
    ck_assert_msg(strstr(json, "{\"key\":\"waited\",\"blocked\":2,\"error\":0}"), "%s", json);
    ck_assert_msg(strstr(json, "{\"key\":\"late\",\"blocked\":1,\"error\":0}"), "%s", json);
    free(json);
}
END_TEST

static char alerted[64];
static uint64_t alert_blocks, alert_decisions;
static int alert_shadow;

static void on_alert(const char *rule, int shadow, uint64_t blocks, uint64_t decisions)
{
    if (strcmp(rule, "alert") != 0)
        return;
    snprintf(alerted, sizeof(alerted), "%s", rule);
    alert_shadow = shadow;
    alert_blocks = blocks;
    alert_decisions = decisions;
}

START_TEST(alert_tick_above_share_only)
{
    struct metrics_rule *r = metrics_rule_get("alert");

    metrics_minute_tick(0.05, on_alert); /* reset what other tests left */
    alerted[0] = '\0';
    /* a minute of 90 allowed, 5 blocked, 5 would-block: neither share is
     * more than 5% (they are not added up: one is enforced, one is not) */
    atomic_fetch_add(&r->allowed, 90);
    atomic_fetch_add(&r->blocked, 5);
    atomic_fetch_add(&r->would_block, 5);
    metrics_minute_tick(0.05, on_alert);
    ck_assert_str_eq(alerted, "");
    /* the next minute counts from the last tick: 94 allowed, 6 blocked */
    atomic_fetch_add(&r->allowed, 94);
    atomic_fetch_add(&r->blocked, 6);
    metrics_minute_tick(0.05, on_alert);
    ck_assert_str_eq(alerted, "alert");
    ck_assert_int_eq(alert_shadow, 0);
    ck_assert_uint_eq(alert_blocks, 6);
    ck_assert_uint_eq(alert_decisions, 100);
    /* a shadow minute: 92 allowed, 8 would-block: its own line, not "blocked" */
    alerted[0] = '\0';
    atomic_fetch_add(&r->allowed, 92);
    atomic_fetch_add(&r->would_block, 8);
    metrics_minute_tick(0.05, on_alert);
    ck_assert_str_eq(alerted, "alert");
    ck_assert_int_eq(alert_shadow, 1);
    ck_assert_uint_eq(alert_blocks, 8);
    ck_assert_uint_eq(alert_decisions, 100);
    /* a quiet minute: nothing */
    alerted[0] = '\0';
    metrics_minute_tick(0.05, on_alert);
    ck_assert_str_eq(alerted, "");
}
END_TEST

static uint64_t shadow_n;
static char shadow_top[80];

static size_t shadow_top_len;

static void on_shadow(const char *rule, uint64_t n, const char *top, size_t top_len)
{
    if (strcmp(rule, "shadow") != 0)
        return;
    shadow_n = n;
    ck_assert_uint_lt(top_len, sizeof(shadow_top));
    memcpy(shadow_top, top, top_len);
    shadow_top[top_len] = '\0';
    shadow_top_len = top_len;
}

START_TEST(shadow_tick_counts_and_top_key)
{
    struct metrics_rule *r = metrics_rule_get("shadow");
    atomic_store(&r->shadow_pending, 7);
    metrics_top_add(r, "noisy", 5, 5 * S, 0);
    metrics_shadow_tick(on_shadow);
    ck_assert_uint_eq(shadow_n, 7);
    ck_assert_str_eq(shadow_top, "noisy");
    shadow_n = 0;
    metrics_shadow_tick(on_shadow); /* nothing new: no call */
    ck_assert_uint_eq(shadow_n, 0);
    /* binary keys keep their length, NUL bytes included */
    atomic_store(&r->shadow_pending, 1);
    for (int i = 0; i < 10; i++)
        metrics_top_add(r, "a\0b", 3, 5 * S, 0);
    metrics_shadow_tick(on_shadow);
    ck_assert_uint_eq(shadow_top_len, 3);
    ck_assert_int_eq(memcmp(shadow_top, "a\0b", 3), 0);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, render_has_every_interface_metric, counters_exact_under_threads,
              hist_batch_equals_one_by_one, top_keeps_heavy_hitters_in_bounded_memory,
              top_survives_older_timestamps, alert_tick_above_share_only,
              shadow_tick_counts_and_top_key);
    return check_run_case("metrics", tc);
}
