/* SPDX-License-Identifier: Apache-2.0 */
/* config_check.c - the checks of a configuration once read: a rule's keys
 * against each other when its section ends (config_check_rule), and the
 * whole file's at its end (config_finish: exclusive keys, [global], the
 * defaults that follow other keys, the largest ACK against max_frame_size).
 * Errors go to the list with the line of the key they are about. */
#include "config_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_errors.h"
#include "config_value.h"
#include "spop/spop.h"

/* cost = arg:NAME comes with max_cost, and max_cost bounds nothing
 * without it: as check_rule_args does for the limits. */
static void check_rule_cost(struct parse_state *st, const struct cfg_rule *r)
{
    unsigned cost = config_seen_line(st, SEC_RULE, "cost");
    unsigned max_cost = config_seen_line(st, SEC_RULE, "max_cost");

    if (r->cost_arg && !max_cost)
        config_errors_add(&st->errors, cost,
                          "cost = arg:%s needs max_cost = N in the same rule (the highest "
                          "cost the arg may ask for)",
                          r->cost_arg);
    if (max_cost && !r->cost_arg)
        config_errors_add(&st->errors, max_cost, "'max_cost' is only used with cost = arg:NAME");
}

/* window_offset shifts a fixed window within its period: 0 <= offset <
 * period (a shift of a whole period is no shift; a longer one a mistake). */
static void check_rule_window(struct parse_state *st, const struct cfg_rule *r)
{
    unsigned line = config_seen_line(st, SEC_RULE, "window_offset");
    uint64_t period = r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms;

    if (!line)
        return;
    if (r->algorithm != ALGO_FIXED_WINDOW)
        config_errors_add(&st->errors, line,
                          "'window_offset' is only used with algorithm = fixed-window");
    else if (period && r->window_offset_ms >= period)
        config_errors_add(&st->errors, line,
                          "window_offset (%" PRIu64 "ms) must be shorter than the window (%" PRIu64
                          "ms, the rate's DURATION)",
                          r->window_offset_ms, period);
}

/* A limit taken from an arg comes with its ceiling (rate = arg:NAME with
 * max_rate, burst = arg:NAME with max_burst), and a ceiling without such a
 * limit bounds nothing: both are mistakes worth a FILE:LINE error. */
static void check_rule_args(struct parse_state *st, const struct cfg_rule *r)
{
    unsigned rate = config_seen_line(st, SEC_RULE, "rate"),
             burst = config_seen_line(st, SEC_RULE, "burst");
    unsigned max_rate = config_seen_line(st, SEC_RULE, "max_rate");
    unsigned max_burst = config_seen_line(st, SEC_RULE, "max_burst");
    /* a bad value was reported already: say nothing of its ceiling */
    int rate_bad = rate && !r->rate_arg && !r->rate_n;
    int burst_bad = burst && !r->burst_arg && !r->burst;

    if (rate_bad || burst_bad)
        return;
    if (r->rate_arg && !max_rate)
        config_errors_add(&st->errors, rate,
                          "rate = arg:%s needs max_rate = N/DURATION in the same rule (the "
                          "highest rate the arg may ask for)",
                          r->rate_arg);
    if (max_rate && !r->rate_arg)
        config_errors_add(&st->errors, max_rate, "'max_rate' is only used with rate = arg:NAME");
    if (r->burst_arg && !max_burst)
        config_errors_add(&st->errors, burst,
                          "burst = arg:%s needs max_burst = N in the same rule (the highest "
                          "burst the arg may ask for)",
                          r->burst_arg);
    if (max_burst && !r->burst_arg && !(r->rate_arg && !burst))
        config_errors_add(&st->errors, max_burst,
                          "'max_burst' is only used with burst = arg:NAME, or with rate = "
                          "arg:NAME and no burst");
}

/* A concurrency rule counts requests in flight, not a rate: it needs its
 * limit and release message, and the keys of rate rules mean nothing to it
 * (nor its keys to them). */
static void check_rule_concurrency(struct parse_state *st, struct cfg_rule *r)
{
    static const char *const rate_only[] = {"rate", "burst",    "max_rate", "max_burst",
                                            "cost", "max_cost", "block_for"};
    static const char *const cc_only[] = {"limit", "release", "max_hold"};
    int cc = r->algorithm == ALGO_CONCURRENCY;
    const char *const *keys = cc ? rate_only : cc_only;
    size_t nkeys = cc ? sizeof(rate_only) / sizeof(*rate_only) : sizeof(cc_only) / sizeof(*cc_only);

    for (size_t i = 0; i < nkeys; i++) {
        unsigned line = config_seen_line(st, SEC_RULE, keys[i]);
        if (line && cc)
            config_errors_add(&st->errors, line, "'%s' is not used with algorithm = concurrency",
                              keys[i]);
        else if (line)
            config_errors_add(&st->errors, line, "'%s' is only used with algorithm = concurrency",
                              keys[i]);
    }
    if (!cc)
        return;
    if (!config_seen_line(st, SEC_RULE, "limit"))
        config_errors_add(&st->errors, r->line,
                          "rule '%s' (algorithm = concurrency) has no limit (requests in flight "
                          "per key, >= 1)",
                          r->name);
    if (!config_seen_line(st, SEC_RULE, "release"))
        config_errors_add(&st->errors, r->line,
                          "rule '%s' (algorithm = concurrency) has no release (the SPOE message "
                          "whose arg slot gives a slot back)",
                          r->name);
    else if (r->message && r->release && strcmp(r->message, r->release) == 0)
        config_errors_add(&st->errors, config_seen_line(st, SEC_RULE, "release"),
                          "release '%s' is the rule's own message: a release must be a message "
                          "of its own",
                          r->release);
    if (!r->max_hold_ms) /* unset (a bad value was reported) */
        r->max_hold_ms = CFG_DEFAULT_MAX_HOLD_MS;
    /* the arithmetic of rate rules reads these: a limit of limit per max_hold */
    r->rate_n = r->cc_limit ? r->cc_limit : 1;
    r->rate_period_ms = r->max_hold_ms;
    r->burst = r->rate_n;
    r->cost = 1;
    r->lease = 0; /* one script call per slot: no lease */
}

/* scope = global: the global level leases tokens (doc/design.md,
 * "Regions"), so only a token bucket can be global; and it needs [global].
 * That is known here for rule text (the file was read before it: its
 * errors are the text's); for a file's own rules, at its end (finish). */
static void check_rule_scope(struct parse_state *st, const struct cfg_rule *r)
{
    unsigned line = config_seen_line(st, SEC_RULE, "scope");

    if (r->scope != SCOPE_GLOBAL)
        return;
    if (r->algorithm != ALGO_TOKEN_BUCKET)
        config_errors_add(&st->errors, line,
                          "scope = global supports token buckets only (rule '%s' is algorithm = "
                          "%s): use scope = region, or algorithm = token-bucket",
                          r->name, bucket_algorithm_names[r->algorithm]);
    if (st->rules_pass == 2 && !config_global(st->cfg))
        config_errors_add(&st->errors, line,
                          "scope = global needs a [global] section (url, cluster or sentinel: "
                          "the Redis every region shares) in the agent's file");
}

void config_check_rule(struct parse_state *st, struct cfg_rule *r)
{
    check_rule_concurrency(st, r);
    if (r->algorithm == ALGO_CONCURRENCY)
        ; /* no rate: its limit, checked above */
    else if (!config_seen_line(st, SEC_RULE, "rate"))
        config_errors_add(&st->errors, r->line, "rule '%s' has no rate", r->name);
    check_rule_args(st, r);
    check_rule_cost(st, r);
    check_rule_window(st, r);
    check_rule_scope(st, r);
}

/* ---- whole-file checks ---------------------------------------------------------- */

/* [rules] cache's default: rules.ini in the unit's own state directory
 * when systemd gives one ($STATE_DIRECTORY of StateDirectory=, the first of a
 * colon-separated list: spoa-ratelimit@NAME gets /var/lib/spoa-ratelimit/NAME,
 * so two instances never share a cache), else CFG_RULES_DEFAULT_CACHE.
 * Returns a malloc'd path, or NULL when out of memory. */
static char *default_rules_cache(void)
{
    const char *dir = getenv("STATE_DIRECTORY");
    size_t len = dir ? strcspn(dir, ":") : 0;
    char *path;

    if (!dir || dir[0] != '/' || len == 0)
        return strdup(CFG_RULES_DEFAULT_CACHE);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    path = malloc(len + sizeof("/" CFG_RULES_CACHE_NAME));
    if (!path)
        return NULL;
    memcpy(path, dir, len);
    memcpy(path + len, "/" CFG_RULES_CACHE_NAME, sizeof("/" CFG_RULES_CACHE_NAME));
    return path;
}

static void check_exclusive_in(struct parse_state *st, int sec, const char *a, const char *va,
                               const char *b, const char *vb)
{
    unsigned la = config_seen_line(st, sec, a), lb = config_seen_line(st, sec, b);

    if (va && vb)
        config_errors_add(&st->errors, la > lb ? la : lb,
                          "%s'%s' and '%s' cannot be used together (lines %u and %u)",
                          sec == SEC_GLOBAL ? "[global] " : "", a, b, la < lb ? la : lb,
                          la > lb ? la : lb);
}

static void check_exclusive(struct parse_state *st, const char *a, const char *va, const char *b,
                            const char *vb)
{
    check_exclusive_in(st, SEC_REDIS, a, va, b, vb);
}

/* An unclosed '{' in a prefix would take the first '}' of a client key
 * as the end of a Cluster hashtag: clients would choose their slot. */
static void check_prefix(struct parse_state *st, int sec, const char *prefix)
{
    const char *open = prefix ? strchr(prefix, '{') : NULL;

    if (open && !strchr(open, '}'))
        config_errors_add(&st->errors, config_seen_line(st, sec, "prefix"),
                          "prefix '%s': a '{' must be closed by '}' (a Redis Cluster "
                          "hashtag), or client keys would choose their slot",
                          prefix);
}

/* A region's name is the holder of the global buckets (an agent id one
 * level up) and appears in logs and metrics: printable, no blanks, no
 * quotes, commas or semicolons. */
static int region_name_ok(const char *s)
{
    if (!*s || strlen(s) > CFG_MAX_REGION)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c >= 0x7f || strchr("\"'\\,;#=", c))
            return 0;
    }
    return 1;
}

/* [global]: one topology, like [redis]; a [redis] server beside it (a
 * region decides from its own Redis only); credentials; the region's name,
 * derived from [redis] when unset; and the rules that need it. */
static void check_global(struct parse_state *st)
{
    struct config *cfg = st->cfg;
    int global = config_global(cfg);
    unsigned line;

    check_exclusive_in(st, SEC_GLOBAL, "url", cfg->global_url, "cluster", cfg->global_cluster);
    check_exclusive_in(st, SEC_GLOBAL, "url", cfg->global_url, "sentinel", cfg->global_sentinel);
    check_exclusive_in(st, SEC_GLOBAL, "cluster", cfg->global_cluster, "sentinel",
                       cfg->global_sentinel);
    if (cfg->global_sentinel && !cfg->global_master)
        config_errors_add(&st->errors, config_seen_line(st, SEC_GLOBAL, "sentinel"),
                          "[global] 'sentinel' needs 'master'");
    if (cfg->global_master && !cfg->global_sentinel)
        config_errors_add(&st->errors, config_seen_line(st, SEC_GLOBAL, "master"),
                          "[global] 'master' is only used with 'sentinel'");
    /* (a topology key written but refused was reported at its line) */
    if (st->global_line && !global && !config_seen_line(st, SEC_GLOBAL, "url") &&
        !config_seen_line(st, SEC_GLOBAL, "cluster") &&
        !config_seen_line(st, SEC_GLOBAL, "sentinel"))
        config_errors_add(&st->errors, st->global_line,
                          "[global] needs one of url, cluster or sentinel (the Redis every "
                          "region shares)");
    if (global && config_standalone(cfg))
        config_errors_add(&st->errors, st->global_line,
                          "[global] needs a [redis] server (url, cluster or sentinel): each "
                          "region decides from its own Redis, never from the global one");
    config_resolve_global_credentials(st, !config_global(st->cfg));
    check_prefix(st, SEC_GLOBAL, cfg->global_prefix);

    if (cfg->global_reserve > 0.5)
        config_errors_add(&st->errors, config_seen_line(st, SEC_GLOBAL, "reserve"),
                          "[global] reserve = %g: at most 0.5 (the share of a key's burst "
                          "set aside for the regions' reserves; the rest is the global bucket)",
                          cfg->global_reserve);
    line = config_seen_line(st, SEC_GLOBAL, "region");
    if (cfg->global_region && !region_name_ok(cfg->global_region))
        config_errors_add(&st->errors, line,
                          "bad region '%.80s' (1 to %d printable characters, without blanks, "
                          "quotes, '\\', ',', ';', '#' or '=')",
                          cfg->global_region, CFG_MAX_REGION);
    if (global && !cfg->global_region && !config_standalone(cfg)) {
        char name[CFG_MAX_REGION + 1];

        if (config_region_default(cfg, name, sizeof(name)) == -1 || !region_name_ok(name))
            config_errors_add(&st->errors, st->global_line,
                              "[global] cannot derive a region name from [redis] ('%.80s'): "
                              "set region = NAME",
                              name);
        else if (!(cfg->global_region = strdup(name)))
            config_errors_add(&st->errors, st->global_line, "out of memory");
        else
            cfg->global_region_derived = 1;
    }

    if (st->rules_text) /* checked as each rule of the text ended */
        return;
    for (size_t i = 0; i < cfg->nrules && !global; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        if (r->scope == SCOPE_GLOBAL)
            config_errors_add(&st->errors, r->line,
                              "rule '%s' has scope = global but there is no [global] section "
                              "(url, cluster or sentinel: the Redis every region shares)",
                              r->name);
    }
}

/* HAProxy may still offer less than max_frame_size (down to 256): then the
 * agent sends short ACKs (rules_encode_actions). What the operator sets must
 * hold every variable. */
static void check_frame_size(struct parse_state *st)
{
    struct config *cfg = st->cfg;
    const struct cfg_rule *worst = NULL;
    size_t need = 0;

    for (size_t i = 0; i < cfg->nrules; i++) {
        size_t n = config_ack_max_size(&cfg->rules[i]);
        if (n > need) {
            need = n;
            worst = &cfg->rules[i];
        }
    }
    if (worst && need > cfg->max_frame_size) {
        unsigned line = config_seen_line(st, SEC_AGENT, "max_frame_size");
        config_errors_add(&st->errors, line ? line : worst->line,
                          "max_frame_size %u is too small for the ACK of rule '%s' (up to %zu "
                          "bytes): raise it to at least %zu or shorten the rule name",
                          (unsigned)cfg->max_frame_size, worst->name, need, need);
    }
}

/* Checks across keys and sections, and the rule defaults that depend on
 * sections that may come after the rule. */
void config_finish(struct parse_state *st)
{
    struct config *cfg = st->cfg;

    check_exclusive(st, "url", cfg->redis_url, "cluster", cfg->redis_cluster);
    check_exclusive(st, "url", cfg->redis_url, "sentinel", cfg->redis_sentinel);
    check_exclusive(st, "cluster", cfg->redis_cluster, "sentinel", cfg->redis_sentinel);
    if (cfg->redis_sentinel && !cfg->redis_master)
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, "sentinel"),
                          "'sentinel' needs 'master'");
    if (cfg->redis_master && !cfg->redis_sentinel)
        config_errors_add(&st->errors, config_seen_line(st, SEC_REDIS, "master"),
                          "'master' is only used with 'sentinel'");
    config_resolve_credentials(st, config_standalone(st->cfg));
    check_global(st);

    /* the cache's default only where it is used: with source = file the
     * agent writes no file; cache = (empty) turns it off */
    if (cfg->rules_cache && !*cfg->rules_cache) {
        free(cfg->rules_cache);
        cfg->rules_cache = NULL;
    } else if (!config_seen_line(st, SEC_RULES, "cache") &&
               cfg->rules_source == RULES_SOURCE_REDIS &&
               !(cfg->rules_cache = default_rules_cache())) {
        config_errors_add(&st->errors, 0, "out of memory");
    }
    if (cfg->rules_source == RULES_SOURCE_REDIS && config_standalone(cfg))
        config_errors_add(&st->errors, config_seen_line(st, SEC_RULES, "source"),
                          "source = redis needs a [redis] server (url, cluster or sentinel)");

    check_prefix(st, SEC_REDIS, cfg->redis_prefix);

    /* HAProxy sends its HELLO at once and gives up after its own `timeout
     * hello` (a few hundred ms in practice): a minute only keeps silent
     * peers' connections open longer. */
    if (cfg->hello_timeout_ms > CFG_MAX_HELLO_TIMEOUT_MS)
        config_errors_add(&st->errors, config_seen_line(st, SEC_AGENT, "hello_timeout"),
                          "hello_timeout longer than 60s: a connection that has not said "
                          "HELLO by then never will");

    /* past an hour, a silent connection holds its slot as if there were
     * no grace at all */
    if (cfg->idle_grace_ms > CFG_MAX_IDLE_GRACE_MS)
        config_errors_add(&st->errors, config_seen_line(st, SEC_AGENT, "idle_grace"),
                          "idle_grace longer than 1h: a connection silent that long is not "
                          "an HAProxy's");

    /* a lease must outlive at least one top-up round, or it is never renewed */
    if (cfg->lease_ttl_ms <= cfg->lease_interval_ms) {
        unsigned line = config_seen_line(st, SEC_LEASE, "ttl");
        config_errors_add(&st->errors, line ? line : config_seen_line(st, SEC_LEASE, "interval"),
                          "lease ttl (%llu ms) must be longer than interval (%llu ms)",
                          (unsigned long long)cfg->lease_ttl_ms,
                          (unsigned long long)cfg->lease_interval_ms);
    }

    /* A rate lease outlives token leases several times over: it is renewed
     * in its last quarter. Unset, rate_ttl follows a long ttl. */
    unsigned rate_ttl_line = config_seen_line(st, SEC_LEASE, "rate_ttl");
    if (!rate_ttl_line && cfg->lease_rate_ttl_ms < 4 * cfg->lease_ttl_ms)
        cfg->lease_rate_ttl_ms = 4 * cfg->lease_ttl_ms;
    if (cfg->lease_rate && cfg->lease_rate_ttl_ms < 4 * cfg->lease_ttl_ms) {
        unsigned line = rate_ttl_line;
        config_errors_add(&st->errors, line ? line : config_seen_line(st, SEC_LEASE, "ttl"),
                          "lease rate_ttl (%llu ms) must be at least 4 times ttl (%llu ms)",
                          (unsigned long long)cfg->lease_rate_ttl_ms,
                          (unsigned long long)cfg->lease_ttl_ms);
    }

    for (size_t i = 0; i < cfg->nrules; i++) {
        struct cfg_rule *r = &cfg->rules[i];

        /* With rate = arg:NAME and no burst, each request's burst is the N
         * of its rate: bounded by max_burst, by default max_rate's N. */
        if (r->burst == 0 && !r->burst_arg)
            r->burst = r->rate_n;
        if (r->rate_arg && !r->burst_arg && r->burst == 0 && r->max_burst == 0)
            r->max_burst = r->max_rate_n;
        if (r->on_redis_down == -1)
            r->on_redis_down = cfg->fallback_mode;
        r->shadow = r->shadow || cfg->shadow;
    }
    check_frame_size(st);
}
