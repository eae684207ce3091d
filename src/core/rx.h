/* SPDX-License-Identifier: Apache-2.0 */
/* rx.h - the regexes of `match` lines, with PCRE2: compiled and matched in
 * bounded time and memory, whatever the pattern (it may come from a file
 * pushed to a whole fleet) and whatever the text (it comes from clients).
 *
 * Bounds: a pattern of at most RX_MAX_LEN bytes, parentheses nested at most
 * RX_MAX_NEST deep, compiled to at most RX_MAX_COMPILED bytes; a match stops
 * after RX_MATCH_LIMIT backtracking steps, RX_DEPTH_LIMIT nested
 * backtracking points and RX_HEAP_LIMIT_KIB of heap (the interpreter), or
 * PCRE2's 32 KiB JIT stack (JIT code), and then answers RX_ELIMIT.
 *
 * Matching is over bytes (no UTF mode), over the whole text (a NUL inside
 * it is a byte like any other), with `$` only at the very end as in POSIX,
 * and without captures: `\1` and other back-references are refused at
 * compile time. Compiled regexes are shared read-only by every thread; each
 * thread brings its own rx_scratch.
 */
#ifndef CORE_RX_H
#define CORE_RX_H

#include <stddef.h>

#define RX_MAX_LEN 1024
#define RX_MAX_NEST 64
#define RX_MAX_COMPILED (32 * 1024)
#define RX_MATCH_LIMIT 100000
#define RX_DEPTH_LIMIT 1000
#define RX_HEAP_LIMIT_KIB 1024

#define RX_ELIMIT (-2) /* a match limit stopped the match: no answer */

struct rx;

/* What one thread needs to match: reused across matches, freed with
 * rx_scratch_free(). Zero-initialised is empty and valid. */
struct rx_scratch {
    void *match_data;
};

/* Compile pattern (NUL-terminated). NULL with why (errlen bytes) on a bad or
 * too costly pattern, or out of memory. JIT-compiled where the platform has
 * it; without JIT it is interpreted, within the same limits. */
struct rx *rx_compile(const char *pattern, char *err, size_t errlen);
void rx_free(struct rx *re); /* NULL is a no-op */

/* The memory re holds for its code: the compiled pattern and its JIT code
 * (RX_MAX_COMPILED bounds the first only; a rule set's budget, config.h,
 * bounds the sum over its regexes). */
size_t rx_size(const struct rx *re);

/* Whether text (len bytes) holds a match: 1, 0, RX_ELIMIT when a limit
 * stopped the match, or -1 when out of memory. */
int rx_match(const struct rx *re, const char *text, size_t len, struct rx_scratch *scr);

void rx_scratch_free(struct rx_scratch *scr);

/* Whether rx_compile() JIT-compiles on this machine (for logs and docs). */
int rx_jit_available(void);

#endif
