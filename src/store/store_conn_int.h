/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_int.h - the state of one connection, which store_conn.c (the
 * connection, its commands, its reconnects) and store_conn_setup.c (the setup
 * commands, refusals and the probe, below it) share. Private to those two
 * files: the store module uses store_conn.h. Above store_env.h only, so that
 * the setup never reaches back into the connection's API.
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

#endif
