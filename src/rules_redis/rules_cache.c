/* SPDX-License-Identifier: Apache-2.0 */
/* rules_cache.c - what the rule store keeps outside Redis: the cache file
 * of the last applied version (read at start, written after each apply),
 * the configuration an agent starts with and the key names of the layout.
 * No Redis, no loop (see rules_redis.h). */
#include "rules_redis/rules_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "rules_redis/rules_check.h"

/* The cache's first line: an INI comment, so that the file is a rules file
 * too (an operator may --check or --push it as it is). */
#define CACHE_HEAD "; spoa-ratelimit rules version "

size_t rules_redis_key(const char *prefix, const char *suffix, char *out)
{
    int n = snprintf(out, RULES_STORE_KEY_MAX, "%s{rules}:%s", prefix ? prefix : "", suffix);

    return n < 0 ? 0 : (size_t)n >= RULES_STORE_KEY_MAX ? RULES_STORE_KEY_MAX - 1 : (size_t)n;
}

int rules_redis_read_cache(const char *path, char **text, size_t *len, uint64_t *version, char *err,
                           size_t errlen)
{
    FILE *fp = fopen(path, "r");
    char *buf = NULL;
    size_t n = 0, cap = CFG_MAX_RULES_TEXT + 256;

    *text = NULL;
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!(buf = malloc(cap + 1))) {
        fclose(fp);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    n = fread(buf, 1, cap + 1, fp);
    fclose(fp);
    buf[n > cap ? cap : n] = '\0';
    const char *nl = strchr(buf, '\n');
    char *end = NULL;
    if (n > cap) {
        snprintf(err, errlen, "%s: larger than 1 MiB", path);
    } else if (strncmp(buf, CACHE_HEAD, strlen(CACHE_HEAD)) != 0 || !nl ||
               (*version = strtoull(buf + strlen(CACHE_HEAD), &end, 10)) == 0 ||
               (*end != ' ' && *end != '\n')) {
        snprintf(err, errlen, "%s: not a rules cache (no version line)", path);
    } else {
        /* the text as Redis holds it: the version line is the cache's own */
        size_t skip = (size_t)(nl + 1 - buf);
        memmove(buf, nl + 1, n - skip + 1);
        *text = buf;
        *len = n - skip;
        return 0;
    }
    free(buf);
    return -1;
}

/* Best effort: the rename itself reaches the disk (a crash right after
 * an apply finds the new file, not the old one). Not every file system
 * can fsync a directory; the file is in place either way. */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    int fd;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if ((size_t)snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path),
                              path) >= sizeof(dir))
        return;
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
        return;
    (void)fsync(fd);
    close(fd);
}

int rules_redis_write_cache(const char *path, const char *text, size_t len, uint64_t version,
                            char *err, size_t errlen)
{
    char tmp[4096];
    int fd;
    FILE *fp;

    /* A name of its own beside path (rename stays within one file system):
     * two agents on one host may share a cache path, and a fixed name would
     * let one truncate the file the other is about to rename. */
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp)) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    fd = mkostemp(tmp, O_CLOEXEC);
    /* the rules are no secret, but the cache is the agent's own file */
    if (fd == -1 || fchmod(fd, 0640) == -1 || !(fp = fdopen(fd, "w"))) {
        snprintf(err, errlen, "%s: cannot write: %s", fd == -1 ? path : tmp, strerror(errno));
        if (fd != -1) {
            close(fd);
            unlink(tmp);
        }
        return -1;
    }
    int bad = fprintf(fp, CACHE_HEAD "%" PRIu64 "\n", version) < 0 ||
              fwrite(text, 1, len, fp) != len || fflush(fp) != 0 || fsync(fileno(fp)) == -1;
    int saved = errno;
    if (fclose(fp) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) == -1) {
        snprintf(err, errlen, "%s: cannot write: %s", bad ? tmp : path,
                 strerror(bad ? saved : errno));
        unlink(tmp);
        return -1;
    }
    sync_dir(path);
    return 0;
}

void rules_redis_boot(const char *path, struct config **cfg, char **text, size_t *len,
                      uint64_t *version)
{
    char err[8192];
    const char *cache = (*cfg)->rules_cache;
    struct config *with = NULL;

    if (cache && rules_redis_read_cache(cache, text, len, version, err, sizeof(err)) == 0) {
        /* the check of every rule set: a cache an older release wrote with
         * an empty set is not run */
        if (rules_redis_check_text(path, *text, *len, cache, &with, err, sizeof(err)) == 0) {
            LOG_WARN("\"running on the cached rules until Redis answers\" cache=%s version=%llu "
                     "rules=%zu",
                     log_val(cache), (unsigned long long)*version, with->nrules);
            config_free(*cfg); /* cache pointed into it */
            *cfg = with;
            return;
        }
        LOG_ERROR("\"rules cache refused\" cache=%s error=\"%s\"", log_val(cache),
                  log_esc(err, strcspn(err, "\n")));
        free(*text);
        *text = NULL;
    } else if (cache) {
        LOG_WARN("\"no rules cache\" error=\"%s\"", log_esc(err, strlen(err)));
    }
    if ((*cfg)->nrules)
        LOG_WARN("\"no rule set from Redis yet: the file's own [rule:*] sections until Redis "
                 "answers\" file=%s rules=%zu",
                 log_val(path), (*cfg)->nrules);
    else
        LOG_ERROR("\"NO RULES: every request is allowed until a rule set comes from Redis "
                  "(spoa-ratelimit --push)\" file=%s",
                  log_val(path));
}
