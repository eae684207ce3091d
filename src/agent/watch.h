/* SPDX-License-Identifier: Apache-2.0 */
/* watch.h - the conditions the agent finds in itself that make it limit less
 * than configured, raised and cleared as warnings (core/warning.h):
 *
 *   haproxy_never_asks    SPOP peers connect and send HELLO (health checks
 *                         included) but no NOTIFY has come for [agent]
 *                         notify_silence, the agent up that long: HAProxy's
 *                         send-spoe-group line, or its condition, is missing.
 *                         Cleared by the next NOTIFY.
 *   slots_never_released  a concurrency rule's slots are freed by max_hold
 *                         and none was ever given back by its release
 *                         message since the rules were loaded: HAProxy's
 *                         http-response release line is missing. Cleared by
 *                         a release of that rule.
 *   secret_readable       a password_file or stats_auth_file readable by
 *                         every user, or the config file holding a password
 *                         inline while every user can read it. Checked at
 *                         start and at each reload.
 *
 * The counters come from metrics.h (relaxed atomics the workers bump); the
 * clock is passed in, never read here, so that unit tests drive it.
 * Threads: the main loop only (its 1 s timer, start and reload). */
#ifndef WATCH_H
#define WATCH_H

#include <stddef.h>
#include <stdint.h>

struct config;
struct ruleset;
struct metrics_rule;

/* A concurrency rule of the rules in force, with its counters as they were
 * when the rules were loaded. */
struct watch_rule {
    struct metrics_rule *m; /* lives until exit (metrics.h) */
    char name[48];
    char release[64]; /* its release message, cut for the message */
    uint64_t limit, max_hold_ms;
    uint64_t expired0, released0;
    int released; /* a release came since the rules were loaded */
};

/* Zeroed, then watch_init(); owned by the agent (main.c). */
struct watch {
    uint64_t started_ms;       /* monotonic, ms */
    uint64_t hellos, notifies; /* frames_in at the last tick */
    uint64_t last_hello_ms;    /* the last tick that saw a HELLO come; 0 never */
    uint64_t peers_since_ms;   /* peers around since, no NOTIFY meanwhile; 0: none */
    struct watch_rule *rules;
    size_t nrules;
    unsigned configs; /* watch_config calls */
    int reloaded;     /* the rules in force came by a reload (for the message) */
};

/* The agent starts at now_ms (monotonic). */
void watch_init(struct watch *w, uint64_t now_ms);
void watch_free(struct watch *w);

/* The rules in force changed (start, SIGHUP, a version from Redis): take
 * the concurrency rules' counters as their new baseline, and check the
 * secrets of rs->cfg (secret_readable). Out of memory: the slot check is
 * off until the next call (said once in the log). */
void watch_config(struct watch *w, const struct ruleset *rs);

/* Once a second (and as often as wanted): haproxy_never_asks and
 * slots_never_released, from the counters and cfg's notify_silence. */
void watch_tick(struct watch *w, const struct config *cfg, uint64_t now_ms);

/* secret_readable for cfg alone (watch_config calls it). */
void watch_secrets(const struct config *cfg);

#endif
