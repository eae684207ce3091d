/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_watch.c - a connection's watchdog, its keepalive and Redis'
 * clock: whether a connection is stuck (a command, the keepalive PING, a
 * connect or a setup waiting far beyond the timeout), the PING that keeps an
 * idle connection alive, and the steps of Redis' clock seen in replies (the
 * redis_clock_jump warning). A layer below store_conn.c, as
 * store_conn_setup.c is: this says why a connection is stuck, store_conn.c's
 * watchdog timer gives it up. The PING's reply callback follows the lifetime
 * rules at the top of store_conn.c.
 */
#include "store_conn_int.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "store_backoff.h"
#include "store_cmd.h"
#include "store_conn_setup.h"
#include "store_errors.h"

/* ---- keepalive and the watchdog -------------------------------------------------- */

/* The keepalive PING's reply. An error reply counts as a failed command does;
 * the connection stays (a late or missing reply is the watchdog's). */
static void on_ping_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_conn *conn = ac->data;
    redisReply *reply = r;

    if (!reply || conn->ac != ac)
        return; /* going away: conn_lost handles it */
    conn->ping_us = 0;
    conn->io_us = util_now_us();
    if (reply->type == REDIS_REPLY_ERROR) {
        METRIC_INC(redis_errors);
        LOG_DEBUG("\"redis keepalive failed\" addr=%s err=\"%s\"", log_val(conn->name),
                  log_esc(reply->str, strlen(reply->str)));
        /* counted by kind; an ACL without +ping is said (not acted on) */
        store_conn_note_error(conn, store_error_kind(reply->str), reply->str, "PING (keepalive)");
    }
}

/* A ready connection without traffic for keepalive_us (nothing in flight or
 * queued) gets a PING, which Redis and every proxy on the way see as
 * traffic. A PING past the timeout counts as an error, as a call would. */
static void keepalive(struct store_conn *conn, uint64_t now)
{
    const struct store_env *env = conn->env;

    if (conn->ping_us) {
        if (!conn->ping_late && now - conn->ping_us > env->timeout_us) {
            conn->ping_late = 1;
            METRIC_INC(redis_errors);
        }
        return;
    }
    if (!env->keepalive_us || !conn->ready || conn->head || conn->qhead ||
        now - conn->io_us < env->keepalive_us)
        return;
    if (redisAsyncCommand(conn->ac, on_ping_reply, NULL, "PING") != REDIS_OK)
        return; /* disconnecting: on_disconnect follows */
    METRIC_INC(redis_keepalives);
    conn->ping_us = conn->io_us = now;
    conn->ping_late = 0;
}

/* A connection whose oldest command (or keepalive PING) waits far beyond
 * the timeout is stuck (Redis frozen, a partition without RST), and so is a
 * connect or a setup that does not finish: drop it and start over.
 * Otherwise send the keepalive PING if one is due. */
const char *store_conn_watch(struct store_conn *conn, uint64_t now)
{
    uint64_t oldest = conn->head ? conn->head->sent_us : 0;

    if (conn->ping_us && (!oldest || conn->ping_us < oldest))
        oldest = conn->ping_us;
    if (oldest && now - oldest > conn->env->dead_after_us) {
        LOG_WARN("\"redis not answering; reconnecting\" addr=%s waited_ms=%llu",
                 log_val(conn->name), (unsigned long long)((now - oldest) / 1000));
        return "not answering";
    }
    if (!conn->ready && now - conn->connect_us > conn->env->dead_after_us)
        return conn->connected ? "setup timed out" : "connect timed out";
    keepalive(conn, now);
    if (conn->ready && now - conn->ready_us >= STORE_BACKOFF_HEALTHY_US)
        conn->backoff = STORE_BACKOFF_MIN;
    return NULL;
}

/* ---- Redis' clock ----------------------------------------------------------- */

/* The last step of a Redis server's clock any connection saw (monotonic us;
 * 0: none, or the warning was cleared): the warning is the agent's, one for
 * all its connections, and clears CLOCK_JUMP_QUIET_US after the last. */
static _Atomic uint64_t clock_jump_last_us;

/* Redis' time in a reply (redis_ms; 0: none) of a call sent at sent_us and
 * read at now: a step of Redis' clock over 1 s raises redis_clock_jump,
 * naming its size and sign (clock_jump.h). The scripts rebase what a step
 * back leaves ahead (lua/README.md); a step forward costs up to one extra
 * burst per key: the warning says which. */
void store_conn_clock_seen(struct store_conn *conn, int64_t redis_ms, uint64_t sent_us,
                           uint64_t now)
{
    char msg[WARNING_MESSAGE_MAX];
    int64_t step = redis_ms ? clock_jump_feed(&conn->clock, redis_ms, sent_us, now) : 0;

    if (!step)
        return;
    clock_jump_message(msg, sizeof(msg), step);
    METRIC_INC(redis_clock_jumps);
    atomic_store(&clock_jump_last_us, now);
    LOG_WARN("\"redis clock jump\" addr=%s step_ms=%lld", log_val(conn->name),
             (long long)(step / 1000));
    warning_raise(WARNING_REDIS_CLOCK_JUMP, "%s (%s)", msg, conn->name);
}

/* The watchdog's: clear redis_clock_jump once no step came for the quiet
 * period. */
void store_conn_clock_quiet(uint64_t now)
{
    uint64_t last = atomic_load(&clock_jump_last_us);

    if (last && now >= last + CLOCK_JUMP_QUIET_US &&
        atomic_compare_exchange_strong(&clock_jump_last_us, &last, 0))
        warning_clear(WARNING_REDIS_CLOCK_JUMP);
}
