/* SPDX-License-Identifier: Apache-2.0 */
/* rules_cache.h - what the rule store keeps outside Redis: the cache file
 * of the last applied version, the configuration an agent starts with, and
 * the key names of the layout (lua/README.md, "Rules from Redis"). No Redis,
 * no loop (rules_cache.c). */
#ifndef RULES_CACHE_H
#define RULES_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct config;

#define RULES_STORE_KEY_MAX 160 /* a prefix (64) and the longest suffix */

/* PREFIX{rules}:SUFFIX into out (RULES_STORE_KEY_MAX bytes); its length. */
size_t rules_redis_key(const char *prefix, const char *suffix, char *out);

/* [rules] source = redis, at start (path: the agent's file, *cfg loaded
 * from it): the cached version when the cache holds a usable one (*cfg
 * replaced by the file with those rules; their text, malloc'd, in *text
 * and *len, their version in *version, for rules_redis_adopt), else *text
 * NULL and the file's own [rule:*] sections until Redis answers (none: said
 * loudly). Logs which; never a reason not to start. */
void rules_redis_boot(const char *path, struct config **cfg, char **text, size_t *len,
                      uint64_t *version);

/* The cache file at path: *text (malloc'd, NUL-terminated, *len bytes)
 * and the version it holds. 0, or -1 with why in err (missing, unreadable,
 * too large, no version line). */
int rules_redis_read_cache(const char *path, char **text, size_t *len, uint64_t *version, char *err,
                           size_t errlen);

/* Write text as version to path atomically: a temporary file of its own
 * beside path (mkstemp: agents sharing the path never write the same one),
 * fsync, rename, fsync of the directory. 0, or -1 with why in err and no
 * temporary file left. */
int rules_redis_write_cache(const char *path, const char *text, size_t len, uint64_t version,
                            char *err, size_t errlen);

#endif
