/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_errors.c - what a connection makes of an error reply to one of
 * its script calls: TRYAGAIN (waited out, or a batch split into its calls),
 * a lost function library or script (loaded again), an ACL that refuses
 * FCALL (EVALSHA from then on), a redirect (the owner's hook), a refusal or
 * a reload that does not stick (the connection given up); the calls that
 * wait out a TRYAGAIN, and failing calls when the connection goes; and why
 * a connection closed (a reply that broke it, or the socket). What an error
 * means by kind is store_errors.c's; what the connection does about it is
 * decided here and done by store_conn.c, which sends, resends and gives the
 * connection up (a layer below it, as store_conn_setup.c is). The lifetime
 * rules at the top of store_conn.c hold here too.
 */
#include "store_conn_int.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "metrics/metrics.h"
#include "store_cmd.h"
#include "store_conn_setup.h"
#include "store_errors.h"
#include "store_reply.h"

/* ---- calls that fail, calls that wait ------------------------------------------ */

void store_conn_fail_list(struct store_cmd *c, const char *why)
{
    struct store_cmd *next;

    for (; c; c = next) {
        next = c->next;
        c->next = NULL;
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, why);
    }
}

/* TRYAGAIN: a Cluster slot migration has some of c's keys on each side, for
 * a moment. Sent again after a short wait, as Redis Cluster clients do
 * (store_error_retry_wait), on this connection: once the slot has moved,
 * the answer is a -MOVED, followed as ever (later_cb in store_conn.c sends
 * it). 1 when c was taken care of. */
static int try_again(struct store_conn *conn, struct store_cmd *c, enum metrics_redis_error kind)
{
    uint64_t now = util_now_us();
    long long wait =
        store_error_retry_wait(kind, c->tries, now - c->first_us, conn->env->timeout_us);

    if (wait < 0)
        return 0; /* failed as any error reply: counted, warned */
    METRIC_INC(redis_error_replies[kind]);
    c->tries++;
    c->next = NULL;
    if (conn->ltail)
        conn->ltail->next = c;
    else
        conn->lhead = c;
    conn->ltail = c;
    conn->env->pending++;
    if (!ev_is_active(&conn->later)) {
        ev_timer_set(&conn->later, (double)wait / 1e6, 0.);
        ev_timer_start(conn->env->loop, &conn->later);
    }
    LOG_DEBUG("\"redis TRYAGAIN: sending again\" addr=%s tries=%u", log_val(conn->name),
              (unsigned)c->tries);
    return 1;
}

void store_conn_later_fail(struct store_conn *conn, const char *why)
{
    struct store_cmd *l = conn->lhead;

    ev_timer_stop(conn->env->loop, &conn->later);
    for (struct store_cmd *c = l; c; c = c->next)
        conn->env->pending--;
    conn->lhead = conn->ltail = NULL;
    store_conn_fail_list(l, why);
}

/* ---- error replies --------------------------------------------------------------- */

/* TRYAGAIN to batch b: a Cluster slot migration has some of its keys on
 * each side. A batch cannot follow an -ASK for some of its keys, and
 * waiting until the slot has moved can outlast the timeout (the backstop
 * then decides: issue 42 measured +3 to +6 over the bound). Its calls go
 * again one by one, at once (STORE_CONN_ERR_SPLIT): a call of one key never
 * meets TRYAGAIN; the source runs it, or answers -ASK for a key already
 * moved, followed as ever. */
static enum store_conn_err split_batch(struct store_conn *conn, struct store_cmd *b)
{
    METRIC_INC(redis_error_replies[METRICS_REDIS_TRYAGAIN]);
    LOG_DEBUG("\"redis TRYAGAIN: sending a batch's calls one by one\" addr=%s calls=%u",
              log_val(conn->name), b->nmembers);
    return STORE_CONN_ERR_SPLIT;
}

/* An error reply to c, sent as FCALL, that EVALSHA would not get. No such
 * function (FUNCTION FLUSH, a Redis restarted without its data): load the
 * library again and send c again, in order on this connection, once; then
 * as EVALSHA. An ACL that refuses FCALL: EVALSHA on this connection from now
 * on, c sent again so. 1 when c is to be sent again. */
static int fcall_failed(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                        const char *err, enum metrics_redis_error kind, redisCallbackFn *setup_cb)
{
    if (strncmp(err, "ERR Function not found", 22) == 0) {
        /* one FUNCTION LOAD for all the calls that were in flight: c goes
         * after it on this connection either way */
        if (c->fn_retried) {
            store_conn_set_fcall(conn, 0);
        } else if (!conn->fcall_loading) {
            LOG_INFO("\"redis lost its functions; reloading\" addr=%s function=%s",
                     log_val(conn->name), store_conn_library()->fn[c->script]);
            if (store_conn_load_library(conn, setup_cb) < 0)
                store_conn_set_fcall(conn, 0);
        }
        c->fn_retried = 1;
    } else if (kind == METRICS_REDIS_NOPERM && (strstr(err, "fcall") || strstr(err, "FCALL"))) {
        if (!conn->fcall_off) /* (once: the other calls in flight get it too) */
            LOG_INFO("\"redis ACL refused FCALL: calling the scripts with EVALSHA\" addr=%s "
                     "err=\"%s\"",
                     log_val(conn->name), log_esc(err, strnlen(err, 200)));
        store_conn_set_fcall(conn, 0);
        conn->fcall_off = 1;
        conn->fcall_off_auth = conn->env->auth_gen;
    } else {
        return 0;
    }
    return 1;
}

/* Error replies that are not the script's answer: what follows them
 * (store_conn_int.h). */
enum store_conn_err
store_conn_error(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                 const char *err, redisCallbackFn *setup_cb,
                 void (*redirect)(void *owner, struct store_conn *conn, struct store_cmd *cmd,
                                  int ask, int slot, const char *host, int port),
                 const char **why)
{
    char host[256];
    int ask, slot, port;
    enum metrics_redis_error kind = store_error_kind(err);

    if (c->fcall && fcall_failed(conn, ac, c, err, kind, setup_cb))
        return STORE_CONN_ERR_RESEND;
    if (kind == METRICS_REDIS_TRYAGAIN && c->batch)
        return split_batch(conn, c);
    if (kind == METRICS_REDIS_TRYAGAIN && try_again(conn, c, kind))
        return STORE_CONN_ERR_DONE;
    if (kind == METRICS_REDIS_NOSCRIPT)
        METRIC_INC(redis_error_replies[kind]);
    if (kind == METRICS_REDIS_NOSCRIPT && c->noscript_retried && !c->read) {
        /* NOSCRIPT again after the script was loaded on this connection, in
         * order: the reload does not stick, and every call would wait for
         * reload round trips to fail anyway. Down (decisions fall back at
         * once), tried again after the backoff, a probe first. */
        char command[64];
        size_t len;
        const char *key = store_cmd_key(c, &len);

        snprintf(command, sizeof(command), "EVALSHA %s", store_conn_script_names[c->script]);
        METRIC_INC(redis_errors);
        store_conn_bad(conn, kind, command, "NOSCRIPT right after SCRIPT LOAD",
                       (int)util_redis_slot(key, len));
        *why = "NOSCRIPT";
        return STORE_CONN_ERR_LOST;
    }
    if (kind == METRICS_REDIS_NOSCRIPT && !c->noscript_retried && !c->read) {
        /* Redis lost its scripts (restart, failover, SCRIPT FLUSH): load the
         * script again and retry; both go out in order on this connection. */
        c->noscript_retried = 1;
        LOG_INFO("\"redis lost its scripts; reloading\" addr=%s script=%s", log_val(conn->name),
                 store_conn_script_names[c->script]);
        if (redisAsyncCommand(ac, setup_cb, (void *)(intptr_t)c->script, "SCRIPT LOAD %s",
                              store_conn_script_src[c->script]) == REDIS_OK) {
            METRIC_INC(redis_commands);
            conn->loading++;
            return STORE_CONN_ERR_RESEND;
        }
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, "send failed");
        return STORE_CONN_ERR_DONE;
    }
    if (redirect &&
        store_reply_redirect(err, conn->host, &ask, &slot, host, sizeof(host), &port) == 0) {
        LOG_DEBUG("\"redis redirect\" from=%s err=\"%s\"", log_val(conn->name),
                  log_esc(err, strlen(err)));
        redirect(conn->owner, conn, c, ask, slot, host, port);
        return STORE_CONN_ERR_DONE;
    }
    if (store_error_refusal(kind) && (!c->read || c->write)) {
        /* Every call would get it (a replica, an ACL, a full Redis): down
         * until a probe passes, not one refused call per decision. */
        char command[64];
        size_t len;
        const char *key = store_cmd_key(c, &len);

        snprintf(command, sizeof(command), "%s %s",
                 c->read    ? "SET"
                 : c->fcall ? "FCALL"
                            : "EVALSHA",
                 c->read ? "(new key)" : store_conn_script_names[c->script]);
        METRIC_INC(redis_errors);
        store_conn_note_error(conn, kind, err, command);
        store_conn_refused(conn, kind, err, (int)util_redis_slot(key, len));
        *why = metrics_redis_error_names[kind];
        return STORE_CONN_ERR_LOST;
    }
    return STORE_CONN_ERR_ANSWER;
}

/* ---- a connection closed -------------------------------------------------------- */

const char *store_conn_closed(struct store_conn *conn, const redisAsyncContext *ac, int status,
                              char *why, size_t len)
{
    if (status != REDIS_OK && conn->cap.unasked) {
        /* hiredis would abort on it: a broken or hostile server */
        store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, "a reply", conn->cap.why, -1);
        return conn->last_err;
    }
    if (status != REDIS_OK && store_reply_cap_refused(&conn->cap)) {
        /* the reader refused an object (its error reads "Out of memory") */
        store_conn_too_large(conn, why, len);
        return why;
    }
    if (status != REDIS_OK && ac->err == REDIS_ERR_PROTOCOL) {
        /* bytes that are no RESP: what else it says cannot be trusted */
        store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, "a reply", ac->errstr, -1);
        return conn->last_err;
    }
    return status == REDIS_OK ? "closed" : (ac->errstr[0] ? ac->errstr : "error");
}
