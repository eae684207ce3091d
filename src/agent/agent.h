/* SPDX-License-Identifier: Apache-2.0 */
/* agent.h - the agent running: its rules, limiter, SPOP listeners and stats
 * listener built from one configuration, reloaded on SIGHUP (and by the
 * rule store), stopped cleanly on SIGTERM or SIGINT. main.c reads argv and
 * hands over. */
#ifndef AGENT_H
#define AGENT_H

struct config;

/* Run the agent on cfg (owned from here on), loaded from path, until a stop
 * signal: 0 after a clean stop, 1 when it could not start (said on
 * stderr). Once per process. */
int agent_run(const char *path, struct config *cfg);

#endif
