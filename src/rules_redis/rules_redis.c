/* SPDX-License-Identifier: Apache-2.0 */
/* rules_redis.c - an agent with [rules] source = redis follows the fleet's
 * current rule set (see rules_redis.h): poll, fetch, apply, cache. */
#include "rules_redis/rules_redis.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "rules_scripts.h"
#include "rules_redis/rules_compile.h"
#include "rules_redis/rules_fleet.h"
#include "rules_redis/rules_script.h"
#include "store/store.h"
#include "store/store_reply_cap.h"

/* the text and its sha256 pass the store's caps on replies */
_Static_assert(CFG_MAX_RULES_TEXT <= STORE_REPLY_MAX_STRING &&
                   CFG_MAX_RULES_TEXT + 64 <= STORE_REPLY_MAX_BYTES,
               "a rule text at its cap is a reply the store reads");

#define ERRBUF 4096
#define REPORT_EVERY_S 5.0 /* each agent's line in the fleet's view (rules_fleet.h) */

struct rules_redis {
    struct ev_loop *loop;
    struct store *s;
    struct rules_compile *compile; /* the agent's: versions load off the loop */
    uint64_t compiling;            /* the version loading there; 0: none */
    rules_redis_apply_fn *apply;
    void *ctx;
    char *path; /* the agent's file: its sections around each version */
    ev_timer poll;
    int inflight; /* one question at a time: GET, then rules_fetch */
    int said_empty;
    char *cache; /* NULL: none */
    char key_current[RULES_STORE_KEY_MAX];
    char prefix[RULES_STORE_KEY_MAX];
    /* in force: its text and version (0: none from Redis, the file's
     * rules), read by a SIGHUP's load too (rules_compile_reload) */
    struct rules_in_force cur;
    char sha[65]; /* of cur.text */
    /* A version is its number and its sha256, both in PREFIX{rules}:current:
     * a Redis that lost its data may number the version in force again
     * (pushed by hand, or by an older --push), and that new one must not
     * pass for it. A lower number is never applied (store_lost). */
    uint64_t rejected; /* the last version refused, not asked for again */
    char rejected_sha[65];
    uint64_t fetching; /* the version asked for by the rules_fetch in flight */
    char fetching_sha[65];
    char fetching_key[RULES_STORE_KEY_MAX];
    /* the fleet's view: this agent's report, and the view it answered */
    ev_timer report;
    int reporting;
    char member[384]; /* "host=H pid=P listen=L", as the heartbeat's */
    char error[256];  /* the last apply error, "" after a good apply */
    char key_agents[RULES_STORE_KEY_MAX], key_seen[RULES_STORE_KEY_MAX];
    struct rules_fleet fleet;
    int have_fleet;
};

/* The version is in force: remember its text, say so, cache it. */
static void applied(struct rules_redis *rs, const char *text, size_t len, uint64_t version)
{
    char err[512];
    int kept = rules_redis_adopt(rs, text, len, version, 0) == 0;

    if (!kept) /* the version and sha are in force anyway, not the text for SIGHUP */
        LOG_ERROR("\"out of memory: the applied rules are not cached\"");
    rs->error[0] = '\0';
    METRIC_INC(rules_applied_ok);
    if (rs->cache && kept &&
        rules_redis_write_cache(rs->cache, text, len, version, err, sizeof(err)) < 0)
        LOG_WARN("\"rules cache not written: an agent started while Redis is down will use its "
                 "file's rules\" error=\"%s\"",
                 log_esc(err, strlen(err)));
}

static void refused(struct rules_redis *rs, uint64_t version, const char *why)
{
    /* the fleet sees the refusal at once, not a report period later */
    ev_feed_event(rs->loop, &rs->report, EV_TIMER);
    rs->rejected = version;
    memcpy(rs->rejected_sha, rs->fetching_sha, sizeof(rs->rejected_sha));
    snprintf(rs->error, sizeof(rs->error), "version %llu: %.*s", (unsigned long long)version,
             (int)strcspn(why, "\n"), why);
    METRIC_INC(rules_applied_rejected);
    LOG_WARN("\"rules version rejected, keeping the rules in force\" version=%llu "
             "in_force=%llu error=\"%s\"",
             (unsigned long long)version, (unsigned long long)rs->cur.version,
             log_esc(why, strcspn(why, "\n")));
}

/* The version's load (rules_compile.h) ended: apply it, or refuse it. */
static void on_loaded(void *arg, struct rules_compile_result *res)
{
    struct rules_redis *rs = arg;
    uint64_t version = rs->compiling;
    char sha[65], err[ERRBUF];

    rs->compiling = 0;
    /* the fleet sees the outcome at once, not a report period later */
    ev_feed_event(rs->loop, &rs->report, EV_TIMER);
    err[0] = '\0';
    if (!res->cfg || rs->apply(rs->ctx, res->cfg, err, sizeof(err)) < 0) {
        refused(rs, version, res->cfg ? (err[0] ? err : "refused") : res->err);
        return;
    }
    rules_redis_sha256(res->text, res->len, sha);
    applied(rs, res->text, res->len, version);
    LOG_INFO("\"rules version applied\" version=%llu sha256=%.12s bytes=%zu",
             (unsigned long long)version, sha, res->len);
}

/* lua/rules_fetch.lua's reply, the text and its sha256 within the cap (or
 * the size of a text over it): check, then load it off the loop. */
static void on_version(void *arg, const struct store_result *res)
{
    struct rules_redis *rs = arg;
    uint64_t version = rs->fetching;
    char name[48], err[ERRBUF];

    rs->inflight = 0;
    if (res->status != STORE_OK ||
        (res->nstr != RULES_FETCH_R_N && res->nstr != RULES_FETCH_R_OVER))
        return; /* asked again at the next poll */
    if (res->nstr == RULES_FETCH_R_OVER) {
        refused(rs, version, "larger than 1 MiB: not read");
        return;
    }
    const char *text = res->str_len[RULES_FETCH_R_TEXT] ? res->str[RULES_FETCH_R_TEXT] : "";
    const char *want = res->str_len[RULES_FETCH_R_SHA256] ? res->str[RULES_FETCH_R_SHA256] : "";
    size_t len = res->str_len[RULES_FETCH_R_TEXT];
    if (!len && !res->str_len[RULES_FETCH_R_SHA256]) {
        refused(rs, version, "the version's hash is missing or has no text");
        return;
    }
    if (len > CFG_MAX_RULES_TEXT) {
        refused(rs, version, "larger than 1 MiB");
        return;
    }
    snprintf(name, sizeof(name), "redis:v%llu", (unsigned long long)version);
    /* the current key names the version's sha256 too (--push writes both
     * in one script): a hash that differs is not the version announced */
    if (rs->fetching_sha[0] && strcmp(rs->fetching_sha, want) != 0) {
        snprintf(err, sizeof(err), "%s: its sha256 is not the one %s names", name, rs->key_current);
        refused(rs, version, err);
        return;
    }
    /* --push's and --rollback's own check (a version they would refuse: no
     * or a wrong sha256, an error, no rule, over the budget, is never put
     * in force), off the loop: the rules in force serve until it ends. A
     * SIGHUP loading meanwhile: asked again at the next poll. */
    if (rules_compile_start(rs->compile, rs->path, text, len, want, name, on_loaded, rs) < 0)
        return;
    rs->compiling = version;
    LOG_DEBUG("\"rules version loading\" version=%llu bytes=%zu", (unsigned long long)version, len);
}

/* The store holds no version, or current, below the version N in force
 * (from Redis or from the cache): it lost what the fleet runs. No lower
 * number is applied (a stale replica's older rules would come back
 * silently); the warning says what to do. The fleet's view hears of this
 * agent's N at once, so that --push sees it and asks for --force. */
static void store_lost(struct rules_redis *rs, uint64_t current)
{
    char now[24] = "none";

    if (current)
        snprintf(now, sizeof(now), "%llu", (unsigned long long)current);
    if (warning_raise(WARNING_RULES_STORE_LOST,
                      /* within LOG_VALUE_MAX, so the log line has all of it */
                      "rule store lost version %llu, which this agent runs (current: %s): Redis "
                      "restarted empty, was flushed or is a stale replica. Keeping these rules. "
                      "Push them again with --push RULES --force; make Redis persistent "
                      "(appendonly yes or RDB snapshots)",
                      (unsigned long long)rs->cur.version, now))
        ev_feed_event(rs->loop, &rs->report, EV_TIMER);
}

/* GET current, "N SHA256" (or "N" alone, written by hand): a version
 * neither in force nor refused is fetched. */
static void on_current(void *arg, const struct store_result *res)
{
    struct rules_redis *rs = arg;
    char vname[32], sha[65] = "";

    rs->inflight = 0;
    if (res->status != STORE_OK)
        return;
    if ((res->nstr != 1 || !res->str_len[0] || strtoull(res->str[0], NULL, 10) == 0) &&
        rs->cur.version) {
        atomic_store(&metrics.rules_current_version, 0);
        store_lost(rs, 0);
        return;
    }
    if (res->nstr != 1 || !res->str_len[0]) {
        if (!rs->said_empty)
            LOG_WARN("\"no rule set in Redis yet (spoa-ratelimit --push): keeping the rules in "
                     "force\" key=%s",
                     log_val(rs->key_current));
        rs->said_empty = 1;
        return;
    }
    uint64_t version = strtoull(res->str[0], NULL, 10);
    const char *sp = memchr(res->str[0], ' ', res->str_len[0]);
    if (sp && res->str_len[0] - (size_t)(sp + 1 - res->str[0]) == 64)
        memcpy(sha, sp + 1, 64), sha[64] = '\0';
    atomic_store(&metrics.rules_current_version, version);
    if (version < rs->cur.version) {
        store_lost(rs, version);
        return;
    }
    /* a version at least the one in force: the store has what the fleet
     * runs again (after --push --force, or Redis back with its data) */
    warning_clear(WARNING_RULES_STORE_LOST);
    if (version == rs->cur.version && (!sha[0] || strcmp(sha, rs->sha) == 0)) {
        atomic_store(&metrics.rules_cached, 0); /* Redis says the cache is current */
        return;
    }
    if (version == 0 || (version == rs->rejected && strcmp(sha, rs->rejected_sha) == 0))
        return;
    memcpy(rs->fetching_sha, sha, sizeof(sha));
    snprintf(vname, sizeof(vname), "v:%llu", (unsigned long long)version);
    size_t klen = rules_redis_key(rs->prefix, vname, rs->fetching_key);
    /* the text only within the cap, its size checked in the same atomic
     * call: a text over it is never read into memory, even one swapped in
     * after a size query (and the store's reader refuses a larger reply
     * anyway, store_reply_cap.h) */
    char cap[24];
    snprintf(cap, sizeof(cap), "%d", CFG_MAX_RULES_TEXT);
    const char *argv[4 + RULES_FETCH_ARGC] = {"EVAL_RO", rules_script_fetch, "1", rs->fetching_key};
    argv[4 + RULES_FETCH_ARG_CAP] = cap;
    size_t argvlen[4 + RULES_FETCH_ARGC];
    for (int i = 0; i < 4 + RULES_FETCH_ARGC; i++)
        argvlen[i] = strlen(argv[i]);
    rs->fetching = version;
    rs->inflight = 1;
    store_read(rs->s, rs->fetching_key, klen, 4 + RULES_FETCH_ARGC, argv, argvlen, on_version, rs);
}

static void poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct rules_redis *rs = t->data;
    const char *argv[] = {"GET", rs->key_current};
    size_t argvlen[] = {3, strlen(rs->key_current)};

    /* one version at a time, and none while a SIGHUP loads the file */
    if (rs->inflight || rules_compile_busy(rs->compile) || !store_up(rs->s))
        return;
    rs->inflight = 1;
    /* the callback may run before this returns (Redis down) */
    store_read(rs->s, rs->key_current, argvlen[1], 2, argv, argvlen, on_current, rs);
}

/* The fleet's view (lua/rules_fleet.lua), kept for GET /fleet. */
static void on_report(void *arg, const struct store_result *res)
{
    struct rules_redis *rs = arg;
    struct rules_fleet f;

    rs->reporting = 0;
    if (res->status != STORE_OK) {
        if (res->status == STORE_ERR)
            LOG_DEBUG("\"rules report failed\" err=%s", log_val(res->err ? res->err : "?"));
        return;
    }
    if (rules_fleet_parse(res->nstr, res->str, res->str_len, &f) < 0) {
        LOG_DEBUG("\"rules report: unexpected reply\"");
        return;
    }
    rules_fleet_clear(&rs->fleet);
    rs->fleet = f;
    rs->have_fleet = 1;
    atomic_store(&metrics.rules_current_version, f.current);
}

static void report(struct rules_redis *rs)
{
    char version[24], live[24];

    if (rs->reporting || !store_up(rs->s))
        return;
    snprintf(version, sizeof(version), "%llu", (unsigned long long)rs->cur.version);
    snprintf(live, sizeof(live), "%d", RULES_FLEET_LIVE_MS);
    const char *argv[5 + RULES_FLEET_ARGC] = {"EVAL", rules_script_fleet, "2", rs->key_agents,
                                              rs->key_seen};
    argv[5 + RULES_FLEET_ARG_AGENT] = rs->member;
    argv[5 + RULES_FLEET_ARG_VERSION] = version;
    argv[5 + RULES_FLEET_ARG_ERROR] = rs->error;
    argv[5 + RULES_FLEET_ARG_LIVE_MS] = live;
    size_t argvlen[5 + RULES_FLEET_ARGC];
    for (int i = 0; i < 5 + RULES_FLEET_ARGC; i++)
        argvlen[i] = strlen(argv[i]);
    rs->reporting = 1;
    store_read(rs->s, rs->key_agents, argvlen[3], 5 + RULES_FLEET_ARGC, argv, argvlen, on_report,
               rs);
}

static void report_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    report(t->data);
}

struct text_req {
    rules_redis_text_fn *fn;
    void *arg;
};

static void text_answer(struct text_req *t, const char *status, const char *text, size_t len)
{
    char *body = malloc(len + 1);

    if (body)
        memcpy(body, text, len), body[len] = '\0';
    t->fn(t->arg, status, body, len);
    free(t);
}

static void on_text(void *arg, const struct store_result *res)
{
    struct text_req *t = arg;
    const char *why;

    if (res->status != STORE_OK ||
        (res->nstr != RULES_FETCH_R_N && res->nstr != RULES_FETCH_R_OVER)) {
        why = "Redis did not answer\n";
        text_answer(t, "503 Service Unavailable", why, strlen(why));
    } else if (res->nstr == RULES_FETCH_R_OVER) {
        why = "larger than 1 MiB: not read, as every agent refuses it\n";
        text_answer(t, "502 Bad Gateway", why, strlen(why));
    } else if (!res->str_len[RULES_FETCH_R_TEXT] && !res->str_len[RULES_FETCH_R_SHA256]) {
        why = "this version is not kept in Redis\n";
        text_answer(t, "404 Not Found", why, strlen(why));
    } else {
        text_answer(t, "200 OK", res->str[RULES_FETCH_R_TEXT], res->str_len[RULES_FETCH_R_TEXT]);
    }
}

void rules_redis_text(struct rules_redis *rs, uint64_t version, rules_redis_text_fn *fn, void *arg)
{
    struct text_req *t = malloc(sizeof(*t));
    char vname[32], key[RULES_STORE_KEY_MAX], cap[24];

    if (!t) {
        fn(arg, "503 Service Unavailable", NULL, 0);
        return;
    }
    *t = (struct text_req){fn, arg};
    snprintf(vname, sizeof(vname), "v:%llu", (unsigned long long)version);
    size_t klen = rules_redis_key(rs->prefix, vname, key);
    snprintf(cap, sizeof(cap), "%d", CFG_MAX_RULES_TEXT);
    const char *argv[4 + RULES_FETCH_ARGC] = {"EVAL_RO", rules_script_fetch, "1", key};
    argv[4 + RULES_FETCH_ARG_CAP] = cap;
    size_t argvlen[4 + RULES_FETCH_ARGC];
    for (int i = 0; i < 4 + RULES_FETCH_ARGC; i++)
        argvlen[i] = strlen(argv[i]);
    /* Redis down: on_text runs before this returns */
    store_read(rs->s, key, klen, 4 + RULES_FETCH_ARGC, argv, argvlen, on_text, t);
}

char *rules_redis_fleet_json(const struct rules_redis *rs, size_t *len)
{
    return rs->have_fleet ? rules_fleet_json(&rs->fleet, len) : NULL;
}

struct rules_redis *rules_redis_new(struct ev_loop *loop, struct store *s,
                                    struct rules_compile *compile, const char *path,
                                    const struct config *cfg, rules_redis_apply_fn *apply,
                                    void *ctx)
{
    struct rules_redis *rs = calloc(1, sizeof(*rs));

    if (!rs)
        return NULL;
    if (!(rs->path = strdup(path)) ||
        (cfg->rules_cache && !(rs->cache = strdup(cfg->rules_cache)))) {
        free(rs->path);
        free(rs);
        return NULL;
    }
    rs->loop = loop;
    rs->s = s;
    rs->compile = compile;
    rs->apply = apply;
    rs->ctx = ctx;
    snprintf(rs->prefix, sizeof(rs->prefix), "%s", cfg->redis_prefix ? cfg->redis_prefix : "");
    rules_redis_key(rs->prefix, "current", rs->key_current);
    /* the first look soon after start, once the store had a chance to connect */
    double every = (double)cfg->rules_poll_ms / 1000.;
    ev_timer_init(&rs->poll, poll_cb, every < 0.2 ? every : 0.2, every);
    rs->poll.data = rs;
    ev_timer_start(loop, &rs->poll);
    char host[128] = "agent";
    gethostname(host, sizeof(host) - 1);
    snprintf(rs->member, sizeof(rs->member), "host=%s pid=%d listen=%s", host, (int)getpid(),
             cfg->listen ? cfg->listen : "");
    rules_redis_key(rs->prefix, "agents", rs->key_agents);
    rules_redis_key(rs->prefix, "seen", rs->key_seen);
    ev_timer_init(&rs->report, report_cb, 0.5, REPORT_EVERY_S);
    rs->report.data = rs;
    ev_timer_start(loop, &rs->report);
    return rs;
}

int rules_redis_adopt(struct rules_redis *rs, const char *text, size_t len, uint64_t version,
                      int cached)
{
    char *copy = malloc(len + 1);

    rs->cur.version = version;
    if (copy) {
        memcpy(copy, text, len);
        copy[len] = '\0';
        free(rs->cur.text);
        rs->cur.text = copy;
        rs->cur.len = len;
    }
    rules_redis_sha256(text, len, rs->sha);
    atomic_store(&metrics.rules_version, version);
    atomic_store(&metrics.rules_cached, cached ? 1 : 0);
    return copy ? 0 : -1;
}

const struct rules_in_force *rules_redis_in_force(const struct rules_redis *rs)
{
    return rs ? &rs->cur : NULL;
}

const char *rules_redis_error(const struct rules_redis *rs)
{
    return rs->error[0] ? rs->error : NULL;
}

uint64_t rules_redis_rejected(const struct rules_redis *rs)
{
    return rs->error[0] ? rs->rejected : 0;
}

void rules_redis_retry(struct rules_redis *rs)
{
    if (rs) {
        rs->rejected = 0;
        rs->rejected_sha[0] = '\0';
    }
}

void rules_redis_stop(struct rules_redis *rs)
{
    if (!rs)
        return;
    ev_timer_stop(rs->loop, &rs->poll);
    ev_timer_stop(rs->loop, &rs->report);
    ev_clear_pending(rs->loop, &rs->report);
}

void rules_redis_free(struct rules_redis *rs)
{
    if (!rs)
        return;
    rules_redis_stop(rs);
    rules_fleet_clear(&rs->fleet);
    free(rs->cur.text);
    free(rs->cache);
    free(rs->path);
    free(rs);
}
