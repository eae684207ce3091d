/* SPDX-License-Identifier: Apache-2.0 */
/* rules_check.h - the one check a rule set passes before it goes to the
 * fleet (--push), goes back to it (--rollback), or is put in force by an
 * agent (a version from Redis, loaded off the loop by rules_compile.c; the
 * cache at start), and the sha256 a version carries. Pure: no Redis, no
 * loop (rules_check.c). */
#ifndef RULES_CHECK_H
#define RULES_CHECK_H

#include <stddef.h>

struct config;

/* The check of a rule set, one for every user (pure: no Redis): text
 * (len bytes, NUL-terminated; named name in errors) parsed with the
 * non-rule sections of the file at path exactly as --check does
 * (config_load_with_rules), and holding at least one [rule:*] section: an
 * empty set would allow every request everywhere. --push and the cache read
 * at start call it on text they read themselves. 0 with *out the config
 * (NULL out: freed), or -1 with "NAME[:LINE]: message" lines in err. */
int rules_redis_check_text(const char *path, const char *text, size_t len, const char *name,
                           struct config **out, char *err, size_t errlen);

/* The same for a version read from Redis (an agent applying it, --rollback
 * choosing it): first its sha256 (the hash's, as --push wrote it: 64 hex
 * digits) must be present and be text's. */
int rules_redis_check_version(const char *path, const char *text, size_t len, const char *sha256,
                              const char *name, struct config **out, char *err, size_t errlen);

/* sha256 of text in lower-case hex (65 bytes with the NUL). */
void rules_redis_sha256(const char *text, size_t len, char out[65]);

#endif
