/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - SPOP listeners and worker event loops (libev).
 *
 * The listening sockets are shared: every worker watches them and accepts
 * for itself (a single worker runs on the main loop, see server_new); a
 * connection then lives on that worker's loop until it closes. The ruleset
 * in force is handed to each worker through an ev_async, so the request
 * path reads it without locks.
 */
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>

struct config;
struct ev_loop;
struct ruleset;
struct limiter;
struct server;

/* Bind the SPOP listener of cfg (its listen_addr, with net_listen). NULL with
 * a message in err on failure. The server takes a reference on rs. With
 * cfg->workers == 1 the one worker runs on main_loop (the limiter's), with
 * no thread of its own; with more, each has a thread and a loop. */
struct server *server_new(const struct config *cfg, struct ruleset *rs, struct limiter *lim,
                          struct ev_loop *main_loop, char *err, size_t errlen);
/* Start the worker threads (a worker on the main loop runs with it).
 * Returns 0 or -1. */
int server_start(struct server *s);
/* Hand a new ruleset to every worker (each takes its own reference). */
void server_set_ruleset(struct server *s, struct ruleset *rs);
/* Stop accepting; answer the frames in flight; close connections. */
void server_stop(struct server *s);
/* 1 once every worker has finished (after server_stop). */
int server_stopped(struct server *s);
/* Wait for the workers to finish, at most timeout_s seconds. Returns 0 when
 * all stopped in time. */
int server_join(struct server *s, double timeout_s);
void server_free(struct server *s);

#endif
