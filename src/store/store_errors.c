/* SPDX-License-Identifier: Apache-2.0 */
/* store_errors.c - error replies from Redis: kinds, refusals, log lines (see
 * store_errors.h). */
#include "store_errors.h"

#include <string.h>

#include "core/log.h"

#define NOTE_EVERY_S 10.0

/* One gate per kind: a refusal repeats on every call and every retry. */
static struct log_gate gates[METRICS_REDIS_ERROR_KINDS];

static int starts(const char *s, const char *word)
{
    size_t n = strlen(word);

    return strncmp(s, word, n) == 0 && (s[n] == ' ' || s[n] == '\0');
}

enum metrics_redis_error store_error_kind(const char *err)
{
    static const struct {
        const char *word;
        enum metrics_redis_error kind;
    } words[] = {
        {"READONLY", METRICS_REDIS_READONLY}, {"MASTERDOWN", METRICS_REDIS_MASTERDOWN},
        {"NOPERM", METRICS_REDIS_NOPERM},     {"OOM", METRICS_REDIS_OOM},
        {"NOAUTH", METRICS_REDIS_NOAUTH},     {"WRONGPASS", METRICS_REDIS_WRONGPASS},
        {"NOSCRIPT", METRICS_REDIS_NOSCRIPT},
    };

    if (!err)
        return METRICS_REDIS_OTHER;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (starts(err, words[i].word))
            return words[i].kind;
    }
    /* Redis 7 words a script's redis.call() that the ACL refuses this way */
    if (strstr(err, "The user executing the script can't run this command"))
        return METRICS_REDIS_NOPERM;
    /* before AUTH, Redis closes on a long argument (our SCRIPT LOAD) */
    if (strstr(err, "Protocol error: unauthenticated"))
        return METRICS_REDIS_NOAUTH;
    return METRICS_REDIS_OTHER;
}

int store_error_refusal(enum metrics_redis_error kind)
{
    return kind != METRICS_REDIS_NOSCRIPT && kind != METRICS_REDIS_OTHER;
}

void store_error_note(enum metrics_redis_error kind, const char *err,
                      const struct store_error_where *w)
{
    unsigned long long before;
    const char *msg = NULL, *e = err ? err : "";
    int sentinel = w->server && strcmp(w->server, "sentinel") == 0;
    int warn = kind == METRICS_REDIS_READONLY || kind == METRICS_REDIS_MASTERDOWN;

    if (kind >= METRICS_REDIS_ERROR_KINDS)
        kind = METRICS_REDIS_OTHER;
    METRIC_INC(redis_error_replies[kind]);
    if (kind == METRICS_REDIS_NOSCRIPT)
        return;
    if (kind == METRICS_REDIS_OTHER) {
        LOG_DEBUG("\"redis error reply\" addr=%s command=\"%s\" err=\"%s\"", log_val(w->addr),
                  log_esc(w->command, strlen(w->command)), log_esc(e, strlen(e)));
        return;
    }
    if ((int)(warn ? LOG_LVL_WARN : LOG_LVL_ERROR) > (int)log_level ||
        !log_gate_open(&gates[kind], NOTE_EVERY_S, &before))
        return;
    switch (kind) {
    case METRICS_REDIS_READONLY:
        msg = "redis is a replica, not the master (READONLY): reconnecting to find the master";
        break;
    case METRICS_REDIS_MASTERDOWN:
        msg = "redis replica lost its master (MASTERDOWN): reconnecting to find the master";
        break;
    case METRICS_REDIS_NOPERM:
        msg = "redis ACL denied a command (NOPERM): the user needs +evalsha, +script|load and "
              "+ping, on the keys of the prefix";
        break;
    case METRICS_REDIS_OOM:
        msg = "redis is full (OOM): maxmemory reached with nothing to evict; rules fall back";
        break;
    case METRICS_REDIS_NOAUTH:
        msg = sentinel ? "sentinel needs a password (NOAUTH): set [redis] sentinel_password"
                       : "redis needs a password (NOAUTH): set [redis] password or "
                         "password_file";
        break;
    default:
        msg = sentinel ? "sentinel refused the password (WRONGPASS): check [redis] "
                         "sentinel_username and sentinel_password"
                       : "redis refused the password (WRONGPASS): check [redis] username and "
                         "password";
        break;
    }
    if (kind == METRICS_REDIS_NOPERM)
        LOG_ERROR("\"%s\" addr=%s user=%s command=\"%s\" key_pattern=\"~%s*\" count=%llu "
                  "err=\"%s\"",
                  msg, log_val(w->addr), log_val(w->user ? w->user : "default"),
                  log_esc(w->command, strlen(w->command)),
                  log_esc(w->prefix ? w->prefix : "", w->prefix ? strlen(w->prefix) : 0),
                  before + 1, log_esc(e, strlen(e)));
    else if (warn)
        LOG_WARN("\"%s\" addr=%s command=\"%s\" count=%llu err=\"%s\"", msg, log_val(w->addr),
                 log_esc(w->command, strlen(w->command)), before + 1, log_esc(e, strlen(e)));
    else
        LOG_ERROR("\"%s\" addr=%s user=%s command=\"%s\" count=%llu err=\"%s\"", msg,
                  log_val(w->addr), log_val(w->user ? w->user : "default"),
                  log_esc(w->command, strlen(w->command)), before + 1, log_esc(e, strlen(e)));
}
