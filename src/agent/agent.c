/* SPDX-License-Identifier: Apache-2.0 */
/* agent.c - the agent running (agent.h): built from the configuration,
 * reloaded on SIGHUP and by the rule store, the periodic work (expiry,
 * reports, the page's samples), stopped on SIGTERM or SIGINT. */
#include "agent/agent.h"

#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "agent/agent_int.h"
#include "agent/service.h"
#include "autoconfig.h"
#include "config/config.h"
#include "core/log.h"
#include "core/util.h"
#include "http/config_page.h"
#include "http/httpd.h"
#include "http/status.h"
#include "limiter/limiter.h"
#include "metrics/history.h"
#include "metrics/metrics.h"
#include "metrics/mismatch.h"
#include "rules/rules.h"
#include "rules_redis/rules_compile.h"
#include "rules_redis/rules_redis.h"
#include "server/server.h"

#define ERRBUF 8192
#define STOP_TIMEOUT_S 4.5 /* SIGTERM: exit within 5 s (doc/operations.md, Failure modes) */
#define EXPIRE_EVERY_S 1.0
#define EXPIRE_BATCH 50000
#define REPORT_EVERY_S 10.0

static void warn_static(void *ctx, const char *name, const char *in_force, const char *file)
{
    LOG_WARN("\"%s changed; takes effect at restart\"", name);
}

/* Settings that only a restart changes: warn when a reloaded file differs
 * from what is in force (the values the agent started with), each reload
 * (GET /config lists them too). */
static void warn_static_changes(const struct config *in_force, const struct config *nw)
{
    config_page_pending(in_force, nw, warn_static, NULL);
}

/* A misconfiguration seen in traffic (mismatch.h): once a minute at most
 * per kind and rule, the first time at the next report. */
static void mismatch_cb(enum mismatch_kind kind, const char *rule, uint64_t n, const char *sample)
{
    switch (kind) {
    case MISMATCH_MESSAGE:
        LOG_WARN("\"no rule reads this SPOE message: check message = in the rules\" "
                 "message=\"%s\" count=%llu",
                 sample, (unsigned long long)n);
        break;
    case MISMATCH_ARG:
        /* sample: the arg's name, or NAME=VALUE for a limit or cost arg
         * holding no valid rate, burst or cost (a cost arg does not skip the
         * rule: the request is charged 1) */
        LOG_WARN("\"rule skipped: an argument it needs is never sent (or holds no valid "
                 "limit; a cost arg: charged 1): check key =, match = and arg: against the "
                 "SPOE message args\" rule=%s arg=\"%s\" count=%llu",
                 rule ? rule : "?", sample, (unsigned long long)n);
        break;
    default:
        LOG_INFO("\"no rule applied: requests passed unlimited\" count=%llu example=\"%s\"",
                 (unsigned long long)n, sample);
        break;
    }
}

/* Rules with no key share one bucket for every client: legitimate for a
 * global limit, a mistake for a per-client one. Said at every (re)load. */
static void note_keyless_rules(const struct config *cfg)
{
    uint64_t n = 0;

    for (size_t i = 0; i < cfg->nrules; i++) {
        if (cfg->rules[i].nkeys)
            continue;
        n++;
        LOG_WARN("\"rule without key: one bucket shared by every client (a global limit)\" "
                 "rule=%s",
                 cfg->rules[i].name);
    }
    atomic_store(&metrics.rules_without_key, n);
}

/* A new url (in url mode) or new credentials (a rotated password_file) are
 * used at once: the store reconnects, leases are handled as when Redis
 * restarts. */
static void reload_redis(struct agent *a, const struct config *cfg)
{
    if (limiter_reconfigure(a->lim, cfg) < 0)
        LOG_ERROR("\"out of memory: [redis] url and credentials not reloaded\"");
}

/* Put cfg (owned from here on) in force: a new ruleset swapped in
 * atomically, connections, leases and buckets of unchanged rules kept.
 * what says why in the log. 0, or -1 out of memory. */
static int install(struct agent *a, struct config *cfg, const char *what)
{
    warn_static_changes(a->boot->cfg, cfg);
    struct ruleset *rs = ruleset_new(cfg);
    if (!rs) {
        METRIC_INC(reload_failures);
        LOG_ERROR("\"reload failed: out of memory\"");
        return -1;
    }
    /* (out of memory here: keys are assembled per decision, as before) */
    (void)ruleset_redis_heads(rs, a->boot->cfg->redis_prefix);
    log_level = rs->cfg->log_level;
    reload_redis(a, rs->cfg);
    if (httpd_set_allow(a->httpd, rs->cfg->stats_allow, rs->cfg->nstats_allow) < 0)
        LOG_ERROR("\"out of memory: stats_allow not reloaded\"");
    if (httpd_set_auth(a->httpd, rs->cfg->stats_credentials) < 0)
        LOG_ERROR("\"out of memory: stats_auth not reloaded\"");
    if (httpd_set_hosts(a->httpd, rs->cfg->stats_hosts) < 0)
        LOG_ERROR("\"out of memory: stats_hosts not reloaded\"");
    a->reload_failed_unix = 0;
    a->reload_error[0] = '\0';
    server_set_ruleset(a->srv, rs);
    ruleset_unref(a->rs);
    a->rs = rs;
    watch_config(&a->watch, rs);
    METRIC_INC(reloads);
    a->loaded_unix = (uint64_t)time(NULL);
    metrics_config_loaded(config_hash(rs->cfg), a->loaded_unix);
    LOG_INFO("\"%s\" file=%s rules=%zu", what, log_val(a->path), rs->cfg->nrules);
    note_keyless_rules(rs->cfg);
    return 0;
}

/* SIGHUP's load ended (rules_compile_reload): put it in force, or keep the
 * rules in force; then READY=1 (systemd: `systemctl reload` returns). */
static void reloaded(void *ctx, struct rules_compile_result *res)
{
    struct agent *a = ctx;

    if (!res->cfg) {
        METRIC_INC(reload_failures);
        LOG_ERROR("\"reload failed, keeping the rules in force\" file=%s", log_val(a->path));
        fprintf(stderr, "%s%s", res->err,
                *res->err && res->err[strlen(res->err) - 1] != '\n' ? "\n" : "");
        a->reload_failed_unix = (uint64_t)time(NULL);
        snprintf(a->reload_error, sizeof(a->reload_error), "%.*s", (int)strcspn(res->err, "\n"),
                 res->err);
    } else {
        install(a, res->cfg, "configuration reloaded");
        rules_redis_retry(a->rules);
    }
    service_ready();
}

/* A new version from Redis (rules_redis.c), checked with the file's own
 * sections exactly as a SIGHUP would (and as --push does): put in force
 * the same way. */
static int apply_rules(void *ctx, struct config *cfg, char *err, size_t errlen)
{
    struct agent *a = ctx;

    if (install(a, cfg, "rules from Redis in force") < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* systemd (Type=notify): RELOADING=1, then READY=1 once the new file is in
 * force or refused (reloaded), so that `systemctl reload` returns when it
 * is done. */
static void on_sighup(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct agent *a = w->data;

    service_reloading();
    if (rules_compile_reload(a->compile, a->path, rules_redis_in_force(a->rules), reloaded, a) <
        0) {
        METRIC_INC(reload_failures);
        LOG_ERROR("\"reload failed: out of memory\"");
        service_ready();
    }
}

/* Workers answer what is in flight (some answers may wait for Redis, which
 * this loop serves), then close; the loop ends when they are done. */
static void on_stopping(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct agent *a = t->data;
    if (server_stopped(a->srv) || util_now_us() >= a->stop_deadline_us)
        ev_break(loop, EVBREAK_ALL);
}

static void on_stop(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct agent *a = w->data;

    if (a->stop_deadline_us)
        return;
    LOG_INFO("\"stopping\" signal=%d", w->signum);
    service_stopping();
    a->stop_deadline_us = util_now_us() + (uint64_t)(STOP_TIMEOUT_S * 0.6 * 1e6);
    server_stop(a->srv);
    ev_signal_stop(loop, &a->sighup);
    ev_timer_init(&a->stopping, on_stopping, 0.01, 0.01);
    a->stopping.data = a;
    ev_timer_start(loop, &a->stopping);
}

static void on_expire(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct agent *a = t->data;
    uint64_t now_us = util_now_us();

    limiter_expire(a->lim, a->rs, now_us, EXPIRE_BATCH);
    watch_tick(&a->watch, a->rs->cfg, now_us / 1000);
}

/* A shadow rule never blocks: its share is of would-be blocks, said so. */
static void alert_cb(const char *rule, int shadow, uint64_t blocks, uint64_t decisions)
{
    if (shadow)
        LOG_WARN("\"high share of would-block decisions (shadow)\" rule=%s would_block=%llu "
                 "decisions=%llu share=%.3f",
                 log_val(rule), (unsigned long long)blocks, (unsigned long long)decisions,
                 (double)blocks / (double)decisions);
    else
        LOG_WARN("\"high share of blocked requests\" rule=%s blocked=%llu decisions=%llu "
                 "share=%.3f",
                 log_val(rule), (unsigned long long)blocks, (unsigned long long)decisions,
                 (double)blocks / (double)decisions);
}

/* top_key is a client's key: any bytes, escaped so that it cannot forge
 * fields or lines. */
static void shadow_cb(const char *rule, uint64_t would_block, const char *top_key, size_t top_len)
{
    LOG_INFO("\"shadow rule would have blocked\" rule=%s would_block=%llu period_s=%d "
             "top_key=\"%s\"",
             log_val(rule), (unsigned long long)would_block, (int)REPORT_EVERY_S,
             log_esc(top_key, top_len));
}

/* Every 10 s: a line per shadow rule that would have blocked (counts, not a
 * line per request); every minute: the blocked-share alert. */
static void on_report(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct agent *a = t->data;
    metrics_shadow_tick(shadow_cb);
    mismatch_report(util_now_us(), 60000000, mismatch_cb);
    if (++a->reports % (60 / (int)REPORT_EVERY_S) == 0)
        metrics_minute_tick(a->rs->cfg->alert_share, alert_cb);
}

/* Once a second: the status page's history and process figures. */
static void on_sample(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct agent *a = t->data;
    status_sample(a->history, (uint64_t)time(NULL));
}

/* size - 1 random hex digits and a NUL: the status page's token. */
static int random_token(char *out, size_t size)
{
    uint8_t raw[32];
    size_t n = (size - 1) / 2;

    if (n > sizeof(raw) || getrandom(raw, n, 0) != (ssize_t)n)
        return -1;
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    explicit_bzero(raw, sizeof(raw));
    return 0;
}

/* Build the parts of the agent from cfg (owned from here on): rules,
 * limiter, SPOP listeners, and the stats listener when configured. -1 after
 * saying why on stderr; what was built stays in a for agent_free. */
static int agent_open(struct agent *a, struct config *cfg)
{
    char err[ERRBUF];

    a->rs = ruleset_new(cfg);
    if (!a->rs) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return -1;
    }
    a->boot = a->rs;
    ruleset_ref(a->boot);
    (void)ruleset_redis_heads(a->rs, cfg->redis_prefix);
    if (!(a->compile = rules_compile_new(a->loop))) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return -1;
    }
    a->lim = limiter_new(a->loop, a->rs->cfg, err, sizeof(err));
    if (!a->lim) {
        fprintf(stderr, "spoa-ratelimit: %s\n", err);
        return -1;
    }
    a->srv = server_new(a->rs->cfg, a->rs, a->lim, a->loop, err, sizeof(err));
    if (!a->srv) {
        fprintf(stderr, "spoa-ratelimit: cannot listen on %s\n", err);
        return -1;
    }
    if (a->rs->cfg->stats_addr.kind != NET_ADDR_NONE) {
        a->httpd = httpd_new(a->loop, &a->rs->cfg->stats_addr, a->rs->cfg->stats_allow,
                             a->rs->cfg->nstats_allow, err, sizeof(err));
        if (!a->httpd) {
            fprintf(stderr, "spoa-ratelimit: cannot listen for stats on %s\n", err);
            return -1;
        }
        agent_http_routes(a);
        if (httpd_set_auth(a->httpd, a->rs->cfg->stats_credentials) < 0 ||
            httpd_set_hosts(a->httpd, a->rs->cfg->stats_hosts) < 0 ||
            !(a->history = history_new()) || random_token(a->token, sizeof(a->token)) < 0) {
            fprintf(stderr, "spoa-ratelimit: out of memory\n");
            return -1;
        }
    }
    return 0;
}

/* Signals (reload, stop) and the periodic timers (expiry, reports). */
static void agent_watch(struct agent *a)
{
    ev_signal_init(&a->sighup, on_sighup, SIGHUP);
    ev_signal_init(&a->sigterm, on_stop, SIGTERM);
    ev_signal_init(&a->sigint, on_stop, SIGINT);
    a->sighup.data = a->sigterm.data = a->sigint.data = a;
    ev_signal_start(a->loop, &a->sighup);
    ev_signal_start(a->loop, &a->sigterm);
    ev_signal_start(a->loop, &a->sigint);
    ev_timer_init(&a->expire, on_expire, EXPIRE_EVERY_S, EXPIRE_EVERY_S);
    ev_timer_init(&a->minute, on_report, REPORT_EVERY_S, REPORT_EVERY_S);
    a->expire.data = a->minute.data = a;
    ev_timer_start(a->loop, &a->expire);
    ev_timer_start(a->loop, &a->minute);
    if (a->history) {
        ev_timer_init(&a->sample, on_sample, 0.0, 1.0);
        a->sample.data = a;
        ev_timer_start(a->loop, &a->sample);
    }
}

/* After the loop ended on a stop signal: wait for the workers, then free
 * what they no longer use. */
static void agent_shutdown(struct agent *a)
{
    httpd_free(a->httpd);
    ev_timer_stop(a->loop, &a->expire);
    ev_timer_stop(a->loop, &a->minute);
    ev_timer_stop(a->loop, &a->sample);
    ev_timer_stop(a->loop, &a->stopping);
    history_free(a->history);
    a->history = NULL;
    watch_free(&a->watch);
    rules_redis_stop(a->rules);     /* before its store goes */
    rules_compile_free(a->compile); /* a load in flight ends unused */
    a->compile = NULL;
    /* Unused leased tokens go back to Redis. */
    limiter_shutdown(a->lim, 1.0);
    if (server_join(a->srv, 1.0) < 0) {
        /* Workers still flush to peers that do not read: the process exit
         * closes those sockets; their memory goes with it. */
        LOG_WARN("\"connections still open at the stop deadline; closing them\"");
    } else {
        server_free(a->srv);
        limiter_free(a->lim);
        rules_redis_free(a->rules); /* after its store: a call in flight ends there */
        ruleset_unref(a->rs);
        ruleset_unref(a->boot);
    }
}

/* When starting failed: free what agent_open built (NULL parts are skipped). */
static void agent_free(struct agent *a)
{
    httpd_free(a->httpd);
    history_free(a->history);
    watch_free(&a->watch);
    server_free(a->srv);
    rules_redis_stop(a->rules);
    rules_compile_free(a->compile);
    limiter_free(a->lim);
    rules_redis_free(a->rules);
    ruleset_unref(a->rs);
    ruleset_unref(a->boot);
}

int agent_run(const char *path, struct config *cfg)
{
    static struct agent agent; /* once per process: signals and timers point here */
    struct agent *a = &agent;
    char *cached = NULL;
    size_t cached_len = 0;
    uint64_t cached_version = 0;

    a->path = path;
    log_level = cfg->log_level;
    signal(SIGPIPE, SIG_IGN);
    metrics_set_version(PACKAGE_VERSION);
    a->loaded_unix = a->started_unix = (uint64_t)time(NULL);
    if (cfg->rules_source == RULES_SOURCE_REDIS)
        rules_redis_boot(a->path, &cfg, &cached, &cached_len, &cached_version);
    metrics_config_loaded(config_hash(cfg), a->loaded_unix);

    a->loop = ev_default_loop(EVFLAG_AUTO);
    watch_init(&a->watch, util_now_us() / 1000);
    if (agent_open(a, cfg) < 0)
        goto fail;
    watch_config(&a->watch, a->rs);
    if (a->rs->cfg->rules_source == RULES_SOURCE_REDIS) {
        a->rules = rules_redis_new(a->loop, limiter_store(a->lim), a->compile, a->path, a->rs->cfg,
                                   apply_rules, a);
        if (!a->rules ||
            (cached && rules_redis_adopt(a->rules, cached, cached_len, cached_version, 1) < 0)) {
            fprintf(stderr, "spoa-ratelimit: out of memory\n");
            goto fail;
        }
        free(cached);
        cached = NULL;
    }
    agent_watch(a);
    if (server_start(a->srv) < 0)
        goto fail;
    LOG_INFO("\"started\" version=%s listen=%s workers=%d rules=%zu mode=%s stats=%s",
             PACKAGE_VERSION, log_val(a->rs->cfg->listen), a->rs->cfg->workers, a->rs->cfg->nrules,
             config_standalone(a->rs->cfg) ? "standalone" : "redis",
             a->rs->cfg->stats && *a->rs->cfg->stats ? log_val(a->rs->cfg->stats) : "off");
    note_keyless_rules(a->rs->cfg);
    service_ready();

    ev_run(a->loop, 0);

    agent_shutdown(a);
    LOG_INFO("\"stopped\"");
    return 0;
fail:
    free(cached);
    agent_free(a);
    return 1;
}
