/* SPDX-License-Identifier: Apache-2.0 */
/* rx_bench.c - what a `match` costs per decision: glibc's regexec (what the
 * agent used before) against PCRE2 through core/rx.h (what it uses now), on
 * the match lines of the kit's rules (haproxy/ratelimit.ini) and the texts a
 * request brings. `make bench-regex` runs it; medians of 5 runs, ns per
 * decision (every rule's matches against one request's args, as
 * rules_match() does). Not a test: it asserts nothing. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rx.h"

/* the kit's match lines: (arg, pattern) */
static const char *const kit[][2] = {
    {"plan", "^free$"},
    {"plan", "^(paid|enterprise)$"},
    {"plan", "^custom$"},
    {"path", "^/login"},
};
#define NKIT (sizeof(kit) / sizeof(kit[0]))

/* requests: plan and path */
static const char *const reqs[][2] = {
    {"free", "/api/v1/orders/42"},          {"paid", "/login"},
    {"enterprise", "/api/v2/items?page=3"}, {"custom", "/static/app.js"},
    {"free", "/login?next=/account"},       {"unknown-plan", "/"},
};
#define NREQ (sizeof(reqs) / sizeof(reqs[0]))

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *text_of(size_t r, const char *arg)
{
    return strcmp(arg, "plan") == 0 ? reqs[r][0] : reqs[r][1];
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    regex_t posix[NKIT];
    struct rx *pcre[NKIT];
    struct rx_scratch scr = {0};
    char err[256];
    double tp[5], tr[5];
    volatile long sink = 0;

    for (size_t i = 0; i < NKIT; i++) {
        if (regcomp(&posix[i], kit[i][1], REG_EXTENDED | REG_NOSUB) != 0 ||
            !(pcre[i] = rx_compile(kit[i][1], err, sizeof(err)))) {
            fprintf(stderr, "rx_bench: cannot compile %s\n", kit[i][1]);
            return 1;
        }
    }
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (long n = 0; n < iters; n++)
            for (size_t r = 0; r < NREQ; r++)
                for (size_t i = 0; i < NKIT; i++)
                    sink += regexec(&posix[i], text_of(r, kit[i][0]), 0, NULL, 0) == 0;
        double t1 = now_ns();
        for (long n = 0; n < iters; n++)
            for (size_t r = 0; r < NREQ; r++)
                for (size_t i = 0; i < NKIT; i++) {
                    const char *t = text_of(r, kit[i][0]);
                    sink += rx_match(pcre[i], t, strlen(t), &scr) == 1;
                }
        double t2 = now_ns();
        tp[run] = (t1 - t0) / ((double)iters * NREQ);
        tr[run] = (t2 - t1) / ((double)iters * NREQ);
    }
    qsort(tp, 5, sizeof(double), cmp);
    qsort(tr, 5, sizeof(double), cmp);
    printf("match lines of the kit (%zu per decision), %zu requests x %ld, median of 5:\n", NKIT,
           NREQ, iters);
    printf("  regexec (glibc, POSIX)   %8.1f ns per decision\n", tp[2]);
    printf("  PCRE2 (%s)  %8.1f ns per decision  (%.2fx)\n",
           rx_jit_available() ? "JIT, core/rx" : "interpreter ", tr[2], tp[2] / tr[2]);
    for (size_t i = 0; i < NKIT; i++) {
        regfree(&posix[i]);
        rx_free(pcre[i]);
    }
    rx_scratch_free(&scr);
    return sink < 0;
}
