/* SPDX-License-Identifier: Apache-2.0 */
/* warning.h - the registry of active warnings: what makes the agent limit less
 * than the operator believes, or not at all.
 *
 * One mechanism for every kind (interface.md, "Warnings: nothing silent"):
 * a kind is raised with a message that names what to change, and cleared when
 * the condition is gone. Each start is logged once at warn, each clear once
 * (also at warn, so that a log filtered at warn shows both ends); the status
 * page's banner, `warnings` in /status.json and the gauge
 * spoa_ratelimit_warning{kind} read the registry.
 *
 * Thread-safe (one mutex; raising and clearing are rare, state changes only).
 * Raising an active kind again only updates its message, silently: callers
 * may re-raise on every check without flooding the log.
 */
#ifndef WARNING_H
#define WARNING_H

#include <stddef.h>
#include <time.h>

/* Never renamed: the names are the gauge's label values and the JSON's. */
enum warning_kind {
    WARNING_HAPROXY_NEVER_ASKS,
    WARNING_SLOTS_NEVER_RELEASED,
    WARNING_REDIS_STATE_LOST,
    WARNING_RULES_STORE_LOST,
    WARNING_REDIS_MAY_EVICT,
    WARNING_REDIS_CLOCK_JUMP,
    WARNING_REDIS_UNCONFIRMED,
    WARNING_REDIS_ERRORS,
    WARNING_SECRET_READABLE,
    WARNING_REDIS_SLOW,
    WARNING_REDIS_AUTH_REFUSED,
    WARNING_GLOBAL_UNREACHABLE,
    WARNING_GLOBAL_STATE_LOST,
    WARNING_KINDS
};

/* "haproxy_never_asks", ...: indexed by enum warning_kind. */
extern const char *const warning_kind_names[WARNING_KINDS];

/* Room for what is wrong and what to change, e.g. the HAProxy line to add. */
#define WARNING_MESSAGE_MAX 512

/* Raise kind k with a message (printf format; cut at WARNING_MESSAGE_MAX).
 * Logs `level=warn msg="warning" kind=K message="..."` when k was not active;
 * otherwise replaces the message without logging. Returns 1 when k started. */
int warning_raise(enum warning_kind k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear kind k: logs `msg="warning cleared" kind=K` when it was active.
 * Returns 1 when k was active. */
int warning_clear(enum warning_kind k);

/* 1 while k is active. */
int warning_active(enum warning_kind k);

/* One active warning, copied out. since: wall clock (Unix seconds). */
struct warning_view {
    enum warning_kind kind;
    time_t since;
    char message[WARNING_MESSAGE_MAX];
};

/* Copies up to max active warnings, in kind order, into out; returns how many
 * are active (may exceed max). */
size_t warning_list(struct warning_view *out, size_t max);

/* Clears every kind without logging (tests). */
void warning_reset(void);

#endif
