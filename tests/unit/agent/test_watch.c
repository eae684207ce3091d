/* SPDX-License-Identifier: Apache-2.0 */
/* test_watch.c - the warnings the agent finds in itself (watch.h), in time
 * the test sets: haproxy_never_asks from the HELLO and NOTIFY counters,
 * slots_never_released from a concurrency rule's counters, secret_readable
 * from a file's mode. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "config/config.h"
#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "rules/rules.h"
#include "agent/watch.h"

#define HELLOS metrics.frames_in[METRICS_FRAME_HELLO]
#define NOTIFIES metrics.frames_in[METRICS_FRAME_NOTIFY]

static void fresh(void)
{
    warning_reset();
    memset(&metrics, 0, sizeof(metrics));
    log_level = LOG_LVL_ERROR; /* the warnings' lines are test_warning's business */
}

static int asks_warned(void)
{
    return warning_active(WARNING_HAPROXY_NEVER_ASKS);
}

/* Health checks every second from t = 10 s, no NOTIFY: raised once they
 * have gone on for the silence (2 s), not before; a NOTIFY clears it. */
START_TEST(never_asks_raised_and_cleared)
{
    struct config *cfg = check_config_ok("[agent]\nnotify_silence = 2s\n");
    struct watch w;
    struct warning_view v[1];

    fresh();
    watch_init(&w, 0);
    for (uint64_t t = 0; t <= 9000; t += 1000) { /* no peer: nothing */
        watch_tick(&w, cfg, t);
        ck_assert_int_eq(asks_warned(), 0);
    }
    for (uint64_t t = 10000; t <= 11000; t += 1000) {
        HELLOS++;
        watch_tick(&w, cfg, t);
        ck_assert_int_eq(asks_warned(), 0);
    }
    HELLOS++;
    watch_tick(&w, cfg, 12000);
    ck_assert_int_eq(asks_warned(), 1);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, "send-spoe-group"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "2s (none since the agent started)"));
    /* the checks stop: raised stays raised until a NOTIFY */
    watch_tick(&w, cfg, 30000);
    ck_assert_int_eq(asks_warned(), 1);
    NOTIFIES++;
    watch_tick(&w, cfg, 31000);
    ck_assert_int_eq(asks_warned(), 0);
    config_free(cfg);
}
END_TEST

/* A held connection is a peer too; NOTIFYs keep it quiet; a peer that
 * comes after a long quiet starts its own silence. */
START_TEST(never_asks_connection_and_notifies)
{
    struct config *cfg = check_config_ok("[agent]\nnotify_silence = 5s\n");
    struct watch w;

    fresh();
    watch_init(&w, 0);
    HELLOS++;
    atomic_store(&metrics.connections, 1);
    for (uint64_t t = 1000; t <= 20000; t += 1000) {
        NOTIFIES++;
        watch_tick(&w, cfg, t);
        ck_assert_int_eq(asks_warned(), 0);
    }
    /* the last NOTIFY at 20 s, the connection held: raised 5 s after the
     * next tick saw it */
    for (uint64_t t = 21000; t <= 25000; t += 1000) {
        watch_tick(&w, cfg, t);
        ck_assert_int_eq(asks_warned(), 0);
    }
    watch_tick(&w, cfg, 26000);
    ck_assert_int_eq(asks_warned(), 1);
    NOTIFIES++;
    watch_tick(&w, cfg, 27000);
    ck_assert_int_eq(asks_warned(), 0);
    /* peers gone for a long time, then a health check: its own 5 s */
    atomic_store(&metrics.connections, 0);
    watch_tick(&w, cfg, 100000);
    HELLOS++;
    watch_tick(&w, cfg, 101000);
    ck_assert_int_eq(asks_warned(), 0);
    config_free(cfg);
}
END_TEST

START_TEST(never_asks_off)
{
    struct config *cfg = check_config_ok("[agent]\nnotify_silence = 0\n");
    struct watch w;

    fresh();
    watch_init(&w, 0);
    atomic_store(&metrics.connections, 3);
    for (uint64_t t = 0; t <= 600000; t += 1000) {
        HELLOS++;
        watch_tick(&w, cfg, t);
    }
    ck_assert_int_eq(asks_warned(), 0);
    config_free(cfg);
}
END_TEST

static const char cc_rules[] = "[rule:inflight]\nmessage = check-rate\nkey = key\n"
                               "algorithm = concurrency\nlimit = 2\nrelease = release-slot\n"
                               "max_hold = 2s\n\n[rule:api]\nkey = key\nrate = 10/1s\n";

/* Expiries with no release since the rules were loaded: raised, naming the
 * rule and its release message; a release clears it for good (until a
 * reload); a reload starts over from the counters then. */
START_TEST(slots_never_released)
{
    struct ruleset *rs = ruleset_new(check_config_ok(cc_rules));
    struct watch w;
    struct warning_view v[1];

    fresh();
    ck_assert_ptr_nonnull(rs);
    struct metrics_rule *m = rs->metrics[0];
    /* the records outlive memset(metrics): counters of earlier tests */
    atomic_store(&m->slots_expired, 7);
    watch_init(&w, 0);
    watch_config(&w, rs);
    watch_tick(&w, rs->cfg, 1000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 0);
    atomic_fetch_add(&m->slots_expired, 2);
    watch_tick(&w, rs->cfg, 2000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 1);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, "concurrency rule inflight: 2 slots freed by "
                                               "max_hold (2s)"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "release message release-slot"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "http-response send-spoe-group"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "admits 2 per 2s"));

    atomic_fetch_add(&m->slots_released_unknown, 1); /* a release, of an expired slot */
    watch_tick(&w, rs->cfg, 3000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 0);
    atomic_fetch_add(&m->slots_expired, 5); /* an abort: releases come, so no warning */
    watch_tick(&w, rs->cfg, 4000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 0);

    watch_config(&w, rs); /* a reload: from the counters now */
    watch_tick(&w, rs->cfg, 5000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 0);
    atomic_fetch_add(&m->slots_expired, 1);
    watch_tick(&w, rs->cfg, 6000);
    ck_assert_int_eq(warning_active(WARNING_SLOTS_NEVER_RELEASED), 1);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, "since the rules were reloaded"));
    watch_free(&w);
    ruleset_unref(rs);
}
END_TEST

/* A password_file every user can read; fixed (chmod 600): cleared. */
START_TEST(secret_file_mode)
{
    char dir[] = "/tmp/test_watch.XXXXXX", path[64], ini[256];
    struct warning_view v[1];

    fresh();
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/redis.pass", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("secret\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0644), 0);
    snprintf(ini, sizeof(ini), "[redis]\nurl = redis://127.0.0.1:1\npassword_file = %s\n", path);
    struct config *cfg = check_config_ok(ini);

    watch_secrets(cfg);
    ck_assert_int_eq(warning_active(WARNING_SECRET_READABLE), 1);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, path));
    ck_assert_ptr_nonnull(strstr(v[0].message, "mode 0644"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "chmod 640"));
    ck_assert_int_eq(chmod(path, 0640), 0); /* group may read: the agent's group */
    watch_secrets(cfg);
    ck_assert_int_eq(warning_active(WARNING_SECRET_READABLE), 0);
    config_free(cfg);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("watch");

    CHECK_ADD(tc, never_asks_raised_and_cleared, never_asks_connection_and_notifies, never_asks_off,
              slots_never_released, secret_file_mode);
    return check_run_case("watch", tc);
}
