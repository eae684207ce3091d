/* store_conn_int.h - what store_conn.c (the connection, its commands, its
 * reconnects) and store_conn_setup.c (the setup commands, refusals and the
 * probe) share: the connection's state and the few calls between them.
 * Private to those two files: the store module uses store_conn.h.
 */
#ifndef STORE_CONN_INT_H
#define STORE_CONN_INT_H

#include <ev.h>
#include <hiredis/async.h>
#include <stdint.h>

#include "metrics/metrics.h"
#include "store_conn.h"

#define BACKOFF_MIN 0.05 /* seconds before the first retry; doubled up to BACKOFF_MAX */
#define ERR_LEN 256

/* What a setup reply answers (its priv): a script index, or one of these. */
enum { SETUP_AUTH = -1, SETUP_SELECT = -2, SETUP_ROLE = -3, SETUP_PROBE = -4 };

struct store_conn {
    struct store_env *env;
    const struct store_conn_hooks *hooks;
    void *owner;
    int flags;
    char *host; /* TCP, or */
    int port;
    char *unix_path; /* a unix socket */
    char name[300];  /* host:port or the path, for logs */
    redisAsyncContext *ac; /* NULL between connections */
    struct store_lookup *lookup; /* the host name being looked up before a connect */
    int connected;         /* the TCP/unix connect succeeded */
    int ready;             /* role checked and scripts loaded */
    int loading;           /* SCRIPT LOAD (and probe) replies still expected */
    /* Redis refused our calls (store_errors.h): the next setup ends with a
     * probe, a script call that must pass before the connection is ready;
     * check_role: ask ROLE too (url mode, after READONLY or MASTERDOWN);
     * probe_slot: the hash slot the probe's key must have (Cluster), or -1 */
    int refused;
    int check_role;
    int probe_slot;
    uint64_t connect_us;   /* when the current attempt started */
    uint64_t io_us;        /* the last command sent or reply read: keepalive's clock */
    uint64_t ping_us;      /* the keepalive PING in flight was sent then; 0: none */
    int ping_late;         /* it is past the timeout (counted as an error once) */
    double backoff;
    ev_timer retry;
    ev_timer watchdog;
    ev_prepare write_early; /* see write_early_cb */
    struct store_cmd *head, *tail; /* in flight, oldest first */
    unsigned inflight;             /* how many */
    struct store_cmd *qhead, *qtail; /* queued for the next batch (linked by next) */
    unsigned qlen;
    char last_err[ERR_LEN];
};

/* The scripts by enum store_script, then the batch script (script.h): their
 * source (SCRIPT LOAD) and their names (logs). */
extern const char *const store_conn_script_src[SCRIPT_COUNT + 1];
extern const char *const store_conn_script_names[SCRIPT_COUNT + 1];

/* store_conn.c */
/* ready went 0 or 1: the owner's state hook runs on a change */
void store_conn_set_ready(struct store_conn *conn, int ready);
/* The connection is gone or given up (see conn_lost in store_conn.c) */
void store_conn_lost(struct store_conn *conn, redisAsyncContext *ac, const char *why, int retry);

/* store_conn_setup.c */
/* Queue the setup commands on the new context conn->ac: they go out, in
 * order, once the connect is made; the last reply makes conn ready. */
void store_conn_send_setup(struct store_conn *conn);
/* The reply callback of a setup command (priv: a script index or a SETUP_*
 * value), also used for the SCRIPT LOAD of a NOSCRIPT reload. */
void store_conn_on_setup_reply(redisAsyncContext *ac, void *r, void *priv);
/* Count an error reply to command and log it (store_error_note). */
void store_conn_note_error(struct store_conn *conn, enum metrics_redis_error kind,
                           const char *err, const char *command);
/* Redis refused a call with an error every call will get (a refusal,
 * store_errors.h): give the connection up, make it again after the backoff
 * with a probe first (of slot on a Cluster node: the refused key's). */
void store_conn_refused(struct store_conn *conn, redisAsyncContext *ac,
                        enum metrics_redis_error kind, const char *err, int slot);

#endif
