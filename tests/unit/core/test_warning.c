/* SPDX-License-Identifier: Apache-2.0 */
/* test_warning.c - the warning registry (core/warning.h): raise, clear,
 * raise again, the list in kind order, one log line per start and per clear,
 * and the gauge of every kind in /metrics. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"

/* stderr (where log lines go) into a temporary file while a test runs;
 * captured() reads back what was written since. */
static FILE *cap;
static int saved_fd = -1;

static void capture(void)
{
    cap = tmpfile();
    ck_assert_ptr_nonnull(cap);
    fflush(stderr);
    saved_fd = dup(STDERR_FILENO);
    ck_assert_int_ge(saved_fd, 0);
    ck_assert_int_ge(dup2(fileno(cap), STDERR_FILENO), 0);
    warning_reset();
    log_level = LOG_LVL_INFO;
}

static const char *captured(void)
{
    static char buf[16384];
    size_t n;

    fflush(stderr);
    rewind(cap);
    n = fread(buf, 1, sizeof(buf) - 1, cap);
    buf[n] = '\0';
    return buf;
}

static void uncapture(void)
{
    fflush(stderr);
    dup2(saved_fd, STDERR_FILENO);
    close(saved_fd);
    fclose(cap);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

START_TEST(names_are_fixed)
{
    /* the gauge's label values and the JSON's kinds: interface.md */
    static const char *const want[] = {
        "haproxy_never_asks", "slots_never_released", "redis_state_lost",   "rules_store_lost",
        "redis_may_evict",    "redis_clock_jump",     "redis_unconfirmed",  "redis_errors",
        "secret_readable",    "redis_slow",           "redis_auth_refused", "global_unreachable",
        "global_state_lost",
    };
    ck_assert_int_eq(WARNING_KINDS, sizeof(want) / sizeof(want[0]));
    for (int k = 0; k < WARNING_KINDS; k++)
        ck_assert_str_eq(warning_kind_names[k], want[k]);
}
END_TEST

START_TEST(raise_clear_raise)
{
    struct warning_view v[WARNING_KINDS];
    time_t before = time(NULL);

    capture();
    ck_assert_int_eq(warning_active(WARNING_SECRET_READABLE), 0);
    ck_assert_int_eq(warning_raise(WARNING_SECRET_READABLE, "file %s mode %o", "/x", 0644), 1);
    ck_assert_int_eq(warning_active(WARNING_SECRET_READABLE), 1);
    ck_assert_uint_eq(warning_list(v, WARNING_KINDS), 1);
    ck_assert_int_eq(v[0].kind, WARNING_SECRET_READABLE);
    ck_assert_str_eq(v[0].message, "file /x mode 644");
    ck_assert_int_ge(v[0].since, before);
    ck_assert_int_le(v[0].since, time(NULL));

    ck_assert_int_eq(warning_clear(WARNING_SECRET_READABLE), 1);
    ck_assert_int_eq(warning_active(WARNING_SECRET_READABLE), 0);
    ck_assert_uint_eq(warning_list(v, WARNING_KINDS), 0);
    ck_assert_int_eq(warning_clear(WARNING_SECRET_READABLE), 0); /* not active: nothing */

    ck_assert_int_eq(warning_raise(WARNING_SECRET_READABLE, "again"), 1);
    ck_assert_uint_eq(warning_list(v, WARNING_KINDS), 1);
    ck_assert_str_eq(v[0].message, "again");

    const char *log = captured();
    ck_assert_int_eq(count(log, "kind=secret_readable message=\"file /x mode 644\""), 1);
    ck_assert_int_eq(count(log, "\"warning cleared\" kind=secret_readable"), 1);
    ck_assert_int_eq(count(log, "message=\"again\""), 1);
    ck_assert_int_eq(count(log, "level=warn"), 3);
    uncapture();
}
END_TEST

/* A checker may raise on every tick: one line per start, the message kept
 * up to date silently. */
START_TEST(raise_again_logs_once)
{
    struct warning_view v[1];

    capture();
    ck_assert_int_eq(warning_raise(WARNING_HAPROXY_NEVER_ASKS, "n=%d", 1), 1);
    for (int i = 2; i <= 50; i++)
        ck_assert_int_eq(warning_raise(WARNING_HAPROXY_NEVER_ASKS, "n=%d", i), 0);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_str_eq(v[0].message, "n=50");
    ck_assert_int_eq(count(captured(), "kind=haproxy_never_asks"), 1);
    for (int i = 0; i < 5; i++)
        warning_clear(WARNING_HAPROXY_NEVER_ASKS);
    ck_assert_int_eq(count(captured(), "kind=haproxy_never_asks"), 2);
    uncapture();
}
END_TEST

/* In kind order; the count says how many are active even past max. */
START_TEST(list_in_kind_order)
{
    struct warning_view v[2];

    capture();
    warning_raise(WARNING_SECRET_READABLE, "c");
    warning_raise(WARNING_HAPROXY_NEVER_ASKS, "a");
    warning_raise(WARNING_REDIS_MAY_EVICT, "b");
    ck_assert_uint_eq(warning_list(v, 2), 3);
    ck_assert_int_eq(v[0].kind, WARNING_HAPROXY_NEVER_ASKS);
    ck_assert_int_eq(v[1].kind, WARNING_REDIS_MAY_EVICT);
    ck_assert_uint_eq(warning_list(NULL, 0), 3);
    warning_reset();
    ck_assert_uint_eq(warning_list(v, 2), 0);
    uncapture();
}
END_TEST

/* A message longer than the registry keeps is cut, never overflows. */
START_TEST(long_message_cut)
{
    char big[WARNING_MESSAGE_MAX * 2];
    struct warning_view v[1];

    capture();
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    warning_raise(WARNING_REDIS_ERRORS, "%s", big);
    ck_assert_uint_eq(warning_list(v, 1), 1);
    ck_assert_uint_eq(strlen(v[0].message), WARNING_MESSAGE_MAX - 1);
    ck_assert_int_eq(warning_raise(WARNING_KINDS, "no such kind"), 0);
    ck_assert_int_eq(warning_active(WARNING_KINDS), 0);
    uncapture();
}
END_TEST

/* A message longer than one log value (LOG_VALUE_MAX) is logged whole:
 * what to change is at its end. */
START_TEST(long_message_logged_whole)
{
    char msg[WARNING_MESSAGE_MAX];

    capture();
    for (size_t i = 0; i < sizeof(msg) - 1; i++)
        msg[i] = (char)('a' + i % 26);
    msg[sizeof(msg) - 1] = '\0';
    memcpy(msg + sizeof(msg) - 12, "chmod \"640\"", 11);
    warning_raise(WARNING_SECRET_READABLE, "%s", msg);
    const char *log = captured();
    ck_assert_ptr_nonnull(strstr(log, "message=\"abcdefghij"));
    ck_assert_ptr_nonnull(strstr(log, "chmod \\\"640\\\"\"\n"));
    ck_assert_ptr_null(strstr(log, "..."));
    uncapture();
}
END_TEST

/* The gauge: every kind, 1 while active, 0 otherwise. */
START_TEST(gauge_every_kind)
{
    size_t len;
    char line[128];

    capture();
    warning_raise(WARNING_SLOTS_NEVER_RELEASED, "rule r");
    char *text = metrics_render(&len);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE spoa_ratelimit_warning gauge\n"));
    ck_assert_ptr_nonnull(strstr(text, "# HELP spoa_ratelimit_warning "));
    for (int k = 0; k < WARNING_KINDS; k++) {
        snprintf(line, sizeof(line), "\nspoa_ratelimit_warning{kind=\"%s\"} %d\n",
                 warning_kind_names[k], k == WARNING_SLOTS_NEVER_RELEASED);
        ck_assert_msg(strstr(text, line), "missing: %s", line + 1);
    }
    free(text);
    warning_clear(WARNING_SLOTS_NEVER_RELEASED);
    text = metrics_render(&len);
    ck_assert_ptr_nonnull(
        strstr(text, "spoa_ratelimit_warning{kind=\"slots_never_released\"} 0\n"));
    free(text);
    uncapture();
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("warning");

    CHECK_ADD(tc, names_are_fixed, raise_clear_raise, raise_again_logs_once, list_in_kind_order,
              long_message_cut, long_message_logged_whole, gauge_every_kind);
    return check_run_case("warning", tc);
}
