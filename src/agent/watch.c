/* SPDX-License-Identifier: Apache-2.0 */
/* watch.c - warnings the agent finds in itself (watch.h). */
#include "agent/watch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "rules/rules.h"

void watch_init(struct watch *w, uint64_t now_ms)
{
    memset(w, 0, sizeof(*w));
    w->started_ms = now_ms;
}

void watch_free(struct watch *w)
{
    free(w->rules);
    w->rules = NULL;
    w->nrules = 0;
}

static uint64_t released_count(struct metrics_rule *m)
{
    return metrics_ld(&m->slots_released_ok) + metrics_ld(&m->slots_released_unknown);
}

void watch_config(struct watch *w, const struct ruleset *rs)
{
    const struct config *cfg = rs->cfg;
    size_t n = 0;

    w->reloaded = w->configs++ > 0;
    watch_free(w);
    for (size_t i = 0; i < cfg->nrules; i++)
        n += cfg->rules[i].algorithm == BUCKET_CONCURRENCY && rs->metrics[i];
    if (n && !(w->rules = calloc(n, sizeof(*w->rules)))) {
        LOG_ERROR("\"out of memory: concurrency rules not watched for missing releases\"");
        n = 0;
    }
    for (size_t i = 0, j = 0; j < n && i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        struct watch_rule *wr = &w->rules[j];
        if (r->algorithm != BUCKET_CONCURRENCY || !rs->metrics[i])
            continue;
        wr->m = rs->metrics[i];
        snprintf(wr->name, sizeof(wr->name), "%s", r->name);
        snprintf(wr->release, sizeof(wr->release), "%s", r->release ? r->release : "");
        wr->limit = r->cc_limit;
        wr->max_hold_ms = r->max_hold_ms;
        wr->expired0 = metrics_ld(&wr->m->slots_expired);
        wr->released0 = released_count(wr->m);
        j++;
    }
    w->nrules = n;
    /* the rules changed: a rule now watched starts from nothing */
    warning_clear(WARNING_SLOTS_NEVER_RELEASED);
    watch_secrets(cfg);
}

/* haproxy_never_asks: peers have been around (a HELLO within every
 * silence, or a connection held) for a whole silence, and no NOTIFY came
 * meanwhile. A HAProxy that starts health-checking a second before its first
 * request is not reported; one whose checks stopped starts over. */
static void never_asks(struct watch *w, const struct config *cfg, uint64_t now_ms)
{
    uint64_t hellos = metrics_ld(&metrics.frames_in[METRICS_FRAME_HELLO]);
    uint64_t notifies = metrics_ld(&metrics.frames_in[METRICS_FRAME_NOTIFY]);
    uint64_t silence = cfg->notify_silence_ms;
    char d[32];

    if (hellos != w->hellos) {
        w->hellos = hellos;
        w->last_hello_ms = now_ms;
    }
    if (notifies != w->notifies) {
        w->notifies = notifies;
        w->peers_since_ms = 0;
        warning_clear(WARNING_HAPROXY_NEVER_ASKS);
        return;
    }
    if (!silence) {
        warning_clear(WARNING_HAPROXY_NEVER_ASKS);
        return;
    }
    int peers = (w->last_hello_ms && now_ms - w->last_hello_ms < silence) ||
                atomic_load_explicit(&metrics.connections, memory_order_relaxed) > 0;
    if (!peers) {
        w->peers_since_ms = 0; /* raised stays raised until a NOTIFY */
        return;
    }
    if (!w->peers_since_ms)
        w->peers_since_ms = now_ms;
    if (now_ms - w->peers_since_ms < silence || now_ms - w->started_ms < silence)
        return;
    config_duration_text(silence, d, sizeof(d));
    warning_raise(WARNING_HAPROXY_NEVER_ASKS,
                  "HAProxy connects to this agent (HELLO, health checks included) but sent no "
                  "request to check (NOTIFY) for %s%s: nothing is limited. In haproxy.cfg the "
                  "frontend needs `filter spoe engine ENGINE config FILE` and `http-request "
                  "send-spoe-group ENGINE GROUP` with a condition that holds (the kit's reads "
                  "txn.rl_agents: keep its `set-var(txn.rl_agents) nbsrv(BACKEND)` line); "
                  "`spoa-ratelimit -c INI --check --haproxy haproxy.cfg` names what is missing",
                  d, notifies ? "" : " (none since the agent started)");
}

/* slots_never_released: the rules whose slots expired and none was ever
 * released since they were loaded, named in one message. */
static void never_released(struct watch *w)
{
    char msg[WARNING_MESSAGE_MAX], hold[32];
    size_t used = 0, flagged = 0;
    const struct watch_rule *first = NULL;

    for (size_t i = 0; i < w->nrules; i++) {
        struct watch_rule *wr = &w->rules[i];
        if (!wr->released && released_count(wr->m) != wr->released0)
            wr->released = 1;
        if (wr->released || metrics_ld(&wr->m->slots_expired) == wr->expired0)
            continue;
        if (!flagged++)
            first = wr;
    }
    if (!flagged) {
        warning_clear(WARNING_SLOTS_NEVER_RELEASED);
        return;
    }
    config_duration_text(first->max_hold_ms, hold, sizeof(hold));
    used = (size_t)snprintf(
        msg, sizeof(msg),
        "concurrency rule %s: %llu slots freed by max_hold (%s) and none given back by its "
        "release message %s since the rules were %s, so it admits %llu per %s, not %llu in "
        "flight. HAProxy's `http-response send-spoe-group ENGINE GROUP if { var(txn.rl.slot) "
        "-m found }` line (a group sending %s with arg slot=var(txn.rl.slot)) is probably "
        "missing",
        first->name, (unsigned long long)(metrics_ld(&first->m->slots_expired) - first->expired0),
        hold, first->release, w->reloaded ? "reloaded" : "loaded at start",
        (unsigned long long)first->limit, hold, (unsigned long long)first->limit, first->release);
    if (flagged > 1 && used < sizeof(msg))
        snprintf(msg + used, sizeof(msg) - used, "; %zu more rules alike", flagged - 1);
    warning_raise(WARNING_SLOTS_NEVER_RELEASED, "%s", msg);
}

void watch_tick(struct watch *w, const struct config *cfg, uint64_t now_ms)
{
    never_asks(w, cfg, now_ms);
    never_released(w);
}

/* A problem with one secret, appended to msg ("; " between two). */
__attribute__((format(printf, 3, 4))) static void secret_problem(char *msg, size_t cap,
                                                                 const char *fmt, ...)
{
    size_t used = strlen(msg);
    va_list ap;

    if (used && used + 2 < cap) {
        memcpy(msg + used, "; ", 3);
        used += 2;
    }
    va_start(ap, fmt);
    if (used < cap)
        vsnprintf(msg + used, cap - used, fmt, ap);
    va_end(ap);
}

/* 1 when path exists and every user may read it; its mode in *mode. */
static int others_read(const char *path, unsigned *mode)
{
    struct stat st;

    if (!path || stat(path, &st) == -1)
        return 0;
    *mode = (unsigned)(st.st_mode & 07777);
    return (st.st_mode & S_IROTH) != 0;
}

void watch_secrets(const struct config *cfg)
{
    char msg[WARNING_MESSAGE_MAX] = "";
    unsigned mode = 0;
    int inline_secret = cfg->redis_password || cfg->redis_sentinel_password || cfg->stats_auth ||
                        cfg->redis_server.password;

    if (others_read(cfg->redis_password_file, &mode))
        secret_problem(msg, sizeof(msg),
                       "[redis] password_file %s is readable by every user (mode %04o): "
                       "chmod 640 %s (group of the agent's user) or 600",
                       cfg->redis_password_file, mode, cfg->redis_password_file);
    if (others_read(cfg->stats_auth_file, &mode))
        secret_problem(msg, sizeof(msg),
                       "[agent] stats_auth_file %s is readable by every user (mode %04o): "
                       "chmod 640 %s or 600",
                       cfg->stats_auth_file, mode, cfg->stats_auth_file);
    if (inline_secret && others_read(cfg->path, &mode))
        secret_problem(msg, sizeof(msg),
                       "the config %s holds a password (password, sentinel_password, "
                       "stats_auth or the url's) and is readable by every user (mode %04o): "
                       "chmod 640 %s, or move it to password_file / stats_auth_file",
                       cfg->path, mode, cfg->path);
    if (msg[0])
        warning_raise(WARNING_SECRET_READABLE, "%s", msg);
    else
        warning_clear(WARNING_SECRET_READABLE);
}
