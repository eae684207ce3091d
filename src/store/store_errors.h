/* SPDX-License-Identifier: Apache-2.0 */
/* store_errors.h - error replies from Redis: their kind (the
 * spoa_ratelimit_redis_error_replies_total label), whether Redis can still
 * decide for us on that connection, and one log line per kind per 10 s.
 * Internal to the store module.
 *
 * A refusal (READONLY, MASTERDOWN, NOPERM, OOM, NOAUTH, WRONGPASS) is not
 * about one call: every call on that connection will get it until the
 * operator (or a failover) changes something. The connection then counts as
 * down (spoa_ratelimit_redis_up 0, decisions fall back, `degraded`) and is
 * tried again with the backoff of an unreachable server (store_conn.h).
 */
#ifndef STORE_ERRORS_H
#define STORE_ERRORS_H

#include "metrics/metrics.h"

/* The kind of an error reply's text (its first word, and the few errors
 * that say the same thing in other words: a script's own ACL refusal is
 * NOPERM, Redis' "unauthenticated bulk length" is NOAUTH). Pure. */
enum metrics_redis_error store_error_kind(const char *err);

/* 1 when a reply of this kind means Redis cannot decide for us on that
 * connection (see the top), 0 otherwise. Pure. */
int store_error_refusal(enum metrics_redis_error kind);

/* What one error reply was about, for its log line. */
struct store_error_where {
    const char *server;  /* "redis" or "sentinel": which hint to give */
    const char *addr;    /* host:port or path */
    const char *command; /* what was refused: "AUTH", "EVALSHA tb_claim", ... */
    const char *user;    /* the ACL user, NULL: default */
    const char *prefix;  /* [redis] prefix: the key pattern the user needs */
};

/* Count one error reply of kind (err: its text) and log it: a refusal at
 * warn (READONLY, MASTERDOWN) or error, at most once per kind per 10 s with
 * the number seen since the last line; NOSCRIPT not at all (the caller
 * reloads and says so); other at debug. */
void store_error_note(enum metrics_redis_error kind, const char *err,
                      const struct store_error_where *w);

#endif
