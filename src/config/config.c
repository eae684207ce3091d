/* SPDX-License-Identifier: Apache-2.0 */
/* config.c - the agent's INI configuration: parse, validate, free.
 *
 * This file holds the key table, the inih handler, sections and rules, the
 * checks across keys and sections made at the end of the file, and the public
 * API. config_reader.c reads the lines for inih (counting them, which Debian's
 * inih does not) and hands sections and pairs to the hooks here;
 * config_set.c stores one key's value; config_errors.c keeps the errors;
 * config_ack.c sizes a rule's ACK for the max_frame_size check.
 */
#include "config.h"

#include <inttypes.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_errors.h"
#include "config_internal.h"
#include "config_reader.h"
#include "config_set.h"
#include "config_value.h"
#include "spop/spop.h"

#define DEFAULT_LISTEN "127.0.0.1:12345"

static const char *const section_names[] = {"",         "",      "agent",  "redis", "lease",
                                            "fallback", "rules", "global", "rule"};

/* ---- sections ----------------------------------------------------------------- */

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

/* Closes the current section (a rule without a rate is an error there). */
static void end_section(struct parse_state *st)
{
    if (st->kind == SEC_RULE) {
        struct cfg_rule *r = &st->cfg->rules[st->rule];

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
    st->kind = SEC_NONE;
}

static void begin_rule(struct parse_state *st, const char *name, size_t len)
{
    struct config *cfg = st->cfg;
    struct cfg_rule *r;

    if (config_valid_rule_name(name, len) == -1) {
        config_errors_add(&st->errors, st->line,
                          "bad rule name '%.*s' (1 to %d of A-Z a-z 0-9 _ . -)",
                          (int)(len > 80 ? 80 : len), name, CFG_MAX_NAME);
        return;
    }
    for (size_t i = 0; i < cfg->nrules; i++) {
        if (strlen(cfg->rules[i].name) == len && memcmp(cfg->rules[i].name, name, len) == 0) {
            config_errors_add(&st->errors, st->line,
                              "duplicate rule name '%.*s' (first at line %u)", (int)len, name,
                              cfg->rules[i].line);
            return;
        }
    }
    if (cfg->nrules == CFG_MAX_RULES) {
        config_errors_add(&st->errors, st->line, "too many rules (max %d)", CFG_MAX_RULES);
        return;
    }
    /* grow by doubling; rules are addressed by index while parsing (their
     * compiled regexes are pointers: a move leaves them valid) */
    if ((cfg->nrules & (cfg->nrules - 1)) == 0) {
        size_t cap = cfg->nrules ? cfg->nrules * 2 : 4;
        struct cfg_rule *grown = realloc(cfg->rules, cap * sizeof(*grown));

        if (!grown) {
            config_errors_add(&st->errors, st->line, "out of memory");
            return;
        }
        cfg->rules = grown;
    }
    r = &cfg->rules[cfg->nrules];
    memset(r, 0, sizeof(*r));
    if (!(r->name = strndup(name, len))) {
        config_errors_add(&st->errors, st->line, "out of memory");
        return;
    }
    r->name_len = strlen(r->name);
    r->algorithm = ALGO_TOKEN_BUCKET;
    r->cost = 1;
    r->lease = 1;
    r->on_redis_down = -1; /* unset: [fallback] mode, known only at the end */
    r->scope = SCOPE_REGION;
    r->line = st->line;
    st->rule = cfg->nrules++;
    st->kind = SEC_RULE;
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        if (config_key_at(i)->section == SEC_RULE)
            st->seen[i] = 0;
    }
}

/* A "[name]" line, name not NUL-terminated; NULL: a malformed header. Ends
 * the current section first. */
static void begin_section(struct parse_state *st, const char *name, size_t len)
{
    end_section(st);
    st->kind = SEC_SKIP; /* until proven otherwise: keys of a bad section are ignored */
    if (!name)
        return;
    while (len && isspace((unsigned char)*name)) {
        name++;
        len--;
    }
    while (len && isspace((unsigned char)name[len - 1]))
        len--;
    if (len >= 5 && memcmp(name, "rule:", 5) == 0) {
        /* rules from Redis replace the file's own: those are not read */
        if (st->rules_pass != 1)
            begin_rule(st, name + 5, len - 5);
        return;
    }
    if (st->rules_pass == 2) {
        /* a rule set goes to a whole fleet: [agent], [redis] ... are each
         * agent's own (issue 29) */
        config_errors_add(&st->errors, st->line,
                          "only [rule:*] sections can be pushed as rules, not [%.*s]",
                          (int)(len > 80 ? 80 : len), name);
        return;
    }
    for (int k = SEC_AGENT; k < SEC_RULE; k++) {
        if (strlen(section_names[k]) == len && memcmp(section_names[k], name, len) == 0) {
            st->kind = k;
            if (k == SEC_GLOBAL && !st->global_line)
                st->global_line = st->line;
            return;
        }
    }
    config_errors_add(&st->errors, st->line, "unknown section [%.*s]", (int)(len > 80 ? 80 : len),
                      name);
}

/* ---- handler -------------------------------------------------------------------- */

/* One key = value (or continuation) line. Returns 0 when the line holds an
 * error, which inih then counts as well. */
static int on_key(struct parse_state *st, const char *name, const char *value)
{
    const struct key_def *d;
    size_t before = config_errors_count(&st->errors);
    unsigned *seen;
    char cont_value[CONFIG_MAX_LINE];

    if (st->kind == SEC_SKIP || !value) /* !value: a syntax error, already reported */
        return 1;
    d = st->kind == SEC_NONE ? NULL : config_find_key(st->kind, name);
    seen = d ? &st->seen[config_key_index(d)] : NULL;
    if (st->cont && !d)
        return 1; /* the key's first line was already reported */
    if (st->cont) {
        /* inih 55 leaves inline comments on continuation lines */
        size_t len = (size_t)(config_find_chars_or_comment(value, "") - value);

        while (len && isspace((unsigned char)value[len - 1]))
            len--;
        if (len >= sizeof(cont_value))
            len = sizeof(cont_value) - 1;
        memcpy(cont_value, value, len);
        cont_value[len] = '\0';
        value = cont_value;
    }
    if (st->kind == SEC_NONE) {
        config_errors_add(&st->errors, st->line, "key '%s' outside any section", name);
    } else if (!d) {
        if (st->kind == SEC_RULE)
            config_errors_add(&st->errors, st->line, "unknown key '%s' in [rule:%s]", name,
                              st->cfg->rules[st->rule].name);
        else
            config_errors_add(&st->errors, st->line, "unknown key '%s' in [%s]", name,
                              section_names[st->kind]);
    } else if (st->cont && !(d->flags & F_LIST)) {
        config_errors_add(&st->errors, st->line,
                          "'%s' takes one line (is this line indented by mistake?)", name);
    } else if (!st->cont && *seen && !(d->flags & F_MULTI)) {
        config_errors_add(&st->errors, st->line, "duplicate key '%s' (first set at line %u)", name,
                          *seen);
    } else {
        if (!*seen)
            *seen = st->line;
        config_set_value(st, d, value);
    }
    return config_errors_count(&st->errors) == before;
}

/* ---- reader hooks ------------------------------------------------------------- */

static void hook_begin_section(void *ctx, unsigned line, const char *name, size_t len)
{
    struct parse_state *st = ctx;

    st->line = line;
    st->cont = 0;
    begin_section(st, name, len);
}

static void hook_end_section(void *ctx)
{
    end_section(ctx);
}

static int hook_value(void *ctx, unsigned line, int cont, const char *name, const char *value)
{
    struct parse_state *st = ctx;

    st->line = line;
    st->cont = cont;
    return on_key(st, name, value);
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
static void finish(struct parse_state *st)
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

/* ---- public API ---------------------------------------------------------------- */

static struct config *config_new(const char *path)
{
    struct config *cfg = calloc(1, sizeof(*cfg));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    if (!cfg)
        return NULL;
    cfg->path = strdup(path);
    cfg->listen = strdup(DEFAULT_LISTEN);
    cfg->redis_prefix = strdup("rl:");
    cfg->global_prefix = strdup("rl:");
    if (!cfg->path || !cfg->listen || !cfg->redis_prefix || !cfg->global_prefix ||
        net_parse_addr(DEFAULT_LISTEN, NET_ANY_HOST, &cfg->listen_addr) == -1) {
        config_free(cfg);
        return NULL;
    }
    cfg->workers = ncpu < 1 ? 1 : ncpu > MAX_WORKERS ? MAX_WORKERS : (int)ncpu;
    cfg->max_frame_size = SPOP_DEFAULT_FRAME_SIZE;
    cfg->log_level = LOG_LVL_INFO;
    cfg->max_key = 512;
    cfg->max_connections = 1024;
    cfg->max_handshakes = 128;
    cfg->hello_timeout_ms = 5000;
    cfg->idle_grace_ms = 30000;
    cfg->notify_silence_ms = 60000;
    /* /top names blocked clients: loopback only unless the operator says otherwise */
    if (net_cidr_parse("127.0.0.0/8", &cfg->stats_allow[0]) == -1 ||
        net_cidr_parse("::1/128", &cfg->stats_allow[1]) == -1) {
        config_free(cfg);
        return NULL;
    }
    cfg->nstats_allow = 2;
    cfg->stats_reset = 1;
    cfg->max_entries = 1000000;
    cfg->alert_share = 0.05;
    cfg->redis_timeout_ms = 100;
    cfg->redis_keepalive_ms = 1000;
    cfg->redis_sentinel_window_ms = 5000;
    cfg->redis_errors_quiet_ms = 30000;
    cfg->redis_epoch_check_ms = 1000;
    cfg->redis_functions = 1;
    cfg->global_timeout_ms = 1000;
    cfg->global_keepalive_ms = 1000;
    cfg->global_interval_ms = 1000;
    cfg->global_max_fraction = 0.25;
    /* a key new to a region decided at once where the burst allows it
     * (doc/design.md "The reserve": free at these sizes) */
    cfg->global_reserve = 0.2;
    cfg->lease_interval_ms = 100;
    cfg->lease_ttl_ms = 1000;
    cfg->lease_max_fraction = 0.1;
    cfg->lease_rate = 0; /* README "Lease policy": they cost contested keys */
    cfg->lease_rate_ttl_ms = 30000;
    cfg->fallback_mode = DOWN_OPEN;
    cfg->fallback_share = CFG_SHARE_AUTO;
    cfg->rules_source = RULES_SOURCE_FILE;
    cfg->rules_poll_ms = 1000;
    cfg->rules_history = 10;
    return cfg;
}

/* Reads the input rd was given into st->cfg, then checks the whole. */
static int load(struct parse_state *st, struct config_reader *rd, struct config **out, char *err,
                size_t errlen)
{
    const struct config_reader_hooks hooks = {hook_begin_section, hook_end_section, hook_value, st};

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    rd->errors = &st->errors;
    rd->hooks = &hooks;
    config_reader_run(rd);
    config_reader_release(rd);
    rd->hooks = NULL;
    config_compile_matches(st);
    finish(st);
    if (config_errors_count(&st->errors) > 0) {
        config_errors_write(&st->errors, st->name, err, errlen);
        config_free(st->cfg);
        return -1;
    }
    *out = st->cfg;
    return 0;
}

static struct parse_state *state_new(const char *name, char *err, size_t errlen)
{
    struct parse_state *st = calloc(1, sizeof(*st));

    if (st && !(st->cfg = config_new(name))) {
        free(st);
        st = NULL;
    }
    if (!st && err && errlen)
        snprintf(err, errlen, "%s: out of memory\n", name);
    return st;
}

/* The file at path opened into *fp, and a parse state for it; NULL with
 * the reason in err. */
static struct parse_state *state_open(const char *path, FILE **fp, char *err, size_t errlen)
{
    struct parse_state *st;

    if (!(*fp = fopen(path, "r"))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    if (!(st = state_new(path, err, errlen))) {
        fclose(*fp);
        return NULL;
    }
    st->name = path;
    return st;
}

int config_load_file(const char *path, struct config **out, char *err, size_t errlen)
{
    struct parse_state *st;
    struct config_reader rd = {0};
    FILE *fp;
    int ret;

    *out = NULL;
    if (!(st = state_open(path, &fp, err, errlen)))
        return -1;
    rd.fp = fp;
    ret = load(st, &rd, out, err, errlen);
    fclose(fp);
    free(st);
    return ret;
}

int config_load_string(const char *text, const char *name, struct config **out, char *err,
                       size_t errlen)
{
    struct parse_state *st;
    struct config_reader rd = {0};
    int ret;

    *out = NULL;
    if (!name)
        name = "<string>";
    if (!(st = state_new(name, err, errlen)))
        return -1;
    st->name = name;
    rd.text = text ? text : "";
    ret = load(st, &rd, out, err, errlen);
    free(st);
    return ret;
}

int config_load_with_rules(const char *path, const char *rules, size_t rules_len, const char *name,
                           struct config **out, char *err, size_t errlen)
{
    struct config_errors file_errors;
    struct parse_state *st;
    struct config_reader rd = {0}, rrd = {0};
    struct config_reader_hooks h = {hook_begin_section, hook_end_section, hook_value, NULL};
    FILE *fp;
    size_t used;

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (rules_len > CFG_MAX_RULES_TEXT || memchr(rules, '\0', rules_len)) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s\n", name,
                     rules_len > CFG_MAX_RULES_TEXT ? "larger than 1 MiB: not read"
                                                    : "holds a NUL byte: not text");
        return -1;
    }
    if (!(st = state_open(path, &fp, err, errlen)))
        return -1;
    /* the file first, without its rules; then the rules, their errors kept
     * apart to be named after their own source; then the whole-file checks,
     * which see both */
    h.ctx = st;
    st->rules_pass = 1;
    rd.fp = fp;
    rd.errors = &st->errors;
    rd.hooks = &h;
    config_reader_run(&rd);
    config_reader_release(&rd);
    fclose(fp);
    file_errors = st->errors;
    memset(&st->errors, 0, sizeof(st->errors));
    st->rules_pass = 2;
    st->kind = SEC_NONE;
    rrd.text = rules;
    rrd.errors = &st->errors;
    rrd.hooks = &h;
    config_reader_run(&rrd);
    config_reader_release(&rrd);
    config_compile_matches(st); /* its errors are the rules' */
    st->rules_pass = 0;
    st->rules_text = 1;
    struct config_errors rule_errors = st->errors;
    st->errors = file_errors;
    finish(st);
    if (config_errors_count(&st->errors) + config_errors_count(&rule_errors) > 0) {
        config_errors_write(&rule_errors, name, err, errlen);
        used = err && errlen ? strlen(err) : 0;
        if (err && errlen > used)
            config_errors_write(&st->errors, path, err + used, errlen - used);
        config_free(st->cfg);
        free(st);
        return -1;
    }
    *out = st->cfg;
    free(st);
    return 0;
}

void config_free(struct config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nrules; i++) {
        struct cfg_rule *r = &cfg->rules[i];

        free(r->name);
        free(r->message);
        free(r->rate_arg);
        free(r->burst_arg);
        free(r->cost_arg);
        free(r->release);
        for (size_t k = 0; k < r->nkeys; k++)
            free(r->keys[k]);
        for (size_t m = 0; m < r->nmatches; m++) {
            free(r->matches[m].arg);
            free(r->matches[m].pattern);
            rx_free(r->matches[m].re);
        }
    }
    free(cfg->rules);
    free(cfg->path);
    free(cfg->listen);
    free(cfg->stats);
    free(cfg->redis_url);
    free(cfg->redis_server.user);
    free(cfg->redis_server.password);
    free(cfg->redis_cluster);
    free(cfg->redis_cluster_hosts.list);
    free(cfg->redis_sentinel);
    free(cfg->redis_sentinel_hosts.list);
    free(cfg->redis_master);
    free(cfg->redis_prefix);
    free(cfg->redis_username);
    free(cfg->redis_password);
    free(cfg->redis_password_file);
    free(cfg->redis_auth_user);
    if (cfg->redis_auth_password) /* a secret: not left in freed memory */
        explicit_bzero(cfg->redis_auth_password, strlen(cfg->redis_auth_password));
    free(cfg->redis_auth_password);
    free(cfg->redis_sentinel_username);
    free(cfg->redis_sentinel_password);
    free(cfg->global_url);
    free(cfg->global_server.user);
    free(cfg->global_server.password);
    free(cfg->global_cluster);
    free(cfg->global_cluster_hosts.list);
    free(cfg->global_sentinel);
    free(cfg->global_sentinel_hosts.list);
    free(cfg->global_master);
    free(cfg->global_prefix);
    free(cfg->global_username);
    free(cfg->global_password);
    free(cfg->global_password_file);
    free(cfg->global_auth_user);
    if (cfg->global_auth_password)
        explicit_bzero(cfg->global_auth_password, strlen(cfg->global_auth_password));
    free(cfg->global_auth_password);
    free(cfg->global_sentinel_username);
    free(cfg->global_sentinel_password);
    free(cfg->global_region);
    free(cfg->stats_auth_file);
    free(cfg->stats_hosts);
    free(cfg->rules_cache);
    if (cfg->stats_auth)
        explicit_bzero(cfg->stats_auth, strlen(cfg->stats_auth));
    free(cfg->stats_auth);
    if (cfg->stats_credentials)
        explicit_bzero(cfg->stats_credentials, strlen(cfg->stats_credentials));
    free(cfg->stats_credentials);
    free(cfg);
}

int config_standalone(const struct config *cfg)
{
    return cfg->redis_server.addr.kind == NET_ADDR_NONE && cfg->redis_cluster_hosts.n == 0 &&
           cfg->redis_sentinel_hosts.n == 0;
}

int config_global(const struct config *cfg)
{
    return cfg->global_server.addr.kind != NET_ADDR_NONE || cfg->global_cluster_hosts.n != 0 ||
           cfg->global_sentinel_hosts.n != 0;
}

static int hostport_text(const struct net_hostport *hp, char *out, size_t cap)
{
    int v6 = strchr(hp->host, ':') != NULL;
    int n = snprintf(out, cap, "%s%s%s:%d", v6 ? "[" : "", hp->host, v6 ? "]" : "", hp->port);

    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int config_region_default(const struct config *cfg, char *out, size_t cap)
{
    char addr[NET_PATH_MAX + 8];
    int n;

    if (!cap)
        return -1;
    out[0] = '\0';
    if (cfg->redis_cluster_hosts.n) {
        if (hostport_text(&cfg->redis_cluster_hosts.list[0], addr, sizeof(addr)) == -1)
            return -1;
        n = snprintf(out, cap, "cluster@%s", addr);
    } else if (cfg->redis_sentinel_hosts.n) {
        if (hostport_text(&cfg->redis_sentinel_hosts.list[0], addr, sizeof(addr)) == -1)
            return -1;
        n = snprintf(out, cap, "%s@%s", cfg->redis_master ? cfg->redis_master : "", addr);
    } else if (cfg->redis_server.addr.kind != NET_ADDR_NONE) {
        if (net_format_addr(&cfg->redis_server.addr, addr, sizeof(addr)) == -1)
            return -1;
        n = snprintf(out, cap, "%s/%d", addr, cfg->redis_server.db);
    } else {
        return 0;
    }
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}
