/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_setup.h - what a connection sends before it is ready (AUTH,
 * SELECT, ROLE, SCRIPT LOAD of every script, after a refusal a probe), what
 * the replies to them mean, and what a refusal (store_errors.h) marks. A
 * layer below store_conn.c, which drives it: the setup reads and updates the
 * connection's state (store_conn_int.h) and says what follows; the connection
 * acts on it (ready, or given up and made again after the backoff). Private
 * to store_conn.c.
 */
#ifndef STORE_CONN_SETUP_H
#define STORE_CONN_SETUP_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "metrics/metrics.h"
#include "store_conn_int.h"

/* What a setup reply answers (its priv): a script index, or one of these. */
enum { SETUP_AUTH = -1, SETUP_SELECT = -2, SETUP_ROLE = -3, SETUP_PROBE = -4, SETUP_FUNCTION = -5 };

/* What follows a setup reply, or a refusal. */
enum store_conn_setup_next {
    STORE_CONN_SETUP_WAIT,  /* more replies to come (or nothing to do) */
    STORE_CONN_SETUP_READY, /* the last one: the connection is ready */
    STORE_CONN_SETUP_LOST,  /* give the connection up and retry after the backoff;
                             * why is in conn->last_err, said already */
};

/* The scripts by enum store_script, then the batch script (script.h): their
 * source (SCRIPT LOAD) and their names (logs). */
extern const char *const store_conn_script_src[SCRIPT_COUNT + 1];
extern const char *const store_conn_script_names[SCRIPT_COUNT + 1];

/* The scripts as one Redis function library (lua/library.lua, made by
 * lua/batch.sh -l): loaded with FUNCTION LOAD after the scripts, and called
 * with FCALL where Redis has it and the ACL allows it (conn->fcall), EVALSHA
 * otherwise. Its name is spoa_ratelimit_ and 16 hex digits of the SHA-256 of
 * its text, so that agents of other builds on the same Redis (a rolling
 * upgrade) each call their own; fn[i] names script i's function (fn
 * [SCRIPT_BATCH] the batch's). The same for every connection: made once. */
struct store_library {
    char name[32];
    char fn[SCRIPT_COUNT + 1][48];
    const char *src; /* FUNCTION LOAD's argument */
    size_t len;
};
const struct store_library *store_conn_library(void);

/* Send FUNCTION LOAD of the library on conn (a setup step: its reply goes to
 * on_reply with SETUP_FUNCTION, and counts in conn->loading). 0 sent. */
int store_conn_load_library(struct store_conn *conn, redisCallbackFn *on_reply);

/* Set conn->fcall, keeping the count of such connections (metrics). */
void store_conn_set_fcall(struct store_conn *conn, int on);

/* Queue the setup commands on the new context conn->ac: they go out, in
 * order, once the connect is made. on_reply (the connection's) gets each
 * reply, priv a script index or a SETUP_* value, and hands it to
 * store_conn_setup_reply(). */
void store_conn_send_setup(struct store_conn *conn, redisCallbackFn *on_reply);

/* The reply to a setup command (what: its priv), also to the SCRIPT LOAD of
 * a NOSCRIPT reload (which counted itself in conn->loading). */
enum store_conn_setup_next store_conn_setup_reply(struct store_conn *conn, long what,
                                                  const redisReply *reply);

/* Count an error reply to command and log it (store_error_note). */
void store_conn_note_error(struct store_conn *conn, enum metrics_redis_error kind, const char *err,
                           const char *command);

/* A reply past the caps (store_reply_cap.h, conn->cap.why): counted as the
 * reply_too_large kind, with the redis_errors warning and a log line (at
 * most one per 10 s, store_error_note); why receives the reason to give
 * conn_lost, which the caller calls. */
void store_conn_too_large(struct store_conn *conn, char *why, size_t len);

/* Redis refused a call with an error every call will get (a refusal,
 * store_errors.h): mark the connection so that it is made again with a probe
 * first (of slot on a Cluster node: the refused key's), why in
 * conn->last_err. The connection is then to be given up (LOST). */
void store_conn_refused(struct store_conn *conn, enum metrics_redis_error kind, const char *err,
                        int slot);

/* A reply that breaks the contract (store_error_bad: kind
 * METRICS_REDIS_BAD_REPLY, or METRICS_REDIS_NOSCRIPT for a reload that does
 * not stick): noted, and the connection marked as a refusal marks it (the
 * caller gives it up; it is made again after the backoff, ready only once
 * a probe gets a well-formed reply). what: the script or command; why:
 * what was wrong; slot: of the call's key, or -1. */
void store_conn_bad(struct store_conn *conn, enum metrics_redis_error kind, const char *what,
                    const char *why, int slot);

#endif
