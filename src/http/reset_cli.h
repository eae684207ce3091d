/* SPDX-License-Identifier: Apache-2.0 */
/* reset_cli.h - spoa-ratelimit -c FILE --reset RULE KEY: clear one client
 * fleet-wide. One-shot: it asks the agent that runs FILE, on its stats
 * listener ([agent] stats, with stats_auth when set), for POST /reset,
 * which resets the key in Redis and tells every agent of the fleet (or,
 * standalone, clears the agent's own state), and prints what it answered:
 * how many agents confirmed. */
#ifndef RESET_CLI_H
#define RESET_CLI_H

/* 0 reset (every agent confirmed or not: the counts are printed), 1 when
 * it could not be done (no stats listener, the agent unreachable, an
 * unknown rule, Redis failed): why on stderr. */
int reset_cli_run(const char *config, const char *rule, const char *key);

#endif
