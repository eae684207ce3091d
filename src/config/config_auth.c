/* SPDX-License-Identifier: Apache-2.0 */
/* config_auth.c - credentials: [redis] password, password_file and
 * username against the url's (never two sources for one, never a user
 * without a password), the Sentinels' own, and [agent] stats_auth or
 * stats_auth_file for the stats listener. Secrets are wiped when dropped. */
#include "config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_errors.h"

#define MAX_PASSWORD 4096 /* a password file is read up to this many bytes */

/* The secret of a password_file: its bytes less one trailing newline (\n or
 * \r\n). NULL with a message in why (empty, NUL bytes, too long, or the
 * reason it cannot be read). */
static char *read_password_file(const char *path, char *why, size_t whylen)
{
    char buf[MAX_PASSWORD + 2];
    /* non-blocking: a FIFO or a device must not hang a reload */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    FILE *fp;
    size_t n;
    char *pw = NULL;

    if (fd == -1 || fstat(fd, &st) == -1) {
        snprintf(why, whylen, "%s", strerror(errno));
        if (fd != -1)
            close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || !(fp = fdopen(fd, "r"))) {
        snprintf(why, whylen, "%s", S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file");
        close(fd);
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    if (ferror(fp)) {
        snprintf(why, whylen, "%s", strerror(errno ? errno : EIO));
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    if (n > MAX_PASSWORD)
        snprintf(why, whylen, "longer than %d bytes", MAX_PASSWORD);
    else if (n == 0)
        snprintf(why, whylen, "the file is empty");
    else if (strlen(buf) != n)
        snprintf(why, whylen, "the file holds a NUL byte");
    else if (!(pw = strdup(buf)))
        snprintf(why, whylen, "out of memory");
    explicit_bzero(buf, sizeof(buf));
    return pw;
}

/* Two places for one credential: say which lines. */
static void check_one_source(struct parse_state *st, const char *key, const char *what, int both)
{
    unsigned line = config_seen_line(st, SEC_REDIS, key),
             url = config_seen_line(st, SEC_REDIS, "url");

    if (both)
        config_errors_add(&st->errors, line > url ? line : url,
                          "'%s' and the url's %s cannot be used together (lines %u and %u)", key,
                          what, line < url ? line : url, line > url ? line : url);
}

/* The credentials in force (config.h): from the keys, the file or the url;
 * never two sources for one, never a user without a password. */
static void resolve_auth(struct parse_state *st, int standalone)
{
    struct config *cfg = st->cfg;
    unsigned file_line = config_seen_line(st, SEC_REDIS, "password_file");
    const char *pw = cfg->redis_password ? cfg->redis_password : cfg->redis_server.password;
    const char *user = cfg->redis_username ? cfg->redis_username : cfg->redis_server.user;
    char *from_file = NULL, why[160];

    if (cfg->redis_password && cfg->redis_password_file) {
        unsigned a = config_seen_line(st, SEC_REDIS, "password");
        config_errors_add(&st->errors, a > file_line ? a : file_line,
                          "'password' and 'password_file' cannot be used together (lines %u and "
                          "%u)",
                          a < file_line ? a : file_line, a > file_line ? a : file_line);
    }
    check_one_source(st, "password", "password", cfg->redis_password && cfg->redis_server.password);
    check_one_source(st, "password_file", "password",
                     cfg->redis_password_file && cfg->redis_server.password);
    check_one_source(st, "username", "user name", cfg->redis_username && cfg->redis_server.user);
    if (cfg->redis_password_file) {
        from_file = read_password_file(cfg->redis_password_file, why, sizeof(why));
        if (!from_file)
            config_errors_add(&st->errors, file_line, "cannot read password_file '%s': %s",
                              cfg->redis_password_file, why);
        else if (!cfg->redis_password)
            pw = from_file;
    }
    if (user && !pw && !cfg->redis_password_file)
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, "username"),
                          "'username' needs a password (password, password_file or the url's)");
    if (cfg->redis_sentinel_username && !cfg->redis_sentinel_password)
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, "sentinel_username"),
                          "'sentinel_username' needs 'sentinel_password'");
    if ((cfg->redis_sentinel_username || cfg->redis_sentinel_password) && !cfg->redis_sentinel) {
        const char *k = cfg->redis_sentinel_password ? "sentinel_password" : "sentinel_username";
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, k),
                          "'%s' is only used with 'sentinel'", k);
    }
    if ((cfg->redis_password || cfg->redis_password_file || cfg->redis_username) && standalone &&
        !cfg->redis_url) {
        const char *k = cfg->redis_password        ? "password"
                        : cfg->redis_password_file ? "password_file"
                                                   : "username";
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, k),
                          "'%s' is only used with url, cluster or sentinel", k);
    }
    if ((pw && !(cfg->redis_auth_password = strdup(pw))) ||
        (user && !(cfg->redis_auth_user = strdup(user))))
        config_errors_add(&st->errors, st->line, "out of memory");
    if (from_file) {
        explicit_bzero(from_file, strlen(from_file));
        free(from_file);
    }
}

/* [agent] stats_auth or stats_auth_file: one USER:PASSWORD for HTTP Basic
 * auth on the stats listener, the user not empty and without a colon (RFC
 * 7617), in cfg->stats_credentials. */
static void resolve_stats_auth(struct parse_state *st)
{
    struct config *cfg = st->cfg;
    unsigned line = config_seen_line(st, SEC_AGENT, "stats_auth");
    unsigned file_line = config_seen_line(st, SEC_AGENT, "stats_auth_file");
    char *from_file = NULL, why[160];
    const char *cred = cfg->stats_auth;

    if (cfg->stats_auth && cfg->stats_auth_file) {
        config_errors_add(&st->errors, line > file_line ? line : file_line,
                          "'stats_auth' and 'stats_auth_file' cannot be used together (lines %u "
                          "and %u)",
                          line < file_line ? line : file_line, line > file_line ? line : file_line);
        return;
    }
    if (cfg->stats_auth_file) {
        line = file_line;
        from_file = read_password_file(cfg->stats_auth_file, why, sizeof(why));
        if (!from_file) {
            config_errors_add(&st->errors, line, "cannot read stats_auth_file '%s': %s",
                              cfg->stats_auth_file, why);
            return;
        }
        cred = from_file;
    }
    if (cred) {
        const char *colon = strchr(cred, ':');
        if (!colon || colon == cred)
            config_errors_add(&st->errors, line,
                              "%s must be USER:PASSWORD (a user, a colon, "
                              "a password)",
                              from_file ? "the stats_auth_file" : "'stats_auth'");
        else if (strpbrk(cred, "\r\n"))
            config_errors_add(&st->errors, line, "%s holds a line break",
                              from_file ? "the stats_auth_file" : "'stats_auth'");
        else if (!(cfg->stats_credentials = strdup(cred)))
            config_errors_add(&st->errors, line, "out of memory");
    }
    if (from_file) {
        explicit_bzero(from_file, strlen(from_file));
        free(from_file);
    }
}

void config_resolve_credentials(struct parse_state *st, int standalone)
{
    resolve_auth(st, standalone);
    resolve_stats_auth(st);
}
