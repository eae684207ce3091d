/* SPDX-License-Identifier: Apache-2.0 */
/* agent_http.c - what the stats listener serves from the agent: the status
 * page and /status.json, /config, /key, /fleet, /rules/N and POST /reset,
 * one route table (httpd.h); /metrics, /top and /health are httpd's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_int.h"
#include "autoconfig.h"
#include "config/config.h"
#include "global/gclaim.h"
#include "core/util.h"
#include "http/config_page.h"
#include "http/httpd.h"
#include "http/keyapi.h"
#include "http/status.h"
#include "http/status_page.h"
#include "limiter/limiter.h"
#include "rules/rules.h"
#include "rules_redis/rules_compile.h"
#include "rules_redis/rules_redis.h"

/* GET /config: the file last loaded, the restart-only settings that differ. */
static void config_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    struct agent *a = ctx;
    size_t len = 0;
    char *text = config_page_render(a->boot->cfg, a->rs->cfg, a->loaded_unix, &len);

    httpd_reply(req, "200 OK", "text/plain; charset=utf-8", NULL, text, len);
}

/* GET /status.json[?since=UNIX_S][&fleet=totals]: what the status page shows. */
static void status_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    struct agent *a = ctx;
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
        .rules_error = a->rules ? rules_redis_error(a->rules) : NULL,
        .rules_rejected = a->rules ? rules_redis_rejected(a->rules) : 0,
        .heartbeat = limiter_heartbeat(a->lim),
        .rules_compiling = rules_compile_busy(a->compile),
    };
    size_t len = 0;
    uint64_t from = 0;
    char fleet[8];

    struct gclaim_stats gs;
    if (gclaim_current) {
        gclaim_stats(gclaim_current, &gs);
        sa.global = &gs;
    }
    sa.fleet_totals_only =
        util_query_param(query, "fleet", fleet, sizeof(fleet)) > 0 && strcmp(fleet, "totals") == 0;
    if (util_query_param(query, "since", since, sizeof(since)) > 0)
        from = strtoull(since, NULL, 10);
    char *body = status_render(&sa, a->rs, a->history, from, &len);
    /* nosniff and same-origin as on every answer (httpd.c) */
    httpd_reply(req, "200 OK", "application/json", "Cache-Control: no-store\r\n", body, len);
}

/* GET /fleet: which agent runs which version of the fleet's rule set, as
 * this agent's last report to Redis answered it (rules_redis.h). */
static void fleet_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    struct agent *a = ctx;
    size_t len = 0;
    char *body = a->rules ? rules_redis_fleet_json(a->rules, &len) : NULL;
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
static void rules_get(void *ctx, struct httpd_req *req, const char *n, const char *query)
{
    struct agent *a = ctx;
    char *end;
    unsigned long long v = strtoull(n, &end, 10);

    if (a->rules && *n >= '1' && *n <= '9' && !*end && v < UINT64_MAX)
        rules_redis_text(a->rules, v, rules_text_reply, req);
    else
        httpd_reply(
            req, "404 Not Found", "text/plain", NULL,
            strdup(a->rules ? "no such version\n" : "no rule store: [rules] source = file\n"),
            a->rules ? 16 : 37);
}

/* POST /reset: refused (403) when off or forged by another page. */
static void reset_post(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    struct agent *a = ctx;
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

static void page_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    status_page_get(req);
}

static void key_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    struct agent *a = ctx;
    keyapi_get(a->lim, a->rs, req, query);
}

/* What the stats listener serves from the agent, behind stats_allow and
 * stats_auth like the rest. */
/* clang-format off */
static const struct httpd_route routes[] = {
    {"/", HTTPD_GET, page_get},
    {"/status.json", HTTPD_GET, status_get},
    {"/config", HTTPD_GET, config_get},
    {"/key", HTTPD_GET, key_get},
    {"/fleet", HTTPD_GET, fleet_get},
    {"/rules/", HTTPD_GET, rules_get},
    {"/reset", HTTPD_POST, reset_post},
};
/* clang-format on */

void agent_http_routes(struct agent *a)
{
    httpd_set_routes(a->httpd, routes, sizeof(routes) / sizeof(routes[0]), a);
}
