/* SPDX-License-Identifier: Apache-2.0 */
/* store_auth_trial.h - new Redis credentials tried on a connection of their
 * own before the store switches to them. Internal to the store module
 * (store.c, at a reload: store_reconfigure).
 *
 * A reload (SIGHUP) whose [redis] username, password or password_file
 * differs from the credentials in force must not cut working connections
 * for a typo: the store keeps serving on its connections, made with the
 * credentials in force, while a trial connects to a server the store uses
 * (the owner's where(): url, the Sentinel master, a Cluster master ready
 * now) with the new ones, sends the whole setup a connection sends (AUTH,
 * SELECT, ROLE when asked, SCRIPT LOAD of every script: store_conn_setup.c),
 * then one probe call (EVALSHA tb_exact on PREFIXprobe, as after a refusal:
 * the ACL's +evalsha and key pattern).
 *
 * Passed: the owner's pass() takes the credentials (and may free the
 * trial). Failed: the warning `redis_auth_refused` names why (WRONGPASS,
 * NOAUTH, NOPERM, connection_refused...: store_why.h) and where, logged
 * once at warn by the registry, and the trial is made again every
 * STORE_AUTH_TRIAL_RETRY_S until it passes or the owner frees it (a reload
 * asking for other credentials, or for those in force). The owner clears
 * the warning once credentials that work are in force: a trial replaced by
 * another leaves it as it is. The trial's connection never reconnects, and
 * its failures are not the store's (STORE_CONN_TRIAL: not logged, not the
 * last error, no `redis_errors`; its error replies are counted).
 */
#ifndef STORE_AUTH_TRIAL_H
#define STORE_AUTH_TRIAL_H

#include "store_env.h"

#define STORE_AUTH_TRIAL_RETRY_S 30.

struct store_auth_trial;

/* Where to try now: a TCP host and port, or a unix path, and the
 * connection's flags (STORE_CONN_CHECK_ROLE for the Sentinel master,
 * STORE_CONN_SLOTS for a Cluster node). 0, or -1 no server known now (the
 * trial waits for its next retry). The strings need to live through the
 * call only. */
typedef int store_auth_trial_where(void *arg, const char **host, int *port, const char **unix_path,
                                   int *flags);

/* The credentials passed: user (NULL: password only) and password (NULL:
 * no AUTH) are the trial's, valid during the call; copy them. Runs on the
 * loop from a timer of the trial's own: the owner may free the trial. */
typedef void store_auth_trial_pass(void *arg, const char *user, const char *password);

/* Start trying user and password (copied; wiped when freed), with what the
 * store's env says of the rest (loop, timeouts, db, prefix, functions; read
 * at each try: env outlives the trial). NULL when out of memory. */
struct store_auth_trial *store_auth_trial_new(const struct store_env *env, const char *user,
                                              const char *password, store_auth_trial_where *where,
                                              store_auth_trial_pass *pass, void *arg);

/* Stop and free (the warning stays as it is). Not from inside where().
 * NULL no-op. */
void store_auth_trial_free(struct store_auth_trial *t);

#endif
