/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - spoa-ratelimit: argv, signals, wiring. */
#include "config/config.h"

#include <errno.h>
#include <ev.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "autoconfig.h"
#include "config/haproxy_check.h"
#include "core/log.h"
#include "core/util.h"
#include "http/config_page.h"
#include "http/httpd.h"
#include "http/keyapi.h"
#include "http/status.h"
#include "limiter/limiter.h"
#include "metrics/history.h"
#include "metrics/metrics.h"
#include "metrics/mismatch.h"
#include "service.h"
#include "rules/rules.h"
#include "rules_store/rules_cli.h"
#include "rules_store/rules_compile.h"
#include "rules_store/rules_store.h"
#include "server/server.h"
#include "watch.h"

#define ERRBUF 8192
#define STOP_TIMEOUT_S 4.5 /* SIGTERM: exit within 5 s (doc/operations.md, Failure modes) */
#define EXPIRE_EVERY_S 1.0
#define EXPIRE_BATCH 50000
#define REPORT_EVERY_S 10.0

struct agent {
    struct ev_loop *loop;
    const char *path;
    struct ruleset *rs;
    struct ruleset *boot; /* the first: its restart-only settings are in force */
    uint64_t loaded_unix; /* when rs was loaded */
    struct limiter *lim;
    struct server *srv;
    struct httpd *httpd;
    ev_signal sighup, sigterm, sigint;
    ev_timer expire, minute, stopping, sample;
    uint64_t stop_deadline_us;
    unsigned reports;
    /* the status page */
    struct history *history;
    uint64_t started_unix;
    uint64_t reload_failed_unix; /* the last reload failed then; 0 after a good one */
    char reload_error[256];      /* its first error line */
    char token[33];              /* the page's token for POST /reset, random hex */
    struct rules_store *rules;   /* [rules] source = redis: the fleet's rule set */
    struct rules_compile *compile; /* SIGHUP's and the rule store's loads, off the loop */
    struct watch watch;          /* warnings the agent finds in itself (watch.h) */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: spoa-ratelimit -c FILE [--check [--print] [--haproxy HAPROXY.CFG]]\n"
               "       spoa-ratelimit -c FILE --push RULES [--message TEXT] [--if-version N]\n"
               "                      [--force]\n"
               "       spoa-ratelimit -c FILE --rules-history | --rollback N | --fleet\n"
               "       spoa-ratelimit -c FILE --rules-show N | --rules-diff A B\n"
               "       spoa-ratelimit --version | --help\n"
               "\n"
               "  -c, --config FILE   configuration file (INI)\n"
               "  -t, --check         validate FILE and exit: 0 valid, 1 invalid\n"
               "  -p, --print         with --check: print the effective configuration\n"
               "      --haproxy CFG   with --check: also check HAProxy's config CFG (and the\n"
               "                      SPOE file it names) against FILE: FILE:LINE messages,\n"
               "                      exit 1 when HAProxy would never ask the agent or never\n"
               "                      use its answer\n"
               "      --push RULES    check RULES ([rule:*] only) as --check does, make it the\n"
               "                      current rule set in FILE's Redis; prints its version\n"
               "      --message TEXT  with --push or --rollback: a note kept with the version\n"
               "      --if-version N  with --push or --rollback: only if N is still current\n"
               "      --force         with --push or --rollback: write even though agents run\n"
               "                      a higher version (the store lost it), numbered above it\n"
               "      --rules-history list the versions kept in Redis (* the current one)\n"
               "      --rollback N    make version N current again, as a new version\n"
               "      --fleet         list the live agents and the version each applied;\n"
               "                      exit 1 when one is off the current version\n"
               "      --rules-show N  print version N's rule text as stored (who, when and\n"
               "                      why on stderr)\n"
               "      --rules-diff A B  a unified diff of version A's text to version B's\n"
               "  -v, --version       print the version and exit\n"
               "  -h, --help          print this help and exit\n");
}

static void print_errors(const char *err)
{
    fputs(err, stderr);
    if (*err && err[strlen(err) - 1] != '\n')
        fputc('\n', stderr);
}

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
        print_errors(res->err);
        a->reload_failed_unix = (uint64_t)time(NULL);
        snprintf(a->reload_error, sizeof(a->reload_error), "%.*s",
                 (int)strcspn(res->err, "\n"), res->err);
    } else {
        install(a, res->cfg, "configuration reloaded");
        rules_store_retry(a->rules);
    }
    service_ready();
}

/* A new version from Redis (rules_store.c), checked with the file's own
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
    if (rules_compile_reload(a->compile, a->path, rules_store_in_force(a->rules), reloaded, a) < 0) {
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

/* GET /config: the file last loaded, the restart-only settings that differ. */
static void config_get(struct agent *a, struct httpd_req *req)
{
    size_t len = 0;
    char *text = config_page_render(a->boot->cfg, a->rs->cfg, a->loaded_unix, &len);

    httpd_reply(req, "200 OK", "text/plain; charset=utf-8", NULL, text, len);
}

/* GET /status.json[?since=UNIX_S]: what the status page shows. */
static void status_get(struct agent *a, struct httpd_req *req, const char *query)
{
    char since[24];
    struct status_agent sa = {
        .version = PACKAGE_VERSION,
        .config_file = a->path,
        .workers = (unsigned)a->rs->cfg->workers,
        .started_unix = a->started_unix,
        .loaded_unix = a->loaded_unix,
        .reload_failed_unix = a->reload_failed_unix,
        .reload_error = a->reload_error[0] ? a->reload_error : NULL,
        .reset_allowed = a->rs->cfg->stats_reset,
        .token = a->token,
        .rules_redis = a->rules != NULL,
        .rules_error = a->rules ? rules_store_error(a->rules) : NULL,
        .rules_rejected = a->rules ? rules_store_rejected(a->rules) : 0,
        .heartbeat = limiter_heartbeat(a->lim),
        .rules_compiling = rules_compile_busy(a->compile),
    };
    size_t len = 0;
    uint64_t from = 0;

    char fleet[8];
    sa.fleet_totals_only = util_query_param(query, "fleet", fleet, sizeof(fleet)) > 0 &&
                           strcmp(fleet, "totals") == 0;
    if (util_query_param(query, "since", since, sizeof(since)) > 0)
        from = strtoull(since, NULL, 10);
    char *body = status_render(&sa, a->rs, a->history, from, &len);
    /* nosniff and same-origin as on every answer (httpd.c) */
    httpd_reply(req, "200 OK", "application/json", "Cache-Control: no-store\r\n", body, len);
}

/* GET /fleet: which agent runs which version of the fleet's rule set, as
 * this agent's last report to Redis answered it (rules_store.h). */
static void fleet_get(struct agent *a, struct httpd_req *req)
{
    size_t len = 0;
    char *body = a->rules ? rules_store_fleet_json(a->rules, &len) : NULL;
    const char *why = !a->rules ? "no fleet view: [rules] source = file\n"
                                : "no fleet view yet: Redis not reached since start\n";

    if (body) {
        httpd_reply(req, "200 OK", "application/json", "Cache-Control: no-store\r\n", body, len);
        return;
    }
    httpd_reply(req, a->rules ? "503 Service Unavailable" : "404 Not Found", "text/plain", NULL,
                strdup(why), strlen(why));
}

static void rules_text_reply(void *arg, const char *status, char *body, size_t len)
{
    httpd_reply(arg, status, "text/plain; charset=utf-8", NULL, body, len);
}

/* GET /rules/N: version N's text, as --rules-show prints it (the fleet
 * table links each agent's version there). */
static void rules_get(struct agent *a, struct httpd_req *req, const char *n)
{
    char *end;
    unsigned long long v = strtoull(n, &end, 10);

    if (a->rules && *n >= '1' && *n <= '9' && !*end && v < UINT64_MAX)
        rules_store_text(a->rules, v, rules_text_reply, req);
    else
        httpd_reply(req, "404 Not Found", "text/plain", NULL,
                    strdup(a->rules ? "no such version\n" : "no rule store: [rules] source = file\n"),
                    a->rules ? 16 : 37);
}

/* POST /reset: refused (403) when off or forged by another page. */
static void reset_post(struct agent *a, struct httpd_req *req, const char *query)
{
    const char *why = status_reset_refused(req, a->rs->cfg->stats_reset, a->token);

    if (why) {
        size_t n = strlen(why);
        char *body = malloc(n + 1);
        if (body)
            memcpy(body, why, n), body[n] = '\n';
        httpd_reply(req, "403 Forbidden", "text/plain", NULL, body, n + 1);
        return;
    }
    keyapi_reset(a->lim, a->rs, req, query);
}

/* What the stats listener does not serve itself: the status page, /config,
 * /key, /reset (behind stats_allow and stats_auth like the rest). */
static int on_http(void *ctx, struct httpd_req *req, const char *method, const char *path,
                   const char *query)
{
    struct agent *a = ctx;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    int reset = strcmp(path, "/reset") == 0;
    int rules = strncmp(path, "/rules/", 7) == 0;

    if (strcmp(path, "/") != 0 && strcmp(path, "/status.json") != 0 &&
        strcmp(path, "/config") != 0 && strcmp(path, "/key") != 0 &&
        strcmp(path, "/fleet") != 0 && !reset && !rules)
        return -1;
    if (reset ? !post : !get) {
        httpd_reply(req, "405 Method Not Allowed", "text/plain",
                    reset ? "Allow: POST\r\n" : "Allow: GET, HEAD\r\n",
                    strdup(reset ? "POST only\n" : "GET only\n"), reset ? 10 : 9);
    } else if (strcmp(path, "/") == 0) {
        status_page_get(req);
    } else if (strcmp(path, "/status.json") == 0) {
        status_get(a, req, query);
    } else if (strcmp(path, "/config") == 0) {
        config_get(a, req);
    } else if (strcmp(path, "/key") == 0) {
        keyapi_get(a->lim, a->rs, req, query);
    } else if (strcmp(path, "/fleet") == 0) {
        fleet_get(a, req);
    } else if (rules) {
        rules_get(a, req, path + 7);
    } else {
        reset_post(a, req, query);
    }
    return 0;
}

/* --check --print: the effective configuration on stdout. */
static int print_config(const struct config *cfg)
{
    size_t len;
    char *text = config_render(cfg, &len);

    if (!text) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return 1;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

/* haproxy_check's files: the whole file, NUL-terminated. */
static char *read_text(void *ctx, const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0, got;
    char buf[8192];

    if (!f)
        return NULL;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
        char *p = realloc(text, len + got + 1);
        if (!p) {
            free(text);
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        text = p;
        memcpy(text + len, buf, got);
        len += got;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed || !(text = text ? text : calloc(1, 1))) {
        free(text);
        errno = failed ? EIO : ENOMEM;
        return NULL;
    }
    text[len] = '\0';
    return text;
}

static const char *env_value(void *ctx, const char *name)
{
    return getenv(name);
}

/* --check --haproxy CFG: its findings on stderr; 0 when it has no error. */
static int check_haproxy(const struct config *cfg, const char *haproxy)
{
    struct haproxy_check_io io = {read_text, env_value, NULL};
    struct strbuf out = STRBUF_INIT;
    int warnings = 0, errors = haproxy_check(cfg, haproxy, &io, &out, &warnings);
    size_t len;
    char *text = strbuf_finish(&out, &len);

    if (errors < 0 || !text) {
        free(text);
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return 1;
    }
    fputs(text, stderr);
    free(text);
    if (errors)
        fprintf(stderr, "%s: %d error%s: HAProxy would not ask this agent, or not use its "
                        "answer\n", haproxy, errors, errors > 1 ? "s" : "");
    else
        printf("%s: OK (the agent is asked and its answer used%s)\n", haproxy,
               warnings ? "; see the warnings" : "");
    return errors ? 1 : 0;
}

/* A decimal version number (>= 0 for --if-version, >= 1 for --rollback). */
static int parse_version(const char *s, long long min, long long *out)
{
    char *end;

    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno || end == s || *end || *out < min ? -1 : 0;
}

/* Read argv: the config path into *path, --check into *check (2 with
 * --print), --haproxy's file into *haproxy, a rule store command into *cli
 * (cli->op, or -1 for none). 0 to
 * go on; -1 when main is done and exits with *status (0 after --version or
 * --help, 2 after a usage error, which has been printed). */
static int parse_args(int argc, char **argv, const char **path, int *check, const char **haproxy,
                      struct rules_cli_args *cli, int *status)
{
    enum {
        OPT_PUSH = 256,
        OPT_MESSAGE,
        OPT_IF_VERSION,
        OPT_HISTORY,
        OPT_ROLLBACK,
        OPT_FLEET,
        OPT_HAPROXY,
        OPT_FORCE,
        OPT_SHOW,
        OPT_DIFF
    };
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check", no_argument, NULL, 't'},
        {"print", no_argument, NULL, 'p'},
        {"dump", no_argument, NULL, 'p'},
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"push", required_argument, NULL, OPT_PUSH},
        {"message", required_argument, NULL, OPT_MESSAGE},
        {"if-version", required_argument, NULL, OPT_IF_VERSION},
        {"rules-history", no_argument, NULL, OPT_HISTORY},
        {"rollback", required_argument, NULL, OPT_ROLLBACK},
        {"fleet", no_argument, NULL, OPT_FLEET},
        {"haproxy", required_argument, NULL, OPT_HAPROXY},
        {"force", no_argument, NULL, OPT_FORCE},
        {"rules-show", required_argument, NULL, OPT_SHOW},
        {"rules-diff", required_argument, NULL, OPT_DIFF}, /* A; B follows it */
        {NULL, 0, NULL, 0},
    };
    int c, print = 0, ops = 0, bad = 0;

    cli->op = -1;
    cli->if_version = -1;
    while ((c = getopt_long(argc, argv, "c:tpvh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            *path = optarg;
            break;
        case 't':
            *check = 1;
            break;
        case 'p':
            print = 1;
            break;
        case 'v':
            printf("spoa-ratelimit %s\n", PACKAGE_VERSION);
            *status = 0;
            return -1;
        case 'h':
            usage(stdout);
            *status = 0;
            return -1;
        case OPT_PUSH:
            cli->op = RULES_CLI_PUSH;
            cli->rules = optarg;
            ops++;
            break;
        case OPT_MESSAGE:
            cli->message = optarg;
            break;
        case OPT_IF_VERSION:
            bad |= parse_version(optarg, 0, &cli->if_version) < 0;
            break;
        case OPT_HISTORY:
            cli->op = RULES_CLI_HISTORY;
            ops++;
            break;
        case OPT_FLEET:
            cli->op = RULES_CLI_FLEET;
            ops++;
            break;
        case OPT_HAPROXY:
            *haproxy = optarg;
            break;
        case OPT_FORCE:
            cli->force = 1;
            break;
        case OPT_ROLLBACK:
            cli->op = RULES_CLI_ROLLBACK;
            bad |= parse_version(optarg, 1, &cli->rollback) < 0;
            ops++;
            break;
        case OPT_SHOW:
        case OPT_DIFF:
            cli->op = c == OPT_SHOW ? RULES_CLI_SHOW : RULES_CLI_DIFF;
            bad |= parse_version(optarg, 1, &cli->show[0]) < 0;
            ops++;
            break;
        default:
            usage(stderr);
            *status = 2;
            return -1;
        }
    }
    /* one command at a time; --message, --if-version and --force go with a write */
    bad |= ops > 1 || (ops && *check) ||
           ((cli->message || cli->if_version >= 0 || cli->force) &&
            cli->op != RULES_CLI_PUSH && cli->op != RULES_CLI_ROLLBACK);
    /* --rules-diff's B: the one operand (getopt moves operands last) */
    if (cli->op == RULES_CLI_DIFF && optind < argc)
        bad |= parse_version(argv[optind++], 1, &cli->show[1]) < 0;
    else if (cli->op == RULES_CLI_DIFF)
        bad = 1;
    if (!*path || optind != argc || ((print || *haproxy) && !*check) || bad) {
        usage(stderr);
        *status = 2;
        return -1;
    }
    cli->config = *path;
    if (print)
        *check = 2;
    return 0;
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
        httpd_set_handler(a->httpd, on_http, a);
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
    rules_store_stop(a->rules); /* before its store goes */
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
        rules_store_free(a->rules); /* after its store: a call in flight ends there */
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
    rules_store_stop(a->rules);
    rules_compile_free(a->compile);
    limiter_free(a->lim);
    rules_store_free(a->rules);
    ruleset_unref(a->rs);
    ruleset_unref(a->boot);
}

int main(int argc, char **argv)
{
    struct agent a;
    struct config *cfg;
    char err[ERRBUF];
    int check = 0, status;
    const char *haproxy = NULL;

    memset(&a, 0, sizeof(a));
    struct rules_cli_args cli = {0};
    char *cached = NULL;
    size_t cached_len = 0;
    uint64_t cached_version = 0;

    if (parse_args(argc, argv, &a.path, &check, &haproxy, &cli, &status) < 0)
        return status;
    if ((int)cli.op != -1)
        return rules_cli_run(&cli);

    if (config_load_file(a.path, &cfg, err, sizeof(err)) < 0) {
        print_errors(err);
        return 1;
    }
    if (check) {
        for (size_t i = 0; i < cfg->nrules; i++)
            if (!cfg->rules[i].nkeys)
                fprintf(stderr,
                        "%s:%u: warning: rule '%s' has no key: one bucket shared by every "
                        "client (a global limit)\n",
                        a.path, cfg->rules[i].line, cfg->rules[i].name);
        status = check == 2 ? print_config(cfg) : 0;
        if (check != 2)
            printf("%s: OK (%zu rule%s%s)\n", a.path, cfg->nrules, cfg->nrules == 1 ? "" : "s",
                   cfg->rules_source == RULES_SOURCE_REDIS
                       ? " in the file; [rules] source = redis: the fleet's version from Redis "
                         "is put in force over them"
                       : "");
        if (haproxy && check_haproxy(cfg, haproxy) != 0)
            status = 1;
        config_free(cfg);
        return status;
    }
    log_level = cfg->log_level;
    signal(SIGPIPE, SIG_IGN);
    metrics_set_version(PACKAGE_VERSION);
    a.loaded_unix = a.started_unix = (uint64_t)time(NULL);
    if (cfg->rules_source == RULES_SOURCE_REDIS)
        rules_store_boot(a.path, &cfg, &cached, &cached_len, &cached_version);
    metrics_config_loaded(config_hash(cfg), a.loaded_unix);

    a.loop = ev_default_loop(EVFLAG_AUTO);
    watch_init(&a.watch, util_now_us() / 1000);
    if (agent_open(&a, cfg) < 0)
        goto fail;
    watch_config(&a.watch, a.rs);
    if (a.rs->cfg->rules_source == RULES_SOURCE_REDIS) {
        a.rules = rules_store_new(a.loop, limiter_store(a.lim), a.compile, a.path, a.rs->cfg,
                                  apply_rules, &a);
        if (!a.rules ||
            (cached && rules_store_adopt(a.rules, cached, cached_len, cached_version, 1) < 0)) {
            fprintf(stderr, "spoa-ratelimit: out of memory\n");
            goto fail;
        }
        free(cached);
        cached = NULL;
    }
    agent_watch(&a);
    if (server_start(a.srv) < 0)
        goto fail;
    LOG_INFO("\"started\" version=%s listen=%s workers=%d rules=%zu mode=%s stats=%s",
             PACKAGE_VERSION, log_val(a.rs->cfg->listen), a.rs->cfg->workers, a.rs->cfg->nrules,
             config_standalone(a.rs->cfg) ? "standalone" : "redis",
             a.rs->cfg->stats && *a.rs->cfg->stats ? log_val(a.rs->cfg->stats) : "off");
    note_keyless_rules(a.rs->cfg);
    service_ready();

    ev_run(a.loop, 0);

    agent_shutdown(&a);
    LOG_INFO("\"stopped\"");
    return 0;
fail:
    free(cached);
    agent_free(&a);
    return 1;
}
