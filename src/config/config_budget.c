/* SPDX-License-Identifier: Apache-2.0 */
/* config_budget.c - the regexes of a rule set, compiled once the whole set
 * is read and within the budget of a whole rule set (config.h:
 * CFG_BUDGET_*). Each regex is bounded alone by core/rx.h; this bounds
 * their sum, so that no rule set that loads can stall an agent (or a whole
 * fleet applying it at the same poll) for seconds or take hundreds of MB.
 *
 * The text is summed first: a set over that budget compiles nothing. Then
 * the regexes compile in file order, and the first one that takes the sum
 * of compiled sizes (JIT code included) or of CPU time over its budget
 * stops the compiling: the error names the budget and the figures. The
 * error is about the whole set, so it has no line ("NAME: ...").
 */
#include "config_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/rx.h"

/* CPU time of this thread: a compile's cost, whatever else the machine
 * runs (wall time would refuse a set on a busy host and not on an idle
 * one). */
static uint64_t thread_cpu_us(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == -1)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#define BUDGET_DOC "(doc/configuration.md, \"The budget of a rule set\")"

/* (a macro: a static's initializer must be a constant expression, and
 * another object is not one in C, whatever gcc lets through) */
#define BUDGET_DEFAULTS                                                                            \
    {                                                                                              \
        CFG_BUDGET_PATTERN_BYTES, CFG_BUDGET_COMPILED_BYTES, CFG_BUDGET_COMPILE_MS                 \
    }
static const struct cfg_budget defaults = BUDGET_DEFAULTS;
static struct cfg_budget budget = BUDGET_DEFAULTS;

void config_budget_set(const struct cfg_budget *b)
{
    budget = b ? *b : defaults;
}

void config_compile_matches(struct parse_state *st)
{
    struct config *cfg = st->cfg;
    struct cfg_regex_use *u = &cfg->regex_use;
    size_t n = 0, done = 0;
    char why[160];

    memset(u, 0, sizeof(*u));
    for (size_t i = 0; i < cfg->nrules; i++)
        for (size_t m = 0; m < cfg->rules[i].nmatches; m++) {
            n++;
            u->pattern_bytes += strlen(cfg->rules[i].matches[m].pattern);
        }
    u->regexes = n;
    if (u->pattern_bytes > budget.pattern_bytes) {
        config_errors_add(&st->errors, 0,
                          "rule set over its budget: its %zu regexes hold %zu bytes of text, "
                          "more than the %zu bytes a whole rule set may hold " BUDGET_DOC,
                          n, u->pattern_bytes, budget.pattern_bytes);
        return;
    }
    uint64_t t0 = thread_cpu_us();
    for (size_t i = 0; i < cfg->nrules; i++) {
        struct cfg_rule *r = &cfg->rules[i];

        for (size_t k = 0; k < r->nmatches; k++) {
            struct cfg_match *m = &r->matches[k];

            done++;
            if (!(m->re = rx_compile(m->pattern, why, sizeof(why)))) {
                config_errors_add(&st->errors, m->line, "bad regex '%.80s' in 'match': %s",
                                  m->pattern, why);
                continue;
            }
            u->compiled_bytes += rx_size(m->re);
            u->compile_us = thread_cpu_us() - t0;
            if (u->compiled_bytes > budget.compiled_bytes) {
                config_errors_add(&st->errors, 0,
                                  "rule set over its budget: its regexes compile to more than "
                                  "%zu bytes with their JIT code (%zu by regex %zu of %zu), the "
                                  "most a whole rule set may take " BUDGET_DOC,
                                  budget.compiled_bytes, u->compiled_bytes, done, n);
                return;
            }
            if (u->compile_us > budget.compile_ms * 1000ULL) {
                config_errors_add(&st->errors, 0,
                                  "rule set over its budget: compiling its regexes took more "
                                  "than %u ms of CPU (%llu ms by regex %zu of %zu), the most a "
                                  "whole rule set may take " BUDGET_DOC,
                                  budget.compile_ms, (unsigned long long)(u->compile_us / 1000),
                                  done, n);
                return;
            }
        }
    }
}
