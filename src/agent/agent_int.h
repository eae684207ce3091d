/* SPDX-License-Identifier: Apache-2.0 */
/* agent_int.h - the running agent's parts, shared by agent.c (start,
 * reload, stop, timers) and agent_http.c (the stats listener's routes).
 * Private to src/agent/. Main loop only. */
#ifndef AGENT_INT_H
#define AGENT_INT_H

#include <ev.h>
#include <stdint.h>

#include "agent/watch.h"

struct history;
struct httpd;
struct limiter;
struct rules_compile;
struct rules_redis;
struct ruleset;
struct server;

struct agent {
    struct ev_loop *loop;
    const char *path;
    struct ruleset *rs;
    struct ruleset *boot; /* the first: its restart-only settings are in force */
    uint64_t loaded_unix; /* when rs was loaded */
    struct limiter *lim;
    struct server *srv;
    struct httpd *httpd;
    ev_signal sighup, sigterm, sigint;
    ev_timer expire, minute, stopping, sample;
    uint64_t stop_deadline_us;
    unsigned reports;
    /* the status page */
    struct history *history;
    uint64_t started_unix;
    uint64_t reload_failed_unix;   /* the last reload failed then; 0 after a good one */
    char reload_error[256];        /* its first error line */
    char token[33];                /* the page's token for POST /reset, random hex */
    struct rules_redis *rules;     /* [rules] source = redis: the fleet's rule set */
    struct rules_compile *compile; /* SIGHUP's and the rule store's loads, off the loop */
    struct watch watch;            /* warnings the agent finds in itself (watch.h) */
};

/* The stats listener's routes (agent_http.c), served with a as context. */
void agent_http_routes(struct agent *a);

#endif
