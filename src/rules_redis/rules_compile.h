/* SPDX-License-Identifier: Apache-2.0 */
/* rules_compile.h - a rule set loaded off the agent's loop: a version from
 * Redis (rules_redis.c) or the file again (SIGHUP) is parsed and its
 * regexes compiled in a thread of its own, and the outcome handed back to
 * the loop (an ev_async), where it is put in force. Meanwhile the rules in
 * force decide every request: the loop also serves the Redis calls that
 * NOTIFYs wait for, and a large set compiled there stalled them (issue 43;
 * its cost is bounded by the rule set's budget, config.h CFG_BUDGET_*).
 *
 * One load at a time: a version and a SIGHUP both read the file and the
 * rules in force, so each waits for the other: the rule store polls only
 * while none is in flight (rules_compile_busy), a SIGHUP waits its turn
 * (rules_compile_reload). The thread touches nothing but its job (the
 * config module is pure); the loop reads the outcome after joining it.
 */
#ifndef RULES_COMPILE_H
#define RULES_COMPILE_H

#include <stddef.h>

#include <stdint.h>

struct ev_loop;
struct config;
struct rules_compile;

/* The rule text in force from the store ([rules] source = redis), kept by
 * the rule store (rules_redis_in_force) and read by a SIGHUP's load when it
 * starts, which may be after a version's load it waited for. */
struct rules_in_force {
    char *text; /* NULL: none (the file's own rules) */
    size_t len;
    uint64_t version;
};

/* A load's outcome, valid for the duration of the done callback. */
struct rules_compile_result {
    struct config *cfg; /* loaded: the callee's from here on; NULL: refused */
    const char *err;    /* when refused: "NAME[:LINE]: message" lines */
    const char *text;   /* the rule text loaded (NULL: the file alone) */
    size_t len;
};

typedef void rules_compile_done_fn(void *ctx, struct rules_compile_result *res);

/* Loads run on loop's behalf. NULL when out of memory. */
struct rules_compile *rules_compile_new(struct ev_loop *loop);

/* Load, in a thread, and call done on the loop with the outcome:
 * - text NULL: the file at path (a SIGHUP with its own rules);
 * - text and sha256 NULL: path with text's [rule:*] sections instead of its
 *   own (a SIGHUP with the rules from Redis in force);
 * - text and sha256: a version from Redis, checked as --push checks it
 *   (rules_redis_check_version: its sha256, errors, not empty).
 * name stands for text in errors. Everything is copied. 0 started; -1 not
 * (a load in flight, out of memory, no thread): done is never called. */
int rules_compile_start(struct rules_compile *c, const char *path, const char *text, size_t len,
                        const char *sha256, const char *name, rules_compile_done_fn *done,
                        void *ctx);

/* Whether a load is in flight (its done not called yet). */
int rules_compile_busy(const struct rules_compile *c);

/* SIGHUP: the file at path loaded again, with the rules of rs's version
 * in force instead of its own [rule:*] sections when it has one (rs NULL:
 * source = file), then done on the loop. A load in flight (a version, or
 * an earlier SIGHUP) is waited for, and the rules read once it ended: the
 * version it may have put in force stays. Several SIGHUPs while waiting
 * are one load (each gets its done: the last). 0, or -1 out of memory
 * (done never called). */
int rules_compile_reload(struct rules_compile *c, const char *path,
                         const struct rules_in_force *in_force, rules_compile_done_fn *done,
                         void *ctx);

/* Wait for a load in flight (bounded: the rule set's budget), drop its
 * outcome without calling done, and free. NULL is a no-op. */
void rules_compile_free(struct rules_compile *c);

#endif
