/* SPDX-License-Identifier: Apache-2.0 */
/* mismatch.h - silent misconfigurations, counted and sampled: NOTIFYs whose
 * message no rule reads, rules skipped because an argument they key or match
 * on never arrives, requests to which no rule applied. A name that HAProxy
 * and the INI file spell differently (key = api_key while HAProxy sends key,
 * message = check_rate for check-rate) or a map value no rule matches would
 * otherwise let requests pass unlimited with no trace.
 *
 * The request path counts (an atomic add) and keeps one example per report
 * period (a short copy, under a mutex taken once per period);
 * mismatch_report(), from a timer,
 * hands each kind with new counts to a callback for a log line. Counters are
 * rendered by metrics_render(). Pure; thread-safe.
 */
#ifndef MISMATCH_H
#define MISMATCH_H

#include <stddef.h>
#include <stdint.h>

#define MISMATCH_SAMPLE 96 /* bytes of an example kept */

enum mismatch_kind {
    MISMATCH_MESSAGE = 0, /* a NOTIFY message no rule reads */
    MISMATCH_ARG,         /* a rule skipped: an argument it needs is missing or empty */
    MISMATCH_NO_RULE,     /* a NOTIFY to which no rule applied */
    MISMATCH_KINDS,
};

/* Count one. rule: the rule (MISMATCH_ARG), else NULL. sample: what to show
 * (the message name, the argument's name, the match arguments' values),
 * copied and cut at MISMATCH_SAMPLE when no example was kept since the last
 * report; len 0: none (see mismatch_wanted). */
void mismatch_note(enum mismatch_kind kind, const char *rule, const char *sample, size_t len);

/* Whether the next mismatch of kind (not MISMATCH_ARG) would keep its
 * example: a caller whose example costs something to build builds it only
 * then. */
int mismatch_wanted(enum mismatch_kind kind);

/* Total counts since start, by kind. */
uint64_t mismatch_total(enum mismatch_kind kind);

/* For each kind (MISMATCH_ARG: each rule) with new counts since it was last
 * reported, at most once per every_us (the first time at once): cb with the
 * new count and an example (the first since the last report). now_us: a
 * monotonic clock. */
void mismatch_report(uint64_t now_us, uint64_t every_us,
                     void (*cb)(enum mismatch_kind kind, const char *rule, uint64_t n,
                                const char *sample));

/* Forget everything (tests). */
void mismatch_reset(void);

#endif
