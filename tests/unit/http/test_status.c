/* SPDX-License-Identifier: Apache-2.0 */
/* test_status.c - what the status page stands on, without a socket: the
 * five-minute history (per-second deltas, gaps, ?since=, rates, the Redis
 * latency quantiles and down-since), and the page document (its style and
 * script inline, admitted by the SHA-256 hashes of its policy). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "core/sha256.h"
#include "core/util.h"
#include "http/status_page.h"
#include "metrics/history.h"
#include "metrics/metrics.h"

static void count(struct metrics_rule *r, uint64_t allowed, uint64_t blocked, uint64_t wb)
{
    atomic_fetch_add(&r->allowed, allowed);
    atomic_fetch_add(&r->blocked, blocked);
    atomic_fetch_add(&r->would_block, wb);
}

START_TEST(history_deltas_gaps_since)
{
    struct history *h = history_new();
    struct metrics_rule *r = metrics_rule_get("hist-a");
    uint32_t dec[HISTORY_SECONDS], blk[HISTORY_SECONDS], wb[HISTORY_SECONDS];
    uint64_t last;

    ck_assert_ptr_nonnull(h);
    count(r, 5, 0, 0); /* before the first sample: the baseline, not a second */
    history_sample(h, 1000);
    ck_assert_uint_eq(history_rule(h, r, 0, dec, blk, wb, &last), 0);
    count(r, 7, 3, 0);
    history_sample(h, 1001);
    count(r, 1, 0, 2);
    history_sample(h, 1004); /* 1002 and 1003 missed: zeros, the counts in 1004 */
    size_t n = history_rule(h, r, 0, dec, blk, wb, &last);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(last, 1004);
    uint32_t want_dec[] = {10, 0, 0, 1}, want_blk[] = {3, 0, 0, 0}, want_wb[] = {0, 0, 0, 2};
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(dec[i], want_dec[i]);
        ck_assert_uint_eq(blk[i], want_blk[i]);
        ck_assert_uint_eq(wb[i], want_wb[i]);
    }
    /* ?since=: only the seconds after it, oldest first */
    ck_assert_uint_eq(history_rule(h, r, 1002, dec, NULL, NULL, &last), 2);
    ck_assert_uint_eq(dec[0], 0);
    ck_assert_uint_eq(dec[1], 1);
    ck_assert_uint_eq(history_rule(h, r, 1004, dec, NULL, NULL, &last), 0);
    ck_assert_uint_eq(history_rule(h, r, 5000, dec, NULL, NULL, &last), 0);
    /* the rate over the last two samples: (0 + 1) / 2 */
    ck_assert(history_rule_rate(h, r, 2) == 0.5);
    /* a clock step back: no sample, nothing lost */
    history_sample(h, 990);
    ck_assert_uint_eq(history_rule(h, r, 0, dec, NULL, NULL, &last), 4);
    history_free(h);
}
END_TEST

START_TEST(history_window_is_bounded)
{
    struct history *h = history_new();
    struct metrics_rule *r = metrics_rule_get("hist-b");
    uint32_t dec[HISTORY_SECONDS];
    uint64_t last;

    history_sample(h, 2000);
    for (uint64_t s = 1; s <= HISTORY_SECONDS + 50; s++) {
        count(r, s, 0, 0);
        history_sample(h, 2000 + s);
    }
    ck_assert_uint_eq(history_rule(h, r, 0, dec, NULL, NULL, &last), HISTORY_SECONDS);
    ck_assert_uint_eq(dec[0], 51); /* the oldest kept: second 51 */
    ck_assert_uint_eq(dec[HISTORY_SECONDS - 1], HISTORY_SECONDS + 50);
    /* a gap longer than the window: only zeros and the last second */
    count(r, 9, 0, 0);
    history_sample(h, last + 10 * HISTORY_SECONDS);
    ck_assert_uint_eq(history_rule(h, r, 0, dec, NULL, NULL, &last), HISTORY_SECONDS);
    ck_assert_uint_eq(dec[HISTORY_SECONDS - 2], 0);
    ck_assert_uint_eq(dec[HISTORY_SECONDS - 1], 9);
    history_free(h);
}
END_TEST

START_TEST(history_redis_latency_and_down)
{
    struct history *h = history_new();

    atomic_store(&metrics.redis_configured, 1);
    atomic_store(&metrics.redis_up, 1);
    history_sample(h, 3000);
    ck_assert(history_redis_latency(h, 0.5) < 0); /* no call yet */
    for (int i = 0; i < 98; i++)
        metrics_hist_observe(&metrics.redis_latency, 40000); /* 40 us: the 50 us bucket */
    for (int i = 0; i < 2; i++)
        metrics_hist_observe(&metrics.redis_latency, 3000000); /* 3 ms: the 5 ms bucket */
    history_sample(h, 3001);
    ck_assert_double_eq_tol(history_redis_latency(h, 0.5), 50e-6, 1e-12);
    ck_assert_double_eq_tol(history_redis_latency(h, 0.99), 5e-3, 1e-12);
    ck_assert_uint_eq(history_redis_down_since(h), 0);
    atomic_store(&metrics.redis_up, 0);
    history_sample(h, 3002);
    history_sample(h, 3003);
    ck_assert_uint_eq(history_redis_down_since(h), 3002);
    atomic_store(&metrics.redis_up, 1);
    history_sample(h, 3004);
    ck_assert_uint_eq(history_redis_down_since(h), 0);
    history_free(h);
}
END_TEST

/* The text between open and close in doc, after from; NULL if absent. */
static char *between(const char *doc, const char *open, const char *close)
{
    const char *a = strstr(doc, open), *b;
    if (!a || !(b = strstr(a + strlen(open), close)))
        return NULL;
    a += strlen(open);
    return strndup(a, (size_t)(b - a));
}

static void check_hash(const char *headers, const char *directive, const char *text)
{
    struct sha256 s;
    uint8_t d[SHA256_LEN];
    char b64[48], want[96];

    sha256_init(&s);
    sha256_update(&s, text, strlen(text));
    sha256_final(&s, d);
    util_base64(d, sizeof(d), b64);
    snprintf(want, sizeof(want), "%s 'sha256-%s'", directive, b64);
    ck_assert_msg(strstr(headers, want), "%s not in %s", want, headers);
}

START_TEST(page_inline_and_admitted)
{
    size_t len = 0;
    const char *html = status_page_html(&len), *headers = status_page_headers();

    ck_assert_ptr_nonnull(html);
    ck_assert_ptr_nonnull(headers);
    ck_assert_uint_eq(strlen(html), len);
    ck_assert_ptr_null(strstr(html, "/*CSS*/"));
    ck_assert_ptr_null(strstr(html, "/*JS*/"));
    /* no address anywhere but the SVG namespace (a name, never fetched) */
    ck_assert_ptr_null(strstr(html, "https://"));
    for (const char *p = strstr(html, "http://"); p; p = strstr(p + 1, "http://"))
        ck_assert(strncmp(p, "http://www.w3.org/2000/svg\"", 27) == 0);
    char *css = between(html, "<style>", "</style>"), *js = between(html, "<script>", "</script>");
    ck_assert_ptr_nonnull(css);
    ck_assert_ptr_nonnull(js);
    ck_assert_ptr_null(strstr(strstr(html, "</script>"), "<script")); /* one script */
    ck_assert_ptr_nonnull(strstr(js, "status.json"));
    check_hash(headers, "script-src", js);
    check_hash(headers, "style-src", css);
    ck_assert_ptr_nonnull(strstr(headers, "default-src 'none'"));
    ck_assert_ptr_nonnull(strstr(headers, "frame-ancestors 'none'"));
    free(css);
    free(js);
}
END_TEST

START_TEST(base64_vectors)
{
    /* RFC 4648, section 10 */
    static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const out[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char b[16];

    util_base64(in[_i], strlen(in[_i]), b);
    ck_assert_str_eq(b, out[_i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TCase *hist = tcase_create("history"), *page = tcase_create("page");

    CHECK_ADD(hist, history_deltas_gaps_since, history_window_is_bounded,
              history_redis_latency_and_down);
    CHECK_ADD(page, page_inline_and_admitted);
    tcase_add_loop_test(page, base64_vectors, 0, 7);
    suite_add_tcase(s, hist);
    suite_add_tcase(s, page);
    return check_run(s);
}
