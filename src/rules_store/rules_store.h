/* SPDX-License-Identifier: Apache-2.0 */
/* rules_store.h - the fleet's rule set in Redis ([rules] source = redis):
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
 * checked by rules_store_check_version (its sha256 present and right, then
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

struct ev_loop;
struct store;
struct config;
struct rules_compile;
struct rules_store;

#define RULES_STORE_KEY_MAX 160 /* a prefix (64) and the longest suffix */

/* PREFIX{rules}:SUFFIX into out (RULES_STORE_KEY_MAX bytes); its length. */
size_t rules_store_key(const char *prefix, const char *suffix, char *out);

/* Put cfg in force: a version that passed rules_store_check_version with
 * the agent's file (owned from here on, freed on failure too). 0 applied;
 * -1 not (out of memory), the reason in err. */
typedef int rules_store_apply_fn(void *ctx, struct config *cfg, char *err, size_t errlen);

/* Start polling s every cfg's [rules] poll (path: the agent's file, whose
 * other sections each version is checked with; cfg: the boot config; its
 * prefix and cache path are copied). Versions load through compile (the
 * agent's, shared with SIGHUP: no poll while it is busy). NULL when out of
 * memory. */
struct rules_store *rules_store_new(struct ev_loop *loop, struct store *s,
                                    struct rules_compile *compile, const char *path,
                                    const struct config *cfg, rules_store_apply_fn *apply,
                                    void *ctx);

/* The rules in force (the cache read at start, or a version applied):
 * text (copied) as version; cached marks them as coming from the cache. -1
 * out of memory: the version is taken, its text is not kept. */
int rules_store_adopt(struct rules_store *rs, const char *text, size_t len, uint64_t version,
                      int cached);

/* The text of the version in force (NULL: none yet, the file's rules) and
 * its number. Valid until the next apply. */
const char *rules_store_text(const struct rules_store *rs, size_t *len, uint64_t *version);

/* The last version's apply error ("version N: NAME:LINE: ..."), NULL when
 * the last one applied (the status page). Valid until the next poll. */
const char *rules_store_error(const struct rules_store *rs);

/* SIGHUP: a version refused with the old file may pass with the new one:
 * forget the refusals (each is logged once again if it fails again). */
void rules_store_retry(struct rules_store *rs);

/* GET /fleet: the fleet's view as JSON (rules_fleet.h), as this agent's
 * last report (every 5 s, and after each new version) answered it;
 * malloc'd, its length in *len. NULL before the first answer, or out of
 * memory. */
char *rules_store_fleet_json(const struct rules_store *rs, size_t *len);

/* Stop polling (before the store is freed), then free. NULL no-op. */
void rules_store_stop(struct rules_store *rs);
void rules_store_free(struct rules_store *rs);

/* [rules] source = redis, at start (path: the agent's file, *cfg loaded
 * from it): the cached version when the cache holds a usable one (*cfg
 * replaced by the file with those rules; their text, malloc'd, in *text
 * and *len, their version in *version, for rules_store_adopt), else *text
 * NULL and the file's own [rule:*] sections until Redis answers (none: said
 * loudly). Logs which; never a reason not to start. */
void rules_store_boot(const char *path, struct config **cfg, char **text, size_t *len,
                      uint64_t *version);

/* The cache file at path: *text (malloc'd, NUL-terminated, *len bytes)
 * and the version it holds. 0, or -1 with why in err (missing, unreadable,
 * too large, no version line). */
int rules_store_read_cache(const char *path, char **text, size_t *len, uint64_t *version,
                           char *err, size_t errlen);

/* Write text as version to path atomically: a temporary file of its own
 * beside path (mkstemp: agents sharing the path never write the same one),
 * fsync, rename, fsync of the directory. 0, or -1 with why in err and no
 * temporary file left. */
int rules_store_write_cache(const char *path, const char *text, size_t len, uint64_t version,
                            char *err, size_t errlen);

/* The check of a rule set, one for every user (pure: no Redis): text
 * (len bytes, NUL-terminated; named name in errors) parsed with the
 * non-rule sections of the file at path exactly as --check does
 * (config_load_with_rules), and holding at least one [rule:*] section: an
 * empty set would allow every request everywhere. --push and the cache read
 * at start call it on text they read themselves. 0 with *out the config
 * (NULL out: freed), or -1 with "NAME[:LINE]: message" lines in err. */
int rules_store_check_text(const char *path, const char *text, size_t len, const char *name,
                           struct config **out, char *err, size_t errlen);

/* The same for a version read from Redis (an agent applying it, --rollback
 * choosing it): first its sha256 (the hash's, as --push wrote it: 64 hex
 * digits) must be present and be text's. */
int rules_store_check_version(const char *path, const char *text, size_t len, const char *sha256,
                              const char *name, struct config **out, char *err, size_t errlen);

/* sha256 of text in lower-case hex (65 bytes with the NUL). */
void rules_store_sha256(const char *text, size_t len, char out[65]);

#endif
