/* SPDX-License-Identifier: Apache-2.0 */
/* warning.c - the registry of active warnings (warning.h). */
#include "warning.h"

#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const warning_kind_names[WARNING_KINDS] = {
    [WARNING_HAPROXY_NEVER_ASKS] = "haproxy_never_asks",
    [WARNING_SLOTS_NEVER_RELEASED] = "slots_never_released",
    [WARNING_REDIS_STATE_LOST] = "redis_state_lost",
    [WARNING_RULES_STORE_LOST] = "rules_store_lost",
    [WARNING_REDIS_MAY_EVICT] = "redis_may_evict",
    [WARNING_REDIS_CLOCK_JUMP] = "redis_clock_jump",
    [WARNING_REDIS_UNCONFIRMED] = "redis_unconfirmed",
    [WARNING_REDIS_ERRORS] = "redis_errors",
    [WARNING_SECRET_READABLE] = "secret_readable",
    [WARNING_REDIS_SLOW] = "redis_slow",
    [WARNING_REDIS_AUTH_REFUSED] = "redis_auth_refused",
    [WARNING_GLOBAL_UNREACHABLE] = "global_unreachable",
    [WARNING_GLOBAL_STATE_LOST] = "global_state_lost",
};

struct slot {
    int active;
    time_t since;
    char message[WARNING_MESSAGE_MAX];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[WARNING_KINDS];

/* msg escaped for a quoted log value, whole: log_esc() shows at most
 * LOG_VALUE_MAX bytes of a value, so longer messages go through it in
 * pieces. */
static const char *escaped(const char *msg, char *out, size_t cap)
{
    size_t len = strlen(msg), off = 0, used = 0;

    out[0] = '\0';
    while (off < len && used < cap - 1) {
        size_t n = len - off < LOG_VALUE_MAX ? len - off : LOG_VALUE_MAX;
        int w = snprintf(out + used, cap - used, "%s", log_esc(msg + off, n));
        if (w < 0)
            break;
        used += (size_t)w < cap - used ? (size_t)w : cap - used - 1;
        off += n;
    }
    return out;
}

static int valid(enum warning_kind k)
{
    return (int)k >= 0 && k < WARNING_KINDS;
}

int warning_raise(enum warning_kind k, const char *fmt, ...)
{
    char msg[WARNING_MESSAGE_MAX];
    va_list ap;
    if (!valid(k))
        return 0;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&lock);
    struct slot *s = &slots[k];
    int started = !s->active;
    if (started) {
        s->active = 1;
        s->since = time(NULL);
    }
    memcpy(s->message, msg, sizeof(msg));
    pthread_mutex_unlock(&lock);
    if (started && LOG_LVL_WARN <= log_level) {
        char esc[WARNING_MESSAGE_MAX * 4 + 1]; /* \xHH at worst */
        LOG_WARN("warning kind=%s message=\"%s\"", warning_kind_names[k],
                 escaped(msg, esc, sizeof(esc)));
    }
    return started;
}

int warning_clear(enum warning_kind k)
{
    if (!valid(k))
        return 0;
    pthread_mutex_lock(&lock);
    struct slot *s = &slots[k];
    int was = s->active;
    long long lasted = was ? (long long)(time(NULL) - s->since) : 0;
    s->active = 0;
    s->message[0] = '\0';
    pthread_mutex_unlock(&lock);
    if (was)
        LOG_WARN("\"warning cleared\" kind=%s after_s=%lld", warning_kind_names[k], lasted);
    return was;
}

int warning_active(enum warning_kind k)
{
    if (!valid(k))
        return 0;
    pthread_mutex_lock(&lock);
    int a = slots[k].active;
    pthread_mutex_unlock(&lock);
    return a;
}

size_t warning_list(struct warning_view *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (int k = 0; k < WARNING_KINDS; k++) {
        if (!slots[k].active)
            continue;
        if (n < max) {
            out[n].kind = (enum warning_kind)k;
            out[n].since = slots[k].since;
            memcpy(out[n].message, slots[k].message, sizeof(out[n].message));
        }
        n++;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

void warning_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(slots, 0, sizeof(slots));
    pthread_mutex_unlock(&lock);
}
