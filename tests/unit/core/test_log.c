/* SPDX-License-Identifier: Apache-2.0 */
/* test_log.c - logfmt escaping: no value can forge a field or a line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "core/log.h"

static const struct {
    const char *in;
    size_t len;
    const char *esc; /* log_esc */
    const char *val; /* log_val */
} cases[] = {
    {"plain", 5, "plain", "plain"},
    {"", 0, "", "\"\""},
    {"two words", 9, "two words", "\"two words\""},
    {"k=v", 3, "k=v", "\"k=v\""},
    {"a\"b", 3, "a\\\"b", "\"a\\\"b\""},
    {"back\\slash", 10, "back\\\\slash", "\"back\\\\slash\""},
    {"x\" level=error msg=\"forged", 26, "x\\\" level=error msg=\\\"forged",
     "\"x\\\" level=error msg=\\\"forged\""},
    {"line\nts=fake", 12, "line\\nts=fake", "\"line\\nts=fake\""},
    {"\r\t", 2, "\\r\\t", "\"\\r\\t\""},
    {"\x01\x1f\x7f\x80\xff", 5, "\\x01\\x1f\\x7f\\x80\\xff", "\"\\x01\\x1f\\x7f\\x80\\xff\""},
    {"127.0.0.1:6379", 14, "127.0.0.1:6379", "127.0.0.1:6379"},
    {"/etc/spoa-ratelimit/ratelimit.ini", 33, "/etc/spoa-ratelimit/ratelimit.ini",
     "/etc/spoa-ratelimit/ratelimit.ini"},
};

START_TEST(escapes)
{
    ck_assert_str_eq(log_esc(cases[_i].in, cases[_i].len), cases[_i].esc);
    ck_assert_str_eq(log_val(cases[_i].in), cases[_i].val);
}
END_TEST

START_TEST(binary_and_null)
{
    ck_assert_str_eq(log_esc("a\0b", 3), "a\\x00b");
    ck_assert_str_eq(log_val(NULL), "\"\"");
}
END_TEST

/* Long values are cut, and the cut is marked. */
START_TEST(long_values)
{
    char in[LOG_VALUE_MAX + 10], want[LOG_VALUE_MAX + 10];

    memset(in, 'a', sizeof(in) - 1);
    in[sizeof(in) - 1] = '\0';
    memset(want, 'a', LOG_VALUE_MAX);
    memcpy(want + LOG_VALUE_MAX, "...", 4);
    ck_assert_str_eq(log_esc(in, strlen(in)), want);
    const char *v = log_val(in);
    ck_assert_uint_eq(strlen(v), LOG_VALUE_MAX + 5);
    ck_assert_int_eq(v[0], '"');
    ck_assert_str_eq(v + LOG_VALUE_MAX + 1, "...\"");
    /* a value of escapes at the limit fits its slot */
    memset(in, '\x01', sizeof(in) - 1);
    ck_assert_uint_eq(strlen(log_val(in)), LOG_VALUE_MAX * 4 + 5);
}
END_TEST

/* The values of one line stay valid together. */
START_TEST(slots_of_one_line)
{
    const char *v[LOG_VALUE_SLOTS];
    char want[16];

    for (int i = 0; i < LOG_VALUE_SLOTS; i++) {
        snprintf(want, sizeof(want), "v %d", i);
        v[i] = log_val(want);
    }
    for (int i = 0; i < LOG_VALUE_SLOTS; i++) {
        snprintf(want, sizeof(want), "\"v %d\"", i);
        ck_assert_str_eq(v[i], want);
    }
}
END_TEST

/* Run one log_write with stderr into a file; returns what was written. */
static char *capture(const char *value)
{
    static char out[4096];
    char path[] = "/tmp/test_log-XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(STDERR_FILENO);

    ck_assert_int_ge(fd, 0);
    unlink(path);
    dup2(fd, STDERR_FILENO);
    log_write(LOG_LVL_INFO, "\"test\" raw=%s", value);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = pread(fd, out, sizeof(out) - 1, 0);
    close(fd);
    ck_assert_int_gt(n, 0);
    out[n] = '\0';
    return out;
}

/* A value that reached a line without escaping still cannot end it. */
START_TEST(raw_control_bytes_never_end_a_line)
{
    char *line = capture("a\nts=2000-01-01T00:00:00.000Z level=error msg=\"forged\"\r\x1b[2J");

    ck_assert_ptr_nonnull(strstr(line, " level=info msg=\"test\" raw=a\\x0ats=2000"));
    ck_assert_ptr_nonnull(strstr(line, "\\x0d\\x1b[2J\n"));
    ck_assert_ptr_eq(strchr(line, '\n'), line + strlen(line) - 1); /* one line */
    ck_assert_ptr_null(strchr(line, '\r'));
}
END_TEST

/* log_gate_open: one line per period, the calls in between counted into
 * the next line's number; log_gate_open_burst: a burst, then the rate. The
 * periods are long (an hour) so that no pause of a busy machine refills. */
START_TEST(gates)
{
    struct log_gate g = {0}, b = {0};
    unsigned long long suppressed = 99;
    int opened = 0;

    ck_assert_int_eq(log_gate_open(&g, 3600, &suppressed), 1);
    ck_assert_uint_eq(suppressed, 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(log_gate_open(&g, 3600, &suppressed), 0);
    atomic_store(&g.last_us, 0); /* as if the period were over */
    ck_assert_int_eq(log_gate_open(&g, 3600, &suppressed), 1);
    ck_assert_uint_eq(suppressed, 5);

    for (int i = 0; i < 30; i++)
        opened += log_gate_open_burst(&b, 3600, 20, &suppressed);
    ck_assert_int_eq(opened, 20);
    atomic_store(&b.last_us, 0); /* as if everything had refilled */
    ck_assert_int_eq(log_gate_open_burst(&b, 3600, 20, &suppressed), 1);
    ck_assert_uint_eq(suppressed, 10);
    /* a short period refills: 20 at once, then about one per period */
    struct log_gate f = {0};
    opened = 0;
    for (int i = 0; i < 25; i++)
        opened += log_gate_open_burst(&f, 0.002, 20, &suppressed);
    ck_assert_int_ge(opened, 20);
    usleep(50000);
    ck_assert_int_eq(log_gate_open_burst(&f, 0.002, 20, &suppressed), 1);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, escapes, 0, sizeof(cases) / sizeof(cases[0]));
    CHECK_ADD(tc, binary_and_null, long_values, slots_of_one_line,
              raw_control_bytes_never_end_a_line, gates);
    return check_run_case("log", tc);
}
