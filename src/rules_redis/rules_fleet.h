/* SPDX-License-Identifier: Apache-2.0 */
/* rules_fleet.h - the fleet's view of the rule set (lua/rules_fleet.lua's
 * reply): which live agent runs which version, read from the script's flat
 * reply and written out as GET /fleet's JSON and --fleet's table. Pure (no
 * Redis, no loop): the reply fuzzer feeds it any reply.
 */
#ifndef RULES_FLEET_H
#define RULES_FLEET_H

#include <stddef.h>
#include <stdint.h>

#define RULES_FLEET_LIVE_MS 20000 /* an agent not heard from for this long is gone */
#define RULES_FLEET_MAX 10000     /* agents listed at most */

struct rules_fleet_agent {
    char *host, *listen; /* from "host=H pid=P listen=L"; "" when absent */
    long pid;            /* 0 when absent */
    uint64_t version;    /* applied: 0 none (its file's rules) */
    char *error;         /* the last apply error, "" when none */
    uint64_t age_ms;     /* since its last report, by Redis' clock */
};

struct rules_fleet {
    uint64_t current; /* the current version in Redis, 0: none */
    size_t n;
    struct rules_fleet_agent *agents;
};

/* The script's reply: n strings (str[i] of len[i] bytes). 0 with *out
 * filled (free with rules_fleet_clear), -1 when the reply has not the
 * script's shape (*out left empty). */
int rules_fleet_parse(size_t n, const char *const *str, const size_t *len, struct rules_fleet *out);

void rules_fleet_clear(struct rules_fleet *f);

/* GET /fleet: {"current": N, "agents": [{"host", "pid", "listen",
 * "version", "current": bool, "error", "last_seen_s"}...], "off_current": K}
 * with a newline; malloc'd, its length in *len; NULL out of memory. */
char *rules_fleet_json(const struct rules_fleet *f, size_t *len);

/* --fleet: a table, one agent a line, "!" before those off the current
 * version; malloc'd, NUL-terminated; NULL out of memory. */
char *rules_fleet_text(const struct rules_fleet *f);

/* 1 when agent i needs a look: off the current version, or reporting an
 * apply error (--fleet's exit status 1, "!" in its table). */
int rules_fleet_agent_off(const struct rules_fleet *f, size_t i);

/* --fleet's verdict on stderr's line: "" when every agent is on the
 * current version without an error; else "N of M agents off version C or
 * with an apply error: HOST pid P (LISTEN) on V, ...", and what to do when
 * one runs a version above the current one (the store lost it). malloc'd;
 * NULL out of memory. */
char *rules_fleet_verdict(const struct rules_fleet *f);

#endif
