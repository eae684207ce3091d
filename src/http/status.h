/* SPDX-License-Identifier: Apache-2.0 */
/* status.h - GET /status.json: what the status page shows, one JSON
 * document with stable field names (doc/operations.md lists them).
 *
 * Bounded work per request: counters are read as they are (a few atomic
 * loads per rule); what costs more (the process' fds and memory, the rules'
 * five-minute history) is sampled once a second by status_sample(), and a
 * page after its first load asks only for the seconds it has not seen
 * (?since=UNIX_S), so fifty open tabs cost fifty small answers a second.
 *
 * Threads: everything here runs on the main loop (the 1 s timer and the
 * stats listener). */
#ifndef STATUS_H
#define STATUS_H

#include <stddef.h>
#include <stdint.h>

struct history;
struct ruleset;
struct store_heartbeat;
struct gclaim_stats;

/* What the agent's owner (main.c) knows and the status shows. Strings are
 * borrowed for the call. */
struct status_agent {
    const char *version;
    const char *config_file;
    unsigned workers;
    uint64_t started_unix;
    uint64_t loaded_unix;        /* the rules in force were loaded then */
    uint64_t reload_failed_unix; /* the last reload failed then (0: it did not) */
    const char *reload_error;    /* its first error ("FILE:LINE: ..."), NULL when none */
    int reset_allowed;           /* [agent] stats_reset */
    int rules_redis;             /* [rules] source = redis (as started) */
    const char *rules_error;     /* then: the last version's apply error, NULL when none */
    uint64_t rules_rejected;     /* and that version's number (0: none) */
    const struct store_heartbeat *heartbeat; /* the fleet's rows; NULL standalone */
    int fleet_totals_only;                   /* ?fleet=totals: the fleet without its agents[] */
    int rules_compiling;                     /* a rule set loads off the loop (rules_compile.h) */
    const char *token;                       /* the page's token for POST /reset */
    const struct gclaim_stats *global;       /* [global]'s snapshot (gclaim.h); NULL without */
};

/* Once a second, on the main loop: the history's sample and the process'
 * file descriptors and memory. now_s: Unix seconds. */
void status_sample(struct history *h, uint64_t now_s);

/* The document (malloc'd, caller frees) and its length; NULL when out of
 * memory. since: 0 for the whole history, else only samples after that Unix
 * second. */
char *status_render(const struct status_agent *a, const struct ruleset *rs, const struct history *h,
                    uint64_t since, size_t *len);

struct httpd_req;

/* GET /: the page (status_page.h), with its policy headers. */
void status_page_get(struct httpd_req *req);

/* Why a POST /reset must be refused (403), or NULL to go on:
 * - reset_allowed off ([agent] stats_reset = no);
 * - from a browser (an Origin or Sec-Fetch-Site header) other than the
 *   page itself: cross-site or cross-origin, or without the page's token in
 *   X-Spoa-Token. A page elsewhere in an operator's browser can neither send
 *   the token (it cannot read /status.json across origins) nor drop the
 *   Origin header a browser puts on every POST.
 * A request with neither header (curl, a script) is not a browser's and
 * goes on as before. */
const char *status_reset_refused(const struct httpd_req *req, int reset_allowed, const char *token);

#endif
