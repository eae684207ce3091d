/* SPDX-License-Identifier: Apache-2.0 */
/* store_why.c - why Redis is down, by name (store_why.h): the reasons' names
 * and the process's last one. */
#include "store_why.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "store_errors.h"

/* The store's own words and hiredis' (strerror) socket errors, by name; the
 * first match wins (name lookups before timeouts: "name lookup timed out"). */
static const struct {
    const char *text;
    const char *name;
} phrases[] = {
    {"not master", "not_master"},
    {"master unconfirmed", "master_unconfirmed"},
    {"malformed replies", "bad_reply"},
    {"scripts do not stay loaded", "NOSCRIPT"},
    {"reply too large", "reply_too_large"},
    {"name lookup", "name_lookup"},
    {"Name or service not known", "name_lookup"},
    {"Temporary failure in name resolution", "name_lookup"},
    {"No address associated", "name_lookup"},
    {"no address", "no_address"},
    {"Connection refused", "connection_refused"},
    {"timed out", "timeout"},
    {"Timeout", "timeout"},
    {"not answering", "timeout"},
    {"Connection reset", "connection_reset"},
    {"No route to host", "host_unreachable"},
    {"Host is unreachable", "host_unreachable"},
    {"Network is unreachable", "network_unreachable"},
    {"No such file or directory", "no_such_socket"},
    {"Permission denied", "permission_denied"},
    {"closed", "closed"},
    {"Broken pipe", "closed"},
};

/* An error reply's code at s: its kind's name when the store knows the kind
 * (NOAUTH for "Protocol error: unauthenticated"), else its first word when
 * made of capitals (ERR, EXECABORT, ...). 1 when one was found. */
static int reply_code(const char *s, char *out, size_t outlen)
{
    enum metrics_redis_error kind = store_error_kind(s);
    char code[STORE_WHY_NAME_MAX];

    if (kind != METRICS_REDIS_OTHER) {
        snprintf(out, outlen, "%s", metrics_redis_error_names[kind]);
        return 1;
    }
    store_error_code(s, code, sizeof(code));
    if (strcmp(code, "other") == 0 || strlen(code) < 2)
        return 0;
    snprintf(out, outlen, "%s", code);
    return 1;
}

void store_why_name(const char *why, char *out, size_t outlen)
{
    const char *colon;
    size_t n = sizeof(phrases) / sizeof(phrases[0]);

    if (outlen == 0)
        return;
    if (!why || !why[0]) {
        snprintf(out, outlen, "error");
        return;
    }
    for (size_t i = 0; i < 5; i++) /* the store's own words about replies */
        if (strstr(why, phrases[i].text)) {
            snprintf(out, outlen, "%s", phrases[i].name);
            return;
        }
    /* an error reply, after the setup command it answered ("AUTH:
     * WRONGPASS ...") or alone (a kind the store knows first: "ERR
     * Protocol error: unauthenticated ..." is NOAUTH) */
    if (store_error_kind(why) != METRICS_REDIS_OTHER && reply_code(why, out, outlen))
        return;
    colon = strstr(why, ": ");
    if (colon && colon - why < 40 && reply_code(colon + 2, out, outlen))
        return;
    if (reply_code(why, out, outlen))
        return;
    for (size_t i = 5; i < n; i++)
        if (strcasestr(why, phrases[i].text)) {
            snprintf(out, outlen, "%s", phrases[i].name);
            return;
        }
    snprintf(out, outlen, "error");
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct store_why last;

void store_why_note(const char *addr, const char *why)
{
    struct store_why w;
    struct timeval tv;

    if (!why || !why[0])
        return; /* nothing said: keep the last reason that was */
    memset(&w, 0, sizeof(w));
    store_why_name(why, w.name, sizeof(w.name));
    snprintf(w.detail, sizeof(w.detail), "%s", why);
    snprintf(w.addr, sizeof(w.addr), "%s", addr ? addr : "");
    gettimeofday(&tv, NULL);
    w.at_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    pthread_mutex_lock(&lock);
    last = w;
    pthread_mutex_unlock(&lock);
}

int store_why_last(struct store_why *out)
{
    pthread_mutex_lock(&lock);
    *out = last;
    pthread_mutex_unlock(&lock);
    return out->at_ms != 0;
}

void store_why_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(&last, 0, sizeof(last));
    pthread_mutex_unlock(&lock);
}
