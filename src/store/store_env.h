/* SPDX-License-Identifier: Apache-2.0 */
/* store_env.h - what every connection of one store shares (struct
 * store_env): the loop, the clocks, the credentials, the scripts' SHA1s, the
 * count of commands out. Internal to the store module; below store_conn.h,
 * so that the connection's setup (store_conn_setup.c) reads it without the
 * connection's API.
 */
#ifndef STORE_ENV_H
#define STORE_ENV_H

#include <stdint.h>

#include "script.h"
#include "store_resp.h"

#define STORE_SHA_LEN 40

struct ev_loop;

/* What every connection of one store shares. */
struct store_env {
    struct ev_loop *loop;
    /* [redis] timeout: how long one sentinel or seed question (connect and
     * reply) may take, and how late a keepalive PING may be before it counts
     * as an error. A call is not cut at it (the limiter stops waiting on its
     * own clock): a connection is given up at dead_after_us. */
    uint64_t timeout_us;
    uint64_t dead_after_us; /* watchdog: a command or a connect older than this is stuck */
    uint64_t keepalive_us;  /* [redis] keepalive: PING after this long without traffic; 0 off */
    const char *user;       /* AUTH user (NULL: password only) */
    const char *password;   /* AUTH at connect when not NULL */
    int db;                 /* SELECT at connect when not 0 */
    int functions;          /* [redis] functions: FUNCTION LOAD and FCALL where Redis allows */
    unsigned auth_gen;      /* bumped when the credentials change (store_reconfigure) */
    const char *prefix;     /* [redis] prefix: the probe's key (and the ACL's key pattern) */
    char sha[SCRIPT_COUNT + 1][STORE_SHA_LEN + 1]; /* from SCRIPT LOAD: the same on every
                                                       server; [SCRIPT_COUNT] is the batch */
    unsigned pending;       /* commands queued or in flight over all connections */
    struct store_resp resp; /* the request being written (store_cmd_format), reused */
    int corked;             /* store_conn_send() only queues (see store_conn_uncork) */
};

#endif
