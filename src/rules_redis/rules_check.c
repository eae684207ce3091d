/* SPDX-License-Identifier: Apache-2.0 */
/* rules_check.c - the one check a rule set passes before it goes to the
 * fleet (--push), goes back to it (--rollback), or is put in force by an
 * agent (a version from Redis, the cache at start), and the sha256 a version
 * carries: see rules_redis.h. Pure: no Redis, no loop. */
#include "rules_redis/rules_check.h"

#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/sha256.h"

void rules_redis_sha256(const char *text, size_t len, char out[65])
{
    struct sha256 s;
    uint8_t d[SHA256_LEN];

    sha256_init(&s);
    sha256_update(&s, text, len);
    sha256_final(&s, d);
    for (size_t i = 0; i < SHA256_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int rules_redis_check_text(const char *path, const char *text, size_t len, const char *name,
                           struct config **out, char *err, size_t errlen)
{
    struct config *cfg = NULL;

    if (out)
        *out = NULL;
    if (config_load_with_rules(path, text, len, name, &cfg, err, errlen) < 0)
        return -1;
    /* a fleet without rules allows every request: never by mistake, from
     * an operator's empty file or a hand-written version alike */
    if (cfg->nrules == 0) {
        snprintf(err, errlen, "%s: no [rule:*] section: every agent would allow every request\n",
                 name);
        config_free(cfg);
        return -1;
    }
    if (out)
        *out = cfg;
    else
        config_free(cfg);
    return 0;
}

int rules_redis_check_version(const char *path, const char *text, size_t len, const char *sha256,
                              const char *name, struct config **out, char *err, size_t errlen)
{
    char sha[65];

    if (out)
        *out = NULL;
    /* --push always writes one: a version without is hand-written or
     * damaged, and nothing tells its text is the one that was meant */
    if (!sha256 || !*sha256) {
        snprintf(err, errlen, "%s: no sha256: not a version --push wrote\n", name);
        return -1;
    }
    rules_redis_sha256(text, len, sha);
    if (strlen(sha256) != 64 || memcmp(sha, sha256, 64) != 0) {
        snprintf(err, errlen, "%s: its sha256 does not match its text\n", name);
        return -1;
    }
    return rules_redis_check_text(path, text, len, name, out, err, errlen);
}
