/* SPDX-License-Identifier: Apache-2.0 */
/* mismatch.c - silent misconfigurations, counted and sampled. */
#include "mismatch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define RULE_TALLIES 64 /* rules reported by name; more share the last tally */

/* A kind's count is in totals[]; a rule's (MISMATCH_ARG) in its tally. The
 * request path counts with one atomic add (two for a rule) and keeps an
 * example only when none was kept since the last report: the lock and the
 * copy are paid once per report period, not per mismatch. */
struct tally {
    char rule[48];                    /* MISMATCH_ARG: written once, before used */
    atomic_int used;                  /* MISMATCH_ARG: rule[] is set */
    atomic_int taken;                 /* an example was kept since the last report */
    atomic_uint_fast64_t count;       /* MISMATCH_ARG */
    char sample[MISMATCH_SAMPLE + 1]; /* under lock */
    uint64_t reported;                /* report only, under lock */
    uint64_t reported_us;             /* 0: never */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct tally kinds[MISMATCH_KINDS];
static struct tally args[RULE_TALLIES]; /* MISMATCH_ARG, per rule */
static atomic_uint_fast64_t totals[MISMATCH_KINDS];

/* A copy safe to log: bytes a log line or a logfmt value could be forged with
 * (quotes, backslashes, control and non-ASCII bytes) become '?'. */
static void copy(char *dst, size_t cap, const char *src, size_t len)
{
    if (len > cap - 1)
        len = cap - 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\' ? '?' : (char)c;
    }
    dst[len] = '\0';
}

/* The tally of a rule, from its name: tallies are only ever added, so a rule
 * seen before is found without the lock. */
static struct tally *arg_tally(const char *rule)
{
    size_t i;

    for (i = 0; i < RULE_TALLIES && atomic_load_explicit(&args[i].used, memory_order_acquire); i++)
        if (strcmp(args[i].rule, rule) == 0)
            return &args[i];
    if (i == RULE_TALLIES)
        return &args[RULE_TALLIES - 1]; /* all taken: the last one is shared */
    pthread_mutex_lock(&lock);
    for (i = 0; i < RULE_TALLIES - 1 && atomic_load_explicit(&args[i].used, memory_order_relaxed);
         i++)
        if (strcmp(args[i].rule, rule) == 0)
            break;
    if (!atomic_load_explicit(&args[i].used, memory_order_relaxed)) {
        copy(args[i].rule, sizeof(args[i].rule), rule, strlen(rule));
        atomic_store_explicit(&args[i].used, 1, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
    return &args[i];
}

static struct tally *tally_of(enum mismatch_kind kind, const char *rule)
{
    return kind == MISMATCH_ARG && rule ? arg_tally(rule) : &kinds[kind];
}

int mismatch_wanted(enum mismatch_kind kind)
{
    return !atomic_load_explicit(&kinds[kind].taken, memory_order_relaxed);
}

void mismatch_note(enum mismatch_kind kind, const char *rule, const char *sample, size_t len)
{
    struct tally *s = tally_of(kind, rule);

    atomic_fetch_add_explicit(&totals[kind], 1, memory_order_relaxed);
    if (s != &kinds[kind])
        atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
    if (len == 0 || atomic_load_explicit(&s->taken, memory_order_relaxed))
        return;
    pthread_mutex_lock(&lock); /* once per report period: taken and the copy agree */
    if (!atomic_load_explicit(&s->taken, memory_order_relaxed)) {
        copy(s->sample, sizeof(s->sample), sample, len);
        atomic_store_explicit(&s->taken, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
}

uint64_t mismatch_total(enum mismatch_kind kind)
{
    return atomic_load_explicit(&totals[kind], memory_order_relaxed);
}

struct report {
    char rule[48];
    char sample[MISMATCH_SAMPLE + 1];
    uint64_t n;
};

/* Whether tally s (count so far) has something to report now; if so, take it into *out. */
static int take(struct tally *s, uint64_t count, uint64_t now_us, uint64_t every_us,
                struct report *out)
{
    if (count <= s->reported || (s->reported_us && now_us - s->reported_us < every_us))
        return 0;
    memcpy(out->rule, s->rule, sizeof(out->rule));
    memcpy(out->sample, s->sample, sizeof(out->sample));
    out->n = count - s->reported;
    s->reported = count;
    s->reported_us = now_us ? now_us : 1;
    s->sample[0] = '\0'; /* reported: the next report shows a new one */
    atomic_store_explicit(&s->taken, 0, memory_order_relaxed);
    return 1;
}

void mismatch_report(uint64_t now_us, uint64_t every_us,
                     void (*cb)(enum mismatch_kind kind, const char *rule, uint64_t n,
                                const char *sample))
{
    struct report out[MISMATCH_KINDS + RULE_TALLIES];
    enum mismatch_kind kind_of[MISMATCH_KINDS + RULE_TALLIES];
    size_t n = 0;

    pthread_mutex_lock(&lock); /* copy out: the callback logs outside the lock */
    for (int k = 0; k < MISMATCH_KINDS; k++) {
        if (k == MISMATCH_ARG)
            continue;
        if (take(&kinds[k], mismatch_total((enum mismatch_kind)k), now_us, every_us, &out[n]))
            kind_of[n++] = (enum mismatch_kind)k;
    }
    for (size_t i = 0; i < RULE_TALLIES && atomic_load(&args[i].used); i++) {
        if (take(&args[i], atomic_load(&args[i].count), now_us, every_us, &out[n]))
            kind_of[n++] = MISMATCH_ARG;
    }
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < n; i++)
        cb(kind_of[i], out[i].rule[0] ? out[i].rule : NULL, out[i].n, out[i].sample);
}

void mismatch_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(kinds, 0, sizeof(kinds));
    memset(args, 0, sizeof(args));
    for (int k = 0; k < MISMATCH_KINDS; k++)
        atomic_store(&totals[k], 0);
    pthread_mutex_unlock(&lock);
}
