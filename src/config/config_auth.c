/* SPDX-License-Identifier: Apache-2.0 */
/* config_auth.c - credentials: [redis] password, password_file and
 * username against the url's (never two sources for one, never a user
 * without a password) and the Sentinels' own, for [redis] and [global];
 * and [agent] stats_auth or stats_auth_file for the stats listener. Secrets are wiped when dropped.
 */
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

/* The credential keys of [redis] or [global], and where the ones in force go. */
struct auth_keys {
    int sec;           /* SEC_REDIS or SEC_GLOBAL: where the lines are */
    const char *where; /* "" or "[global] ": in messages */
    const char *password, *password_file, *username;
    const struct cfg_redis_url *url;
    const char *url_text; /* the url as written; NULL: none */
    const char *sentinel; /* the sentinel list as written; NULL: none */
    const char *sentinel_username, *sentinel_password;
    char **auth_user, **auth_password;
};

/* Two places for one credential: say which lines. */
static void check_one_source(struct parse_state *st, const struct auth_keys *k, const char *key,
                             const char *what, int both)
{
    unsigned line = config_seen_line(st, k->sec, key), url = config_seen_line(st, k->sec, "url");

    if (both)
        config_errors_add(&st->errors, line > url ? line : url,
                          "%s'%s' and the url's %s cannot be used together (lines %u and %u)",
                          k->where, key, what, line < url ? line : url, line > url ? line : url);
}

/* The credentials in force (config.h): from the keys, the file or the url;
 * never two sources for one, never a user without a password. */
static void resolve_auth(struct parse_state *st, const struct auth_keys *k, int standalone)
{
    unsigned file_line = config_seen_line(st, k->sec, "password_file");
    const char *pw = k->password ? k->password : k->url->password;
    const char *user = k->username ? k->username : k->url->user;
    char *from_file = NULL, why[160];

    if (k->password && k->password_file) {
        unsigned a = config_seen_line(st, k->sec, "password");
        config_errors_add(&st->errors, a > file_line ? a : file_line,
                          "%s'password' and 'password_file' cannot be used together (lines %u "
                          "and %u)",
                          k->where, a < file_line ? a : file_line, a > file_line ? a : file_line);
    }
    check_one_source(st, k, "password", "password", k->password && k->url->password);
    check_one_source(st, k, "password_file", "password", k->password_file && k->url->password);
    check_one_source(st, k, "username", "user name", k->username && k->url->user);
    if (k->password_file) {
        from_file = read_password_file(k->password_file, why, sizeof(why));
        if (!from_file)
            config_errors_add(&st->errors, file_line, "%scannot read password_file '%s': %s",
                              k->where, k->password_file, why);
        else if (!k->password)
            pw = from_file;
    }
    if (user && !pw && !k->password_file)
        config_errors_add(&st->errors, config_seen_line(st, k->sec, "username"),
                          "%s'username' needs a password (password, password_file or the url's)",
                          k->where);
    if (k->sentinel_username && !k->sentinel_password)
        config_errors_add(&st->errors, config_seen_line(st, k->sec, "sentinel_username"),
                          "%s'sentinel_username' needs 'sentinel_password'", k->where);
    if ((k->sentinel_username || k->sentinel_password) && !k->sentinel) {
        const char *key = k->sentinel_password ? "sentinel_password" : "sentinel_username";
        config_errors_add(&st->errors, config_seen_line(st, k->sec, key),
                          "%s'%s' is only used with 'sentinel'", k->where, key);
    }
    if ((k->password || k->password_file || k->username) && standalone && !k->url_text) {
        const char *key = k->password        ? "password"
                          : k->password_file ? "password_file"
                                             : "username";
        config_errors_add(&st->errors, config_seen_line(st, k->sec, key),
                          "%s'%s' is only used with url, cluster or sentinel", k->where, key);
    }
    if ((pw && !(*k->auth_password = strdup(pw))) || (user && !(*k->auth_user = strdup(user))))
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
    struct config *cfg = st->cfg;
    const struct auth_keys k = {
        SEC_REDIS,
        "",
        cfg->redis_password,
        cfg->redis_password_file,
        cfg->redis_username,
        &cfg->redis_server,
        cfg->redis_url,
        cfg->redis_sentinel,
        cfg->redis_sentinel_username,
        cfg->redis_sentinel_password,
        &cfg->redis_auth_user,
        &cfg->redis_auth_password,
    };

    resolve_auth(st, &k, standalone);
    resolve_stats_auth(st);
}

void config_resolve_global_credentials(struct parse_state *st, int unset)
{
    struct config *cfg = st->cfg;
    const struct auth_keys k = {
        SEC_GLOBAL,
        "[global] ",
        cfg->global_password,
        cfg->global_password_file,
        cfg->global_username,
        &cfg->global_server,
        cfg->global_url,
        cfg->global_sentinel,
        cfg->global_sentinel_username,
        cfg->global_sentinel_password,
        &cfg->global_auth_user,
        &cfg->global_auth_password,
    };

    resolve_auth(st, &k, unset);
}
