/* SPDX-License-Identifier: Apache-2.0 */
/* store_errors.c - error replies from Redis: kinds, refusals, retries, log
 * lines, the redis_errors warning (see store_errors.h). */
#include "store_errors.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"

#define NOTE_EVERY_S 10.0

/* One gate per kind: a refusal repeats on every call and every retry. */
static struct log_gate gates[METRICS_REDIS_ERROR_KINDS];

/* util_now_us() of the last error reply noted, 0: none (store_errors_tick). */
static atomic_uint_fast64_t last_noted_us;

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
        {"READONLY", METRICS_REDIS_READONLY},       {"MASTERDOWN", METRICS_REDIS_MASTERDOWN},
        {"NOPERM", METRICS_REDIS_NOPERM},           {"OOM", METRICS_REDIS_OOM},
        {"NOAUTH", METRICS_REDIS_NOAUTH},           {"WRONGPASS", METRICS_REDIS_WRONGPASS},
        {"NOSCRIPT", METRICS_REDIS_NOSCRIPT},       {"NOREPLICAS", METRICS_REDIS_NOREPLICAS},
        {"LOADING", METRICS_REDIS_LOADING},         {"TRYAGAIN", METRICS_REDIS_TRYAGAIN},
        {"CLUSTERDOWN", METRICS_REDIS_CLUSTERDOWN}, {"BUSY", METRICS_REDIS_BUSY},
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
    switch (kind) {
    case METRICS_REDIS_READONLY:
    case METRICS_REDIS_MASTERDOWN:
    case METRICS_REDIS_NOREPLICAS:
    case METRICS_REDIS_LOADING:
    case METRICS_REDIS_NOPERM:
    case METRICS_REDIS_OOM:
    case METRICS_REDIS_NOAUTH:
    case METRICS_REDIS_WRONGPASS:
        return 1;
    default:
        return 0;
    }
}

long long store_error_retry_wait(enum metrics_redis_error kind, unsigned tries, uint64_t waited_us,
                                 uint64_t timeout_us)
{
    if (kind != METRICS_REDIS_TRYAGAIN || tries >= STORE_TRYAGAIN_MAX)
        return -1;
    if (waited_us + STORE_TRYAGAIN_WAIT_US >= timeout_us)
        return -1; /* its answer would come too late to decide anything */
    return STORE_TRYAGAIN_WAIT_US;
}

void store_error_code(const char *err, char *out, size_t outlen)
{
    size_t n = 0;

    if (outlen == 0)
        return;
    while (err && err[n] >= 'A' && err[n] <= 'Z' && n < 32)
        n++;
    if (n == 0 || (err[n] != ' ' && err[n] != '\0'))
        snprintf(out, outlen, "other");
    else
        snprintf(out, outlen, "%.*s", (int)n, err);
}

const char *store_error_hint(enum metrics_redis_error kind, int sentinel)
{
    switch (kind) {
    case METRICS_REDIS_READONLY:
        return "redis is a replica, not the master (READONLY): reconnecting to find the master";
    case METRICS_REDIS_MASTERDOWN:
        return "redis replica lost its master (MASTERDOWN): reconnecting to find the master";
    case METRICS_REDIS_NOREPLICAS:
        return "the master has fewer replicas than its min-replicas-to-write (NOREPLICAS), or "
               "they lag past min-replicas-max-lag: it refuses writes; rules fall back until a "
               "replica is back";
    case METRICS_REDIS_LOADING:
        return "redis is loading its data set (LOADING): rules fall back until it is done";
    case METRICS_REDIS_TRYAGAIN:
        return "a Cluster slot migration refused a call past its retries (TRYAGAIN): check "
               "that the migration is moving (redis-cli --cluster check)";
    case METRICS_REDIS_CLUSTERDOWN:
        return "the Cluster does not serve a slot (CLUSTERDOWN): check CLUSTER INFO";
    case METRICS_REDIS_BUSY:
        return "redis is running a script past lua-time-limit (BUSY): find it (SLOWLOG)";
    case METRICS_REDIS_NOPERM:
        return "redis ACL denied a command (NOPERM): the user needs +evalsha, +script|load and "
               "+ping, on the keys of the prefix";
    case METRICS_REDIS_OOM:
        return "redis is full (OOM): maxmemory reached with nothing to evict; rules fall back";
    case METRICS_REDIS_NOAUTH:
        return sentinel ? "sentinel needs a password (NOAUTH): set [redis] sentinel_password"
                        : "redis needs a password (NOAUTH): set [redis] password or "
                          "password_file";
    case METRICS_REDIS_WRONGPASS:
        return sentinel ? "sentinel refused the password (WRONGPASS): check [redis] "
                          "sentinel_username and sentinel_password"
                        : "redis refused the password (WRONGPASS): check [redis] username and "
                          "password";
    case METRICS_REDIS_NOSCRIPT:
        return "redis lost the scripts (NOSCRIPT): reloaded";
    case METRICS_REDIS_REPLY_TOO_LARGE:
        return "redis sent a reply larger than any the agent's commands get (reply_too_large): "
               "the connection was closed and is made again; something between the agent and "
               "redis (a proxy), or redis, is broken or hostile";
    case METRICS_REDIS_BAD_REPLY:
        return "redis answers malformed replies (bad_reply): not a Redis, or something between "
               "mangles replies; rules fall back until a probe call gets a well-formed reply";
    default:
        return "redis answered a call with an error: see the agent's log at debug and Redis' own";
    }
}

/* Logged at warn, not error: the server or the topology, not our settings. */
static int warn_kind(enum metrics_redis_error kind)
{
    return kind == METRICS_REDIS_READONLY || kind == METRICS_REDIS_MASTERDOWN ||
           kind == METRICS_REDIS_NOREPLICAS || kind == METRICS_REDIS_LOADING ||
           kind == METRICS_REDIS_TRYAGAIN || kind == METRICS_REDIS_CLUSTERDOWN ||
           kind == METRICS_REDIS_BUSY;
}

static void raise_warning(enum metrics_redis_error kind, const char *err, int sentinel,
                          const char *addr)
{
    char code[40];

    if (kind == METRICS_REDIS_REPLY_TOO_LARGE) /* not an error reply: no code of its own */
        snprintf(code, sizeof(code), "%s", metrics_redis_error_names[kind]);
    else
        store_error_code(err, code, sizeof(code));
    atomic_store(&last_noted_us, util_now_us());
    warning_raise(WARNING_REDIS_ERRORS, "%s answers with %s errors (addr %s): %s",
                  sentinel ? "sentinel" : "redis", code, addr ? addr : "-",
                  store_error_hint(kind, sentinel));
}

void store_errors_tick(uint64_t now_us, uint64_t quiet_us)
{
    uint64_t last = atomic_load(&last_noted_us);

    if (last && now_us > last && now_us - last >= quiet_us && warning_active(WARNING_REDIS_ERRORS))
        warning_clear(WARNING_REDIS_ERRORS);
}

void store_error_note(enum metrics_redis_error kind, const char *err,
                      const struct store_error_where *w)
{
    unsigned long long before;
    const char *e = err ? err : "";
    int sentinel = w->server && strcmp(w->server, "sentinel") == 0;
    int warn = warn_kind(kind);

    if (kind >= METRICS_REDIS_ERROR_KINDS)
        kind = METRICS_REDIS_OTHER;
    METRIC_INC(redis_error_replies[kind]);
    if (kind == METRICS_REDIS_NOSCRIPT)
        return;
    raise_warning(kind, e, sentinel, w->addr);
    if (kind == METRICS_REDIS_OTHER) {
        LOG_DEBUG("\"redis error reply\" addr=%s command=\"%s\" err=\"%s\"", log_val(w->addr),
                  log_esc(w->command, strlen(w->command)), log_esc(e, strlen(e)));
        return;
    }
    if ((int)(warn ? LOG_LVL_WARN : LOG_LVL_ERROR) > (int)log_level ||
        !log_gate_open(&gates[kind], NOTE_EVERY_S, &before))
        return;
    const char *msg = store_error_hint(kind, sentinel);
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

void store_error_bad(enum metrics_redis_error kind, const char *addr, const char *what,
                     const char *why)
{
    unsigned long long before;
    const char *hint = kind == METRICS_REDIS_NOSCRIPT
                           ? "redis answers NOSCRIPT right after SCRIPT LOAD: the scripts do not "
                             "stay loaded (a proxy spreading calls over servers?); rules fall "
                             "back, reloads back off"
                           : store_error_hint(kind, 0);

    if (kind >= METRICS_REDIS_ERROR_KINDS)
        kind = METRICS_REDIS_BAD_REPLY;
    if (kind != METRICS_REDIS_NOSCRIPT)
        METRIC_INC(redis_error_replies[kind]);
    atomic_store(&last_noted_us, util_now_us());
    warning_raise(WARNING_REDIS_ERRORS, "%s (addr %s, %s: %s)", hint, addr ? addr : "-",
                  what ? what : "-", why ? why : "-");
    if ((int)LOG_LVL_ERROR > (int)log_level || !log_gate_open(&gates[kind], NOTE_EVERY_S, &before))
        return;
    LOG_ERROR("\"%s\" addr=%s command=\"%s\" count=%llu err=\"%s\"", hint, log_val(addr),
              log_esc(what ? what : "", what ? strlen(what) : 0), before + 1,
              log_esc(why ? why : "", why ? strlen(why) : 0));
}
