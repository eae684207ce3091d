/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_int.h - the state of one connection, which store_conn.c (the
 * connection, its commands, its reconnects) shares with the layers below it:
 * store_conn_setup.c (the setup commands, refusals and the probe),
 * store_conn_watch.c (watchdog, keepalive, Redis' clock) and
 * store_conn_errors.c (what an error reply to a call leads to, the calls
 * failed or waiting, why a connection closed). Each of them judges and says
 * what follows; store_conn.c acts. Private to those files: the store module
 * uses store_conn.h. Above store_env.h only, so that the layers below never
 * reach back into the connection's API.
 */
#ifndef STORE_CONN_INT_H
#define STORE_CONN_INT_H

#include <ev.h>
#include <hiredis/async.h>
#include <stdint.h>

#include "clock_jump.h"
#include "store_env.h"
#include "store_reply_cap.h"

#define ERR_LEN 256

struct store_cmd;
struct store_conn_hooks;
struct store_lookup;

struct store_conn {
    struct store_env *env;
    const struct store_conn_hooks *hooks;
    void *owner;
    int must_be_master; /* STORE_CONN_CHECK_ROLE: ROLE at every connect */
    int slots;          /* STORE_CONN_SLOTS: a Cluster node */
    int trial;          /* STORE_CONN_TRIAL: credentials on trial (store_auth_trial.h) */
    char *host;         /* TCP, or */
    int port;
    char *unix_path;             /* a unix socket */
    char name[300];              /* host:port or the path, for logs */
    redisAsyncContext *ac;       /* NULL between connections */
    struct store_lookup *lookup; /* the host name being looked up before a connect */
    int connected;               /* the TCP/unix connect succeeded */
    int ready;                   /* role checked and scripts loaded */
    int loading;                 /* SCRIPT LOAD (and probe) replies still expected */
    /* fcall: calls go out as FCALL of the library (store_conn_setup.h), set
     * by FUNCTION LOAD's reply at each connect; fcall_off: never again on
     * this connection (Redis refused an FCALL that EVALSHA may pass: an
     * ACL; until the credentials change: fcall_off_auth is the store's
     * auth_gen then); fcall_said: its unavailability was logged;
     * fcall_loading: a FUNCTION LOAD is out */
    int fcall, fcall_off, fcall_said, fcall_loading;
    unsigned fcall_off_auth;
    /* Redis refused our calls (store_errors.h): the next setup ends with a
     * probe, a script call that must pass before the connection is ready;
     * check_role: ask ROLE too (url mode, after READONLY or MASTERDOWN);
     * probe_slot: the hash slot the probe's key must have (Cluster), or -1 */
    int refused;
    int check_role;
    int probe_slot;
    uint64_t connect_us; /* when the current attempt started */
    uint64_t io_us;      /* the last command sent or reply read: keepalive's clock */
    uint64_t read_us;    /* the last read began (the replies it brought came by then) */
    uint64_t ping_us;    /* the keepalive PING in flight was sent then; 0: none */
    int ping_late;       /* it is past the timeout (counted as an error once) */
    double backoff;      /* store_backoff.h */
    uint32_t rnd;        /* the backoff's jitter */
    uint64_t ready_us;   /* when it last became ready */
    ev_timer retry;
    ev_timer watchdog;
    ev_prepare write_early;          /* see write_early_cb */
    struct store_cmd *head, *tail;   /* in flight, oldest first */
    unsigned inflight;               /* how many */
    struct store_cmd *qhead, *qtail; /* queued for the next batch (linked by next) */
    unsigned qlen;
    /* answered TRYAGAIN: sent again when the timer fires (linked by next) */
    struct store_cmd *lhead, *ltail;
    ev_timer later;
    char last_err[ERR_LEN];
    struct clock_jump clock;    /* Redis' clock against ours: its steps (clock_jump.h) */
    struct store_reply_cap cap; /* its reader's caps (store_reply_cap.h), set at each connect */
};

/* ---- store_conn_watch.c ---------------------------------------------------------- */

/* The watchdog's look at conn (connected, or connecting) at now: why it is
 * stuck (a command or the keepalive PING waiting past env->dead_after_us, a
 * connect or setup not done by then), for store_conn.c to give it up; NULL
 * when it is not, after sending the keepalive PING if one is due and
 * putting the backoff back to its minimum once the connection has lasted. */
const char *store_conn_watch(struct store_conn *conn, uint64_t now);

/* Redis' time in a reply (redis_ms; 0: none) of a call sent at sent_us and
 * read at now: a step of Redis' clock raises redis_clock_jump. */
void store_conn_clock_seen(struct store_conn *conn, int64_t redis_ms, uint64_t sent_us,
                           uint64_t now);

/* Clear redis_clock_jump once no step came for the quiet period (every
 * watchdog run). */
void store_conn_clock_quiet(uint64_t now);

/* ---- store_conn_errors.c --------------------------------------------------------- */

/* Fail the calls of list c (linked by next) with STORE_DOWN and why, each
 * counted in redis_errors. */
void store_conn_fail_list(struct store_cmd *c, const char *why);

/* Fail what waits to be sent again after a TRYAGAIN (conn->lhead; the
 * later timer stopped). */
void store_conn_later_fail(struct store_conn *conn, const char *why);

/* What follows an error reply to a script call (store_conn_error). */
enum store_conn_err {
    STORE_CONN_ERR_ANSWER, /* none of the connection's: the call gets it as its reply */
    STORE_CONN_ERR_DONE,   /* the call was taken care of (waits for TRYAGAIN's timer,
                            * redirected, or failed) */
    STORE_CONN_ERR_RESEND, /* send the call again now, in order on this connection */
    STORE_CONN_ERR_SPLIT,  /* a batch: send each of its calls again now, free the batch */
    STORE_CONN_ERR_LOST,   /* give the connection up (why in conn->last_err, said), then
                            * fail the call with STORE_DOWN and *why */
};

/* The error reply err to c (unlinked from the calls in flight) on ac, which
 * is conn->ac. setup_cb: the connection's setup reply callback, for a
 * FUNCTION LOAD or SCRIPT LOAD sent again; redirect: the owner's redirect
 * hook (NULL: a redirect is an error reply). */
enum store_conn_err
store_conn_error(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                 const char *err, redisCallbackFn *setup_cb,
                 void (*redirect)(void *owner, struct store_conn *conn, struct store_cmd *cmd,
                                  int ask, int slot, const char *host, int port),
                 const char **why);

/* Why conn's context ac closed (hiredis' disconnect callback; status its
 * status), for conn_lost: a reply that broke the contract or the caps is
 * noted and counted first (store_conn_bad, store_conn_too_large); why (len
 * bytes) may receive the reason. */
const char *store_conn_closed(struct store_conn *conn, const redisAsyncContext *ac, int status,
                              char *why, size_t len);

#endif
