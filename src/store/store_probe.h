/* SPDX-License-Identifier: Apache-2.0 */
/* store_probe.h - one-shot questions to a list of Redis servers, asked in
 * order until one gives an acceptable answer: where the master is (Sentinel),
 * what the slot map is (Cluster). Internal to the store module.
 *
 * Each attempt opens its own short-lived connection (hiredis + libev), sends
 * one command and waits at most the timeout for connect plus reply. The
 * addresses come parsed (struct net_hostport, net.h).
 */
#ifndef STORE_PROBE_H
#define STORE_PROBE_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct net_hostport;
struct redisReply;
struct store_probe;

/* Credentials for AUTH before the command, owned by the caller and kept as
 * long as the prober; read at each attempt (a reload may change them). */
struct store_auth {
    const char *server; /* "redis" or "sentinel": for log lines */
    char *user;         /* ACL user; NULL: "default" */
    char *password;     /* NULL: no AUTH */
};

/* Judge a reply (valid during the call only) from host:port: 1 accepts it and
 * ends the walk, 0 tries the next address. */
typedef int store_probe_accept(void *arg, const struct redisReply *reply, const char *host,
                               int port);
/* The walk is over: ok 1 when an answer was accepted, 0 when every address
 * failed (no connection, an error, a timeout, or not accepted). */
typedef void store_probe_done(void *arg, int ok);

/* A prober on loop; each attempt gets timeout_us and, when auth has a
 * password, AUTH first (auth may be NULL). NULL when out of memory. */
struct store_probe *store_probe_new(struct ev_loop *loop, uint64_t timeout_us,
                                    const struct store_auth *auth);

/* The last error of the last walk ("" when none): an error reply (NOAUTH,
 * WRONGPASS, ...), "timed out", "answer not usable", ... Valid until the
 * next walk starts. */
const char *store_probe_last_error(const struct store_probe *p);

/* Stop what runs (done does not run) and free. Not from inside its
 * callbacks. NULL no-op. */
void store_probe_free(struct store_probe *p);

/* optional 1: the walks to come ask something the caller can do without
 * (an ACL may refuse it): an error reply to the command is neither counted
 * nor logged nor warned (store_errors.h), only kept as the last error.
 * AUTH's still are. 0 (the default): they are. */
void store_probe_optional(struct store_probe *p, int optional);

/* 1 while a walk is under way. */
int store_probe_running(const struct store_probe *p);

/* Ask addrs[0..n) in turn with the command argv (all copied). accept runs per
 * reply, done once at the end, both on the loop thread; done may run before
 * this returns (every address failed at once) and may start another walk.
 * 0 started; -1 already running or out of memory (done does not run). */
int store_probe_start(struct store_probe *p, const struct net_hostport *addrs, size_t n, int argc,
                      const char *const *argv, store_probe_accept *accept, store_probe_done *done,
                      void *arg);

#endif
