/* SPDX-License-Identifier: Apache-2.0 */
/* rules_cli.c - --push, --rules-history, --rollback, --fleet, --rules-show
 * and --rules-diff (see rules_cli.h).
 *
 * The store does the connecting (so the url forms, AUTH, Sentinel and
 * Cluster routing are the agent's own) on a loop of our own. Its first calls
 * may find the master of the {rules} slot not connected yet (Cluster), so a
 * harmless GET of the current version is repeated until it answers; the
 * script, which writes, is then sent once and never repeated.
 */
#include "rules_redis/rules_cli.h"

#include <errno.h>
#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "rules_scripts.h"
#include "rules_redis/rules_diff.h"
#include "rules_redis/rules_fleet.h"
#include "rules_redis/rules_script.h"
#include "rules_redis/rules_redis.h"
#include "store/store.h"

#define ERRBUF 8192
#define CONNECT_S 5.0 /* to reach Redis and hear from the {rules} slot */

/* One call's outcome, copied out of the callback. */
struct answer {
    int done, status;
    char err[256];
    size_t n;
    char **str;
    size_t *len; /* str[i] holds len[i] bytes (and a NUL) */
};

static void answer_clear(struct answer *an)
{
    for (size_t i = 0; i < an->n; i++)
        free(an->str[i]);
    free(an->str);
    free(an->len);
    memset(an, 0, sizeof(*an));
}

static void on_answer(void *arg, const struct store_result *res)
{
    struct answer *an = arg;

    an->done = 1;
    an->status = res->status;
    snprintf(an->err, sizeof(an->err), "%s",
             res->err                    ? res->err
             : res->status == STORE_DOWN ? "Redis unreachable"
                                         : "");
    if (res->status != STORE_OK)
        return;
    if (res->n == 1 && res->nstr == 0) { /* an integer */
        an->str = calloc(1, sizeof(char *));
        if (an->str && (an->str[0] = malloc(24))) {
            snprintf(an->str[0], 24, "%" PRId64, res->v[0]);
            an->n = 1;
        }
        return;
    }
    an->str = calloc(res->nstr ? res->nstr : 1, sizeof(char *));
    an->len = calloc(res->nstr ? res->nstr : 1, sizeof(size_t));
    for (size_t i = 0; an->str && an->len && i < res->nstr; i++) {
        /* every byte, a NUL among them too: --rules-show prints them all */
        if (!(an->str[i] = malloc(res->str_len[i] + 1)))
            break;
        memcpy(an->str[i], res->str[i], res->str_len[i]);
        an->str[i][res->str_len[i]] = '\0';
        an->len[i] = res->str_len[i];
        an->n = i + 1;
    }
}

struct cli {
    struct ev_loop *loop;
    struct store *s;
    const char *prefix;
    char current[RULES_STORE_KEY_MAX], versions[RULES_STORE_KEY_MAX];
    double deadline;
};

/* Send argv (routed by the {rules} keys) and wait for its answer. */
static void call(struct cli *c, int argc, const char *const *argv, struct answer *an)
{
    size_t argvlen[24];

    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    answer_clear(an);
    store_read(c->s, c->current, strlen(c->current), argc, argv, argvlen, on_answer, an);
    while (!an->done)
        ev_run(c->loop, EVRUN_ONCE);
}

/* url: a refusal that waiting does not cure (nothing listens, the
 * credentials are refused): the command says so at once, not after
 * CONNECT_S. Sentinel and Cluster wait: another node may answer. */
static int refused(struct cli *c, const struct config *cfg)
{
    static const char *const final[] = {
        "Connection refused", "No such file", "WRONGPASS", "NOAUTH", "NOPERM", "unauthenticated"};
    const char *err = store_last_error(c->s);

    if (!cfg->redis_url || cfg->redis_sentinel || cfg->redis_cluster)
        return 0;
    for (size_t i = 0; i < sizeof(final) / sizeof(final[0]); i++)
        if (strstr(err, final[i]))
            return 1;
    return 0;
}

/* Until the {rules} slot's master answers a read, or the deadline. */
static int connect_store(struct cli *c, const struct config *cfg)
{
    struct store_options so;
    char err[512];
    struct answer an = {0};
    const char *get[] = {"GET", c->current};

    store_options_from_config(cfg, &so);
    so.functions = 0; /* one command to run: no library to load for it */
    if (!(c->s = store_new(c->loop, &so, err, sizeof(err)))) {
        fprintf(stderr, "spoa-ratelimit: %s\n", err);
        return -1;
    }
    c->deadline = ev_time() + CONNECT_S;
    for (;;) {
        while (!store_up(c->s) && ev_time() < c->deadline && !refused(c, cfg))
            ev_run(c->loop, EVRUN_ONCE);
        if (!store_up(c->s) && refused(c, cfg)) {
            fprintf(stderr, "spoa-ratelimit: cannot reach Redis (%s): %s\n", cfg->redis_url,
                    store_last_error(c->s));
            return -1;
        }
        if (store_up(c->s)) {
            call(c, 2, get, &an);
            if (an.status == STORE_OK)
                break;
        }
        if (ev_time() >= c->deadline) {
            fprintf(stderr, "spoa-ratelimit: cannot reach Redis (%s) within %.0f s%s%s\n",
                    cfg->redis_url       ? cfg->redis_url
                    : cfg->redis_cluster ? cfg->redis_cluster
                                         : cfg->redis_sentinel,
                    CONNECT_S, an.err[0] ? ": " : "", an.err);
            answer_clear(&an);
            return -1;
        }
        ev_sleep(0.05);
        ev_now_update(c->loop);
    }
    answer_clear(&an);
    return 0;
}

/* The rules file, bounded as a version from Redis is. */
static char *read_rules(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "r");
    char *buf;

    if (!fp) {
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    buf = malloc(CFG_MAX_RULES_TEXT + 2);
    *len = buf ? fread(buf, 1, CFG_MAX_RULES_TEXT + 1, fp) : 0;
    fclose(fp);
    if (buf)
        buf[*len] = '\0';
    return buf;
}

/* --rollback N: version N as every agent will check it, with rules_redis_
 * check_version (--push's check, after its sha256): 1 it passes (its sha256
 * in sha, for the script to copy only that text), 0 it is not kept (the
 * script says so), -1 refused or unreadable (said on stderr). */
static int check_rollback(struct cli *c, const struct rules_cli_args *a, char sha[65])
{
    char vname[32], key[RULES_STORE_KEY_MAX], name[48], err[ERRBUF];
    struct answer an = {0};
    int rc = -1;

    snprintf(vname, sizeof(vname), "v:%lld", a->rollback);
    rules_redis_key(c->prefix, vname, key);
    char cap[24];
    snprintf(cap, sizeof(cap), "%d", CFG_MAX_RULES_TEXT);
    /* as the agents read it: the text only within the cap (lua/rules_fetch.lua) */
    const char *argv[4 + RULES_FETCH_ARGC] = {"EVAL_RO", rules_script_fetch, "1", key};
    argv[4 + RULES_FETCH_ARG_CAP] = cap;
    call(c, 4 + RULES_FETCH_ARGC, argv, &an);
    if (an.status == STORE_OK && an.n == RULES_FETCH_R_OVER) {
        fprintf(stderr,
                "spoa-ratelimit: not written: version %lld is larger than 1 MiB: every agent "
                "refuses it\n",
                a->rollback);
    } else if (an.status != STORE_OK || an.n != RULES_FETCH_R_N) {
        fprintf(stderr, "spoa-ratelimit: not written: %s\n", an.err[0] ? an.err : "bad reply");
    } else if (!an.str[0][0] && !an.str[1][0]) {
        rc = 0;
    } else {
        snprintf(name, sizeof(name), "redis:v%lld", a->rollback);
        if (rules_redis_check_version(a->config, an.str[0], strlen(an.str[0]), an.str[1], name,
                                      NULL, err, sizeof(err)) < 0) {
            fputs(err, stderr);
            fprintf(stderr,
                    "spoa-ratelimit: not written: version %lld would be refused by every agent, "
                    "as --push refuses it\n",
                    a->rollback);
        } else {
            snprintf(sha, 65, "%s", an.str[1]);
            rc = 1;
        }
    }
    answer_clear(&an);
    return rc;
}

static int run_push(struct cli *c, const struct rules_cli_args *a, const struct config *cfg,
                    const char *text, size_t len)
{
    char sha[65] = "", host[256] = "", keep[16], want[24] = "", from[24] = "", live[24];
    char agents[RULES_STORE_KEY_MAX], seen[RULES_STORE_KEY_MAX];
    struct answer an = {0};
    int rc = 1;

    if (a->op == RULES_CLI_PUSH)
        rules_redis_sha256(text ? text : "", len, sha);
    else if (check_rollback(c, a, sha) < 0)
        return 1;
    gethostname(host, sizeof(host) - 1);
    snprintf(keep, sizeof(keep), "%u", cfg->rules_history);
    if (a->if_version >= 0)
        snprintf(want, sizeof(want), "%lld", a->if_version);
    snprintf(from, sizeof(from), "%lld", a->rollback);
    snprintf(live, sizeof(live), "%d", RULES_FLEET_LIVE_MS);
    rules_redis_key(c->prefix, "agents", agents);
    rules_redis_key(c->prefix, "seen", seen);
    /* EVAL, the script, 4 keys, then its ARGV by position */
    const char *argv[7 + RULES_PUSH_ARGC] = {
        "EVAL", rules_script_push, "4", c->current, c->versions, agents, seen};
    const char **arg = argv + 7;
    arg[RULES_PUSH_ARG_OP] = a->op == RULES_CLI_PUSH ? "push" : "rollback";
    arg[RULES_PUSH_ARG_IF_VERSION] = want;
    arg[RULES_PUSH_ARG_HISTORY] = keep;
    arg[RULES_PUSH_ARG_HOST] = host;
    arg[RULES_PUSH_ARG_MESSAGE] = a->message ? a->message : "";
    arg[RULES_PUSH_ARG_TEXT] = a->op == RULES_CLI_PUSH ? text : from;
    arg[RULES_PUSH_ARG_SHA256] = sha; /* rollback: the one checked, "" when not kept */
    arg[RULES_PUSH_ARG_FORCE] = a->force ? "1" : "";
    arg[RULES_PUSH_ARG_LIVE_MS] = live;
    call(c, 7 + RULES_PUSH_ARGC, argv, &an);
    int ok = an.status == STORE_OK && an.n == RULES_PUSH_R_N;
    long status = ok ? strtol(an.str[RULES_PUSH_R_STATUS], NULL, 10) : -9;
    const char *version = ok ? an.str[RULES_PUSH_R_VERSION] : "";
    const char *fleet = ok ? an.str[RULES_PUSH_R_FLEET] : "";
    if (!ok) {
        fprintf(stderr, "spoa-ratelimit: not written: %s\n", an.err[0] ? an.err : "bad reply");
    } else if (status == RULES_PUSH_WRITTEN) {
        printf("%s\n", version);
        if (a->force)
            fprintf(stderr,
                    "spoa-ratelimit: --force: version %s, above every live agent's "
                    "(the highest: %s)\n",
                    version, fleet);
        rc = 0;
    } else if (status == RULES_PUSH_BEHIND_FLEET) {
        fprintf(stderr,
                "spoa-ratelimit: not written: the rule store is at version %s but agents run "
                "version %s: Redis lost the versions they applied (restarted without "
                "persistence, flushed, or failed over to a stale replica), and agents never "
                "apply a lower number. Check --fleet, then push again with --force: the new "
                "version is numbered above %s so that every agent applies it. Make Redis "
                "persistent (appendonly yes or RDB snapshots).\n",
                version, fleet, fleet);
    } else if (status == RULES_PUSH_MOVED) {
        fprintf(stderr,
                "spoa-ratelimit: not written: version %s is current, not %lld (pushed "
                "meanwhile: look with --rules-history, then push again)\n",
                version, a->if_version);
    } else {
        fprintf(stderr,
                "spoa-ratelimit: not written: version %lld is not kept (--rules-history lists "
                "the kept ones; current: %s)\n",
                a->rollback, version);
    }
    answer_clear(&an);
    return rc;
}

static int run_history(struct cli *c)
{
    struct answer an = {0};
    const char *argv[] = {"EVAL", rules_script_history, "2", c->current, c->versions};

    call(c, 5, argv, &an);
    if (an.status != STORE_OK || an.n < 1) {
        fprintf(stderr, "spoa-ratelimit: %s\n", an.err[0] ? an.err : "bad reply");
        answer_clear(&an);
        return 1;
    }
    printf("  %-8s %-20s %-24s %-12s %s\n", "VERSION", "TIME", "HOST", "SHA256", "MESSAGE");
    for (size_t i = RULES_HISTORY_R_HEAD; i + RULES_HISTORY_E_N <= an.n; i += RULES_HISTORY_E_N) {
        char *const *e = an.str + i;
        char when[32] = "?";
        time_t t = (time_t)strtoll(e[RULES_HISTORY_E_TIME], NULL, 10);
        struct tm tm;
        if (t && gmtime_r(&t, &tm))
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        printf("%c %-8s %-20s %-24s %-12.12s %s\n",
               strcmp(e[RULES_HISTORY_E_VERSION], an.str[RULES_HISTORY_R_CURRENT]) == 0 ? '*' : ' ',
               e[RULES_HISTORY_E_VERSION], when, e[RULES_HISTORY_E_HOST], e[RULES_HISTORY_E_SHA256],
               e[RULES_HISTORY_E_MESSAGE]);
    }
    if (an.n == RULES_HISTORY_R_HEAD)
        printf("; no version in Redis yet\n");
    answer_clear(&an);
    return 0;
}

/* The live agents, read only (an empty agent id: the script writes nothing). */
static int run_fleet(struct cli *c)
{
    struct answer an = {0};
    struct rules_fleet f;
    char agents[RULES_STORE_KEY_MAX], seen[RULES_STORE_KEY_MAX], live[24];
    int rc = 1;

    rules_redis_key(c->prefix, "agents", agents);
    rules_redis_key(c->prefix, "seen", seen);
    snprintf(live, sizeof(live), "%d", RULES_FLEET_LIVE_MS);
    const char *argv[5 + RULES_FLEET_ARGC] = {"EVAL", rules_script_fleet, "2", agents, seen};
    argv[5 + RULES_FLEET_ARG_AGENT] = ""; /* only read */
    argv[5 + RULES_FLEET_ARG_VERSION] = "0";
    argv[5 + RULES_FLEET_ARG_ERROR] = "";
    argv[5 + RULES_FLEET_ARG_LIVE_MS] = live;
    call(c, 5 + RULES_FLEET_ARGC, argv, &an);
    size_t len[an.n + 1];
    for (size_t i = 0; i < an.n; i++)
        len[i] = strlen(an.str[i]);
    if (an.status != STORE_OK) {
        fprintf(stderr, "spoa-ratelimit: %s\n", an.err[0] ? an.err : "bad reply");
    } else if (rules_fleet_parse(an.n, (const char *const *)an.str, len, &f) < 0) {
        fprintf(stderr, "spoa-ratelimit: unexpected reply to the fleet script\n");
    } else {
        char *text = rules_fleet_text(&f), *verdict = rules_fleet_verdict(&f);
        if (text)
            fputs(text, stdout);
        /* a script's check: 0 only when every live agent enforces the
         * current version, and none failed to apply one */
        if (verdict && verdict[0])
            fprintf(stderr, "spoa-ratelimit: %s\n", verdict);
        rc = text && verdict && !verdict[0] ? 0 : 1;
        free(text);
        free(verdict);
        rules_fleet_clear(&f);
    }
    answer_clear(&an);
    return rc;
}

/* Version N's text as an agent reads it (lua/rules_fetch.lua, EVAL_RO,
 * within the 1 MiB cap): into *text (free() it) of *len bytes, its stored
 * sha256 into sha. -1 when it cannot be read, said on stderr. */
static int fetch_version(struct cli *c, long long n, char **text, size_t *len, char sha[65])
{
    char vname[32], key[RULES_STORE_KEY_MAX], cap[24];
    struct answer an = {0};
    int rc = -1;

    snprintf(vname, sizeof(vname), "v:%lld", n);
    rules_redis_key(c->prefix, vname, key);
    snprintf(cap, sizeof(cap), "%d", CFG_MAX_RULES_TEXT);
    const char *argv[4 + RULES_FETCH_ARGC] = {"EVAL_RO", rules_script_fetch, "1", key};
    argv[4 + RULES_FETCH_ARG_CAP] = cap;
    call(c, 4 + RULES_FETCH_ARGC, argv, &an);
    if (an.status == STORE_OK && an.n == RULES_FETCH_R_OVER) {
        fprintf(stderr,
                "spoa-ratelimit: version %lld is larger than 1 MiB (%s bytes): not read, "
                "as every agent refuses it\n",
                n, an.str[RULES_FETCH_R_SIZE]);
    } else if (an.status != STORE_OK || an.n != RULES_FETCH_R_N || !an.len) {
        fprintf(stderr, "spoa-ratelimit: %s\n", an.err[0] ? an.err : "bad reply");
    } else if (!an.len[RULES_FETCH_R_TEXT] && !an.len[RULES_FETCH_R_SHA256]) {
        fprintf(stderr,
                "spoa-ratelimit: version %lld is not kept in Redis (--rules-history lists the "
                "kept ones)\n",
                n);
    } else {
        char got[65];
        *len = an.len[RULES_FETCH_R_TEXT];
        *text = an.str[RULES_FETCH_R_TEXT];
        an.str[RULES_FETCH_R_TEXT] = NULL; /* now the caller's */
        snprintf(sha, 65, "%s", an.str[RULES_FETCH_R_SHA256]);
        rules_redis_sha256(*text, *len, got);
        /* shown all the same: it is what is stored, and every agent refuses it */
        if (strcmp(got, sha) != 0)
            fprintf(stderr,
                    "spoa-ratelimit: warning: version %lld's text does not match its "
                    "sha256 (%.12s): every agent refuses it\n",
                    n, sha);
        rc = 0;
    }
    answer_clear(&an);
    return rc;
}

/* --rules-show N: the text on stdout byte for byte; who wrote it, when and
 * why on stderr, so that `--rules-show N > FILE` is the text alone. */
static int run_show(struct cli *c, long long n)
{
    char vname[32], key[RULES_STORE_KEY_MAX], sha[65], when[32] = "?";
    char *text = NULL;
    size_t len = 0;
    struct answer an = {0};

    if (fetch_version(c, n, &text, &len, sha) < 0)
        return 1;
    snprintf(vname, sizeof(vname), "v:%lld", n);
    rules_redis_key(c->prefix, vname, key);
    const char *argv[] = {"HMGET", key, "time", "host", "message"};
    call(c, 5, argv, &an);
    if (an.status == STORE_OK && an.n == 3) {
        time_t t = (time_t)strtoll(an.str[0], NULL, 10);
        struct tm tm;
        if (t && gmtime_r(&t, &tm))
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        fprintf(stderr, "; redis:v%lld %s host %s sha256 %.12s%s%s\n", n, when,
                an.str[1][0] ? an.str[1] : "?", sha, an.str[2][0] ? ": " : "", an.str[2]);
    }
    answer_clear(&an);
    int rc = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
    free(text);
    return rc;
}

/* --rules-diff A B: what turns A's text into B's, as diff -u shows it;
 * nothing when they are the same. */
static int run_diff(struct cli *c, long long a, long long b)
{
    char sha[65], an[32], bn[32];
    char *ta = NULL, *tb = NULL, *d = NULL;
    size_t la = 0, lb = 0, len = 0;
    int whole = 0, rc = 1;

    if (fetch_version(c, a, &ta, &la, sha) < 0 || fetch_version(c, b, &tb, &lb, sha) < 0)
        goto out;
    snprintf(an, sizeof(an), "redis:v%lld", a);
    snprintf(bn, sizeof(bn), "redis:v%lld", b);
    if (!(d = rules_diff(ta, la, tb, lb, an, bn, &len, &whole))) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        goto out;
    }
    if (whole)
        fprintf(stderr,
                "spoa-ratelimit: the versions differ in more than %d lines: what "
                "differs is shown as one replacement\n",
                RULES_DIFF_MAX_EDITS);
    rc = fwrite(d, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
out:
    free(ta);
    free(tb);
    free(d);
    return rc;
}

int rules_cli_run(const struct rules_cli_args *a)
{
    struct config *cfg = NULL;
    char err[ERRBUF];
    char *text = NULL;
    size_t len = 0;
    struct cli c = {0};
    int rc = 1;

    if (config_load_file(a->config, &cfg, err, sizeof(err)) < 0) {
        fputs(err, stderr);
        return 1;
    }
    if (a->op == RULES_CLI_PUSH) {
        /* exactly --check's checks, with FILE's own sections around RULES,
         * and at least one rule: what every agent checks again */
        if (!(text = read_rules(a->rules, &len)) ||
            rules_redis_check_text(a->config, text, len, a->rules, NULL, err, sizeof(err)) < 0) {
            if (text) {
                fputs(err, stderr);
                fprintf(stderr, "spoa-ratelimit: not pushed\n");
            }
            goto out;
        }
    }
    if (config_standalone(cfg)) {
        fprintf(stderr, "%s: no [redis] server (url, cluster or sentinel): no rule store\n",
                a->config);
        goto out;
    }
    log_level = LOG_LVL_ERROR; /* the store's reconnect notes are not this command's output */
    c.prefix = cfg->redis_prefix;
    rules_redis_key(cfg->redis_prefix, "current", c.current);
    rules_redis_key(cfg->redis_prefix, "versions", c.versions);
    if (!(c.loop = ev_loop_new(EVFLAG_AUTO))) {
        fprintf(stderr, "spoa-ratelimit: no event loop\n");
        goto out;
    }
    if (connect_store(&c, cfg) == 0)
        rc = a->op == RULES_CLI_HISTORY ? run_history(&c)
             : a->op == RULES_CLI_FLEET ? run_fleet(&c)
             : a->op == RULES_CLI_SHOW  ? run_show(&c, a->show[0])
             : a->op == RULES_CLI_DIFF  ? run_diff(&c, a->show[0], a->show[1])
                                        : run_push(&c, a, cfg, text, len);
out:
    store_free(c.s);
    if (c.loop)
        ev_loop_destroy(c.loop);
    free(text);
    config_free(cfg);
    return rc;
}
