/* SPDX-License-Identifier: Apache-2.0 */
/* rules_cli.h - the operator's commands on the fleet's rule set in Redis:
 * spoa-ratelimit -c FILE --push RULES [--message TEXT] [--if-version N],
 * --rules-history, --rollback N, --fleet, --rules-show N and --rules-diff A
 * B. One-shot: they connect to FILE's [redis] (url, Sentinel or Cluster,
 * with its credentials) through the store on a private loop, run one script
 * (lua/rules_push.lua, lua/rules_history.lua, lua/rules_fleet.lua, or
 * lua/rules_fetch.lua per version read, the agents' own capped read) and
 * print the outcome. */
#ifndef RULES_CLI_H
#define RULES_CLI_H

enum rules_cli_op {
    RULES_CLI_PUSH,
    RULES_CLI_HISTORY,
    RULES_CLI_ROLLBACK,
    RULES_CLI_FLEET,
    RULES_CLI_SHOW,  /* --rules-show N: the text on stdout, as stored */
    RULES_CLI_DIFF,  /* --rules-diff A B: a unified diff on stdout */
    RULES_CLI_RESET, /* --reset RULE KEY (rules: RULE, message: KEY): reset_cli.h */
};

struct rules_cli_args {
    enum rules_cli_op op;
    const char *config;   /* -c FILE */
    const char *rules;    /* --push RULES */
    const char *message;  /* --message, or NULL */
    long long if_version; /* --if-version N, or -1 */
    long long rollback;   /* --rollback N */
    int force;            /* --force: number a write above every agent's version */
    long long show[2];    /* --rules-show N (show[0]), --rules-diff A B */
};

/* Run the command: what it did on stdout, why it failed on stderr. The
 * process's exit status: 0 done, 1 refused or failed. */
int rules_cli_run(const struct rules_cli_args *a);

#endif
