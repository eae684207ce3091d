/* SPDX-License-Identifier: Apache-2.0 */
/* store_errors.h - error replies from Redis: their kind (the
 * spoa_ratelimit_redis_error_replies_total label), whether Redis can still
 * decide for us on that connection, whether a call is worth sending again,
 * one log line per kind per 10 s, and the `redis_errors` warning. Internal to
 * the store module.
 *
 * A refusal (READONLY, MASTERDOWN, NOREPLICAS, LOADING, NOPERM, OOM, NOAUTH,
 * WRONGPASS) is not about one call: every call on that connection will get
 * it until the operator (or a failover) changes something. The connection
 * then counts as down (spoa_ratelimit_redis_up 0, decisions fall back,
 * `degraded`) and is tried again with the backoff of an unreachable server
 * (store_conn.h), a probe call first.
 *
 * Every error reply but NOSCRIPT (reloaded at once) and a TRYAGAIN that a
 * retry got past raises the `redis_errors` warning, its message naming the
 * kind and what to do; the warning clears once no error reply has come for
 * [redis] errors_quiet (store_errors_tick). So does a reply that breaks the
 * contract (store_error_bad: kind bad_reply, or NOSCRIPT right after SCRIPT
 * LOAD), which also takes the connection down as a refusal does.
 */
#ifndef STORE_ERRORS_H
#define STORE_ERRORS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/metrics.h"

/* The kind of an error reply's text (its first word, and the few errors
 * that say the same thing in other words: a script's own ACL refusal is
 * NOPERM, Redis' "unauthenticated bulk length" is NOAUTH). Pure. */
enum metrics_redis_error store_error_kind(const char *err);

/* 1 when a reply of this kind means Redis cannot decide for us on that
 * connection (see the top), 0 otherwise. Pure. */
int store_error_refusal(enum metrics_redis_error kind);

/* TRYAGAIN (a Cluster slot migration holds some of a multi-key call's keys
 * on each side): send the call again after a short wait, as Redis Cluster
 * clients do. tries: retries already made; waited_us: since the call was
 * first sent; timeout_us: [redis] timeout. The wait in microseconds, or -1
 * when the call fails now (another kind, STORE_TRYAGAIN_MAX retries made, or
 * the wait would end past the timeout). Pure. */
#define STORE_TRYAGAIN_MAX 5
#define STORE_TRYAGAIN_WAIT_US 10000
long long store_error_retry_wait(enum metrics_redis_error kind, unsigned tries, uint64_t waited_us,
                                 uint64_t timeout_us);

/* The error code of err into out (its first word when made of capitals,
 * "ERR" for Redis' generic errors, else "other"): what the warning names.
 * Pure. */
void store_error_code(const char *err, char *out, size_t outlen);

/* What an operator should know or do about an error of kind (sentinel: the
 * reply came from a sentinel). A static string. Pure. */
const char *store_error_hint(enum metrics_redis_error kind, int sentinel);

/* What one error reply was about, for its log line. */
struct store_error_where {
    const char *server;  /* "redis" or "sentinel": which hint to give */
    const char *addr;    /* host:port or path */
    const char *command; /* what was refused: "AUTH", "EVALSHA <script>", ... */
    const char *user;    /* the ACL user, NULL: default */
    const char *prefix;  /* [redis] prefix: the key pattern the user needs */
};

/* Count one error reply of kind (err: its text), raise `redis_errors` and
 * log it: a refusal at warn (READONLY, MASTERDOWN, NOREPLICAS, LOADING, and
 * the Cluster's TRYAGAIN, CLUSTERDOWN, and BUSY) or error, at most once per
 * kind per 10 s with the number seen since the last line; NOSCRIPT not at
 * all (the caller reloads and says so); other at debug. Thread-safe. */
void store_error_note(enum metrics_redis_error kind, const char *err,
                      const struct store_error_where *w);

/* A reply that breaks the contract: kind METRICS_REDIS_BAD_REPLY (a script
 * reply store_reply_check.h rejects, or bytes hiredis cannot parse) or
 * METRICS_REDIS_NOSCRIPT (NOSCRIPT right after the script was loaded: a
 * reload that does not stick; the caller counted it already). Counted,
 * `redis_errors` raised, logged at error at most once per kind per 10 s
 * with the number seen since the last line. addr: host:port; what: the
 * script or command; why: what was wrong. The caller gives the connection
 * up: it is ready again only once a probe call gets a well-formed reply.
 * Thread-safe. */
void store_error_bad(enum metrics_redis_error kind, const char *addr, const char *what,
                     const char *why);

/* Clear `redis_errors` when no error reply has been noted for quiet_us
 * (now_us: util_now_us()). Called every second by each store. Thread-safe. */
void store_errors_tick(uint64_t now_us, uint64_t quiet_us);

#endif
