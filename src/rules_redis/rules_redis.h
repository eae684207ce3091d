/* SPDX-License-Identifier: Apache-2.0 */
/* rules_redis.h - the fleet's rule set in Redis ([rules] source = redis):
 * the agent's side (poll, fetch, hand over to be applied, cache on disk) and
 * the layout the operator's commands (rules_cli.h) write.
 *
 * Layout (lua/README.md, "Rules from Redis"), every key under one hash tag
 * so that a version's keys sit on one Cluster slot:
 *   PREFIX{rules}:current   the current version number
 *   PREFIX{rules}:versions  sorted set of the kept versions
 *   PREFIX{rules}:v:N       hash: text, sha256, time, host, message
 *
 * An agent GETs the current number every [rules] poll (one command of one
 * small key); a version it has neither applied nor refused is fetched
 * (one EVAL_RO of lua/rules_fetch.lua: its text and sha256, or over 1 MiB
 * its size alone, the text refused unread),
 * checked by rules_redis_check_version (its sha256 present and right, then
 * parsed with the agent's own non-rule sections exactly as a SIGHUP would,
 * and not empty) and handed to the apply callback, which swaps the rule set
 * in. The check (parsing, compiling the regexes within the rule set's
 * budget, config.h CFG_BUDGET_*) runs off the loop (rules_compile.h): the
 * rules in force serve until it ends. A refused version is logged once at
 * warn and counted
 * (rules_applied_total{result="rejected"}); the rules in force stay, and
 * the error goes into the agent's fleet report.
 *
 * A store that lost its versions under a running agent (the current key
 * gone, or a number below the version in force: Redis restarted without
 * persistence, flushed, failed over to a stale replica) raises the warning
 * rules_store_lost (core/warning.h); the agent keeps its rules, applies no
 * lower version, and clears the warning once the current version is at
 * least its own again (after `--push --force`, which numbers above every
 * agent's version). An applied one is written to [rules] cache (a unique temporary
 * file and rename), so that an agent starting while Redis is down runs on it.
 *
 * Every 5 s (and after each new version) the agent also reports its version
 * and last apply error for the fleet's view (lua/rules_fleet.lua,
 * rules_fleet.h: PREFIX{rules}:agents and :seen), and keeps the view the
 * script answers for GET /fleet.
 *
 * Everything else runs on the loop thread, through store.h alone
 * (store_read).
 */
#ifndef RULES_STORE_H
#define RULES_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "rules_redis/rules_cache.h"
#include "rules_redis/rules_check.h"
#include "rules_redis/rules_compile.h"

struct ev_loop;
struct store;
struct config;
struct rules_compile;
struct rules_redis;

/* Put cfg in force: a version that passed rules_redis_check_version with
 * the agent's file (owned from here on, freed on failure too). 0 applied;
 * -1 not (out of memory), the reason in err. */
typedef int rules_redis_apply_fn(void *ctx, struct config *cfg, char *err, size_t errlen);

/* Start polling s every cfg's [rules] poll (path: the agent's file, whose
 * other sections each version is checked with; cfg: the boot config; its
 * prefix and cache path are copied). Versions load through compile (the
 * agent's, shared with SIGHUP: no poll while it is busy). NULL when out of
 * memory. */
struct rules_redis *rules_redis_new(struct ev_loop *loop, struct store *s,
                                    struct rules_compile *compile, const char *path,
                                    const struct config *cfg, rules_redis_apply_fn *apply,
                                    void *ctx);

/* The rules in force (the cache read at start, or a version applied):
 * text (copied) as version; cached marks them as coming from the cache. -1
 * out of memory: the version is taken, its text is not kept. */
int rules_redis_adopt(struct rules_redis *rs, const char *text, size_t len, uint64_t version,
                      int cached);

/* The text of the version in force (text NULL: none yet, the file's rules)
 * and its number, kept up to date at each apply: what a SIGHUP's load
 * reads when it starts (rules_compile_reload). NULL when rs is. */
const struct rules_in_force *rules_redis_in_force(const struct rules_redis *rs);

/* The last version's apply error ("version N: NAME:LINE: ..."), NULL when
 * the last one applied (the status page). Valid until the next poll. */
const char *rules_redis_error(const struct rules_redis *rs);
/* And the version it names (0: the last one applied). */
uint64_t rules_redis_rejected(const struct rules_redis *rs);

/* SIGHUP: a version refused with the old file may pass with the new one:
 * forget the refusals (each is logged once again if it fails again). */
void rules_redis_retry(struct rules_redis *rs);

/* GET /fleet: the fleet's view as JSON (rules_fleet.h), as this agent's
 * last report (every 5 s, and after each new version) answered it;
 * malloc'd, its length in *len. NULL before the first answer, or out of
 * memory. */
char *rules_redis_fleet_json(const struct rules_redis *rs, size_t *len);

/* GET /rules/N: version N's text read as the agent reads a version
 * (lua/rules_fetch.lua, within 1 MiB), handed to fn, now or later, exactly
 * once: an HTTP status ("200 OK", "404 Not Found" when N is not kept, "502
 * Bad Gateway" over the cap, "503 Service Unavailable" Redis not
 * answering) and a malloc'd body (the text, or why not; NULL out of
 * memory) of len bytes, for the callee to take over. */
typedef void rules_redis_text_fn(void *arg, const char *status, char *body, size_t len);
void rules_redis_text(struct rules_redis *rs, uint64_t version, rules_redis_text_fn *fn, void *arg);

/* Stop polling (before the store is freed), then free. NULL no-op. */
void rules_redis_stop(struct rules_redis *rs);
void rules_redis_free(struct rules_redis *rs);

#endif
