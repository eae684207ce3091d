/* SPDX-License-Identifier: Apache-2.0 */
/* config_load.c - the agent's INI configuration (config.h): parse, validate, free.
 *
 * This file holds the inih handler, sections and rules, and the public API.
 * config_reader.c reads the lines for inih (counting them, which Debian's
 * inih does not) and hands sections and pairs to the hooks here;
 * config_keys.c holds the key table; config_set.c stores one key's value;
 * config_check.c checks a rule when its section ends and the whole file at
 * its end; config_errors.c keeps the errors; config_ack.c sizes a rule's ACK
 * for the max_frame_size check.
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

/* Closes the current section (a rule without a rate is an error there). */
static void end_section(struct parse_state *st)
{
    if (st->kind == SEC_RULE) {
        config_check_rule(st, &st->cfg->rules[st->rule]);
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
    config_finish(st);
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
    config_finish(st);
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
