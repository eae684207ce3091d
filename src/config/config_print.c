/* SPDX-License-Identifier: Apache-2.0 */
/* config_print.c - the effective configuration as INI text: every key of
 * every section with its default resolved, what `--check --print`, GET
 * /config and the config hash show. Passwords are masked. Pure. */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "core/util.h"

/* A duration in the largest unit that writes it exactly. */
void config_duration_text(uint64_t ms, char *out, size_t cap)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (ms >= units[i].ms && ms % units[i].ms == 0) {
            snprintf(out, cap, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
            return;
        }
    }
    snprintf(out, cap, "%" PRIu64 "ms", ms);
}

static void put_duration(struct strbuf *o, uint64_t ms)
{
    char text[32];

    config_duration_text(ms, text, sizeof(text));
    strbuf_printf(o, "%s", text);
}

static void put_cidrs(struct strbuf *o, const struct net_cidr *c, size_t n)
{
    char buf[INET6_ADDRSTRLEN];

    for (size_t i = 0; i < n; i++) {
        if (!inet_ntop(c[i].family, c[i].addr, buf, sizeof(buf)))
            snprintf(buf, sizeof(buf), "?");
        strbuf_printf(o, "%s%s/%u", i ? ", " : "", buf, c[i].prefix);
    }
}

static const char *yes_no(int b)
{
    return b ? "yes" : "no";
}

/* A url with its password replaced by "***" (server: its parsed form). */
static void put_url_of(struct strbuf *o, const char *url, const struct cfg_redis_url *server)
{
    const char *at, *colon;

    if (!url || !server->password || !(at = strrchr(url, '@'))) {
        strbuf_printf(o, "%s", url ? url : "");
        return;
    }
    colon = memchr(url + 8, ':', (size_t)(at - (url + 8))); /* past "redis://" */
    if (!colon) {
        strbuf_printf(o, "%s", url);
        return;
    }
    strbuf_printf(o, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

/* [redis] url with the password replaced by "***". */
static void put_url(struct strbuf *o, const struct config *cfg)
{
    put_url_of(o, cfg->redis_url, &cfg->redis_server);
}

static void put_agent(struct strbuf *o, const struct config *cfg)
{
    strbuf_printf(o,
                  "[agent]\nlisten = %s\nworkers = %d\nmax_frame_size = %" PRIu32 "\nstats = %s\n",
                  cfg->listen, cfg->workers, cfg->max_frame_size, cfg->stats ? cfg->stats : "");
    strbuf_printf(o, "log_level = %s\nshadow = %s\n", log_level_names[cfg->log_level],
                  yes_no(cfg->shadow));
    strbuf_printf(o, "charge = %s\n", cfg->charge == CHARGE_EACH ? "each" : "all-or-nothing");
    if (cfg->nallow) {
        strbuf_printf(o, "allow = ");
        put_cidrs(o, cfg->allow, cfg->nallow);
        strbuf_printf(o, "\n");
    } else {
        strbuf_printf(o, "; allow: any peer\n");
    }
    strbuf_printf(o, "max_key = %zu\nalert_share = %g\nmax_connections = %u\nmax_handshakes = %u\n",
                  cfg->max_key, cfg->alert_share, cfg->max_connections, cfg->max_handshakes);
    strbuf_printf(o, "hello_timeout = ");
    put_duration(o, cfg->hello_timeout_ms);
    strbuf_printf(o, "\nidle_grace = ");
    put_duration(o, cfg->idle_grace_ms);
    strbuf_printf(o, "\nnotify_silence = ");
    put_duration(o, cfg->notify_silence_ms);
    strbuf_printf(o, "\nstats_allow = ");
    put_cidrs(o, cfg->stats_allow, cfg->nstats_allow);
    strbuf_printf(o, "%s\n", cfg->nstats_allow ? "" : " ; any peer");
    /* credentials: never the password, the file it is in instead */
    if (cfg->stats_auth)
        strbuf_printf(o, "stats_auth = ***\n");
    if (cfg->stats_auth_file)
        strbuf_printf(o, "stats_auth_file = %s\n", cfg->stats_auth_file);
    if (cfg->stats_hosts)
        strbuf_printf(o, "stats_hosts = %s\n", cfg->stats_hosts);
    strbuf_printf(o, "stats_reset = %s\n\n", yes_no(cfg->stats_reset));
}

static void put_redis(struct strbuf *o, const struct config *cfg)
{
    if (config_standalone(cfg)) {
        strbuf_printf(o, "; no [redis]: standalone, every bucket in this agent's memory\n\n");
        return;
    }
    strbuf_printf(o, "[redis]\n");
    if (cfg->redis_url) {
        strbuf_printf(o, "url = ");
        put_url(o, cfg);
        strbuf_printf(o, "\n");
    }
    if (cfg->redis_cluster)
        strbuf_printf(o, "cluster = %s\n", cfg->redis_cluster);
    if (cfg->redis_sentinel)
        strbuf_printf(o, "sentinel = %s\nmaster = %s\n", cfg->redis_sentinel,
                      cfg->redis_master ? cfg->redis_master : "");
    /* credentials: the user, never a password (its source instead) */
    if (cfg->redis_username)
        strbuf_printf(o, "username = %s\n", cfg->redis_username);
    if (cfg->redis_password)
        strbuf_printf(o, "password = ***\n");
    if (cfg->redis_password_file)
        strbuf_printf(o, "password_file = %s\n", cfg->redis_password_file);
    if (cfg->redis_sentinel_username)
        strbuf_printf(o, "sentinel_username = %s\n", cfg->redis_sentinel_username);
    if (cfg->redis_sentinel_password)
        strbuf_printf(o, "sentinel_password = ***\n");
    strbuf_printf(o, "timeout = ");
    put_duration(o, cfg->redis_timeout_ms);
    strbuf_printf(o, "\nkeepalive = ");
    if (cfg->redis_keepalive_ms)
        put_duration(o, cfg->redis_keepalive_ms);
    else
        strbuf_printf(o, "0 ; off");
    strbuf_printf(o, "\nsentinel_window = ");
    put_duration(o, cfg->redis_sentinel_window_ms);
    strbuf_printf(o, "\nerrors_quiet = ");
    put_duration(o, cfg->redis_errors_quiet_ms);
    strbuf_printf(o, "\nepoch_check = ");
    if (cfg->redis_epoch_check_ms)
        put_duration(o, cfg->redis_epoch_check_ms);
    else
        strbuf_printf(o, "0 ; off");
    strbuf_printf(
        o, "\nprefix = %s\nrequire_noeviction = %s\nfunctions = %s\n\n[lease]\ninterval = ",
        cfg->redis_prefix ? cfg->redis_prefix : "", cfg->redis_require_noeviction ? "yes" : "no",
        cfg->redis_functions ? "on" : "off");
    put_duration(o, cfg->lease_interval_ms);
    strbuf_printf(o, "\nttl = ");
    put_duration(o, cfg->lease_ttl_ms);
    strbuf_printf(o, "\nmax_fraction = %g\nrate_leases = %s\nrate_ttl = ", cfg->lease_max_fraction,
                  cfg->lease_rate ? "on" : "off");
    put_duration(o, cfg->lease_rate_ttl_ms);
    strbuf_printf(o, "\n\n");
}

/* [global]: only when configured; its passwords masked as [redis]'s. */
static void put_global(struct strbuf *o, const struct config *cfg)
{
    if (!config_global(cfg))
        return;
    strbuf_printf(o, "[global]\n");
    if (cfg->global_url) {
        strbuf_printf(o, "url = ");
        put_url_of(o, cfg->global_url, &cfg->global_server);
        strbuf_printf(o, "\n");
    }
    if (cfg->global_cluster)
        strbuf_printf(o, "cluster = %s\n", cfg->global_cluster);
    if (cfg->global_sentinel)
        strbuf_printf(o, "sentinel = %s\nmaster = %s\n", cfg->global_sentinel,
                      cfg->global_master ? cfg->global_master : "");
    if (cfg->global_username)
        strbuf_printf(o, "username = %s\n", cfg->global_username);
    if (cfg->global_password)
        strbuf_printf(o, "password = ***\n");
    if (cfg->global_password_file)
        strbuf_printf(o, "password_file = %s\n", cfg->global_password_file);
    if (cfg->global_sentinel_username)
        strbuf_printf(o, "sentinel_username = %s\n", cfg->global_sentinel_username);
    if (cfg->global_sentinel_password)
        strbuf_printf(o, "sentinel_password = ***\n");
    strbuf_printf(o, "timeout = ");
    put_duration(o, cfg->global_timeout_ms);
    strbuf_printf(o, "\nkeepalive = ");
    if (cfg->global_keepalive_ms)
        put_duration(o, cfg->global_keepalive_ms);
    else
        strbuf_printf(o, "0 ; off");
    strbuf_printf(o, "\nprefix = %s\ninterval = ", cfg->global_prefix ? cfg->global_prefix : "");
    put_duration(o, cfg->global_interval_ms);
    strbuf_printf(o, "\nmax_fraction = %g\nreserve = %g\nregion = %s%s\n\n", cfg->global_max_fraction,
                  cfg->global_reserve,
                  cfg->global_region ? cfg->global_region : "",
                  cfg->global_region_derived ? " ; derived from [redis]" : "");
}

/* [rules]: where the [rule:*] sections below come from. */
static void put_rules_source(struct strbuf *o, const struct config *cfg)
{
    strbuf_printf(o, "[rules]\nsource = %s\npoll = ",
                  cfg->rules_source == RULES_SOURCE_REDIS ? "redis" : "file");
    put_duration(o, cfg->rules_poll_ms);
    strbuf_printf(o, "\ncache = %s%s\nhistory = %u\n\n", cfg->rules_cache ? cfg->rules_cache : "",
                  cfg->rules_cache ? "" : " ; none", cfg->rules_history);
}

static void put_rate(struct strbuf *o, const char *name, uint64_t n, uint64_t period_ms)
{
    strbuf_printf(o, "%s = %" PRIu64 "/", name, n);
    put_duration(o, period_ms);
    strbuf_printf(o, "\n");
}

/* rate and burst, fixed or from args with their ceilings. */
static void put_limits(struct strbuf *o, const struct cfg_rule *r)
{
    if (r->rate_arg) {
        strbuf_printf(o, "rate = arg:%s\n", r->rate_arg);
        put_rate(o, "max_rate", r->max_rate_n, r->max_rate_period_ms);
    } else {
        put_rate(o, "rate", r->rate_n, r->rate_period_ms);
    }
    if (r->burst_arg)
        strbuf_printf(o, "burst = arg:%s\n", r->burst_arg);
    else if (r->burst)
        strbuf_printf(o, "burst = %" PRIu64 "\n", r->burst);
    else
        strbuf_printf(o, "; burst: N of each request's rate, at most max_burst\n");
    if (r->max_burst)
        strbuf_printf(o, "max_burst = %" PRIu64 "\n", r->max_burst);
    if (r->cost_arg)
        strbuf_printf(o, "cost = arg:%s\nmax_cost = %" PRIu64 "\n", r->cost_arg, r->max_cost);
    else
        strbuf_printf(o, "cost = %" PRIu64 "\n", r->cost);
}

static void put_rule(struct strbuf *o, const struct config *cfg, const struct cfg_rule *r)
{
    static const char *const modes[] = {"open", "closed"};

    strbuf_printf(o, "[rule:%s]\n", r->name);
    strbuf_printf(o, r->message ? "message = %s\n" : "; message: every message\n",
                  r->message ? r->message : "");
    if (r->nkeys) {
        strbuf_printf(o, "key = ");
        for (size_t i = 0; i < r->nkeys; i++)
            strbuf_printf(o, "%s%s", i ? ", " : "", r->keys[i]);
        strbuf_printf(o, "\n");
    } else {
        strbuf_printf(o,
                      "; no key: one bucket shared by every matching request (a global limit)\n");
    }
    for (size_t i = 0; i < r->nmatches; i++)
        strbuf_printf(o, "match = %s %s\n", r->matches[i].arg, r->matches[i].pattern);
    if (r->algorithm == BUCKET_CONCURRENCY) { /* slots in flight: no rate, no lease */
        strbuf_printf(o, "algorithm = concurrency\nlimit = %" PRIu64 "\nrelease = %s\nmax_hold = ",
                      r->cc_limit, r->release);
        put_duration(o, r->max_hold_ms);
        strbuf_printf(o, "\n");
    } else {
        put_limits(o, r);
        strbuf_printf(o, "algorithm = %s\n", bucket_algorithm_names[r->algorithm]);
        if (r->algorithm == BUCKET_FIXED_WINDOW) {
            strbuf_printf(o, "window_offset = ");
            if (r->window_offset_ms)
                put_duration(o, r->window_offset_ms);
            else
                strbuf_printf(o, "0");
            strbuf_printf(o, "\n");
        }
        strbuf_printf(o, "lease = %s\n", yes_no(r->lease));
        strbuf_printf(o, "block_for = ");
        if (r->block_for_ms)
            put_duration(o, r->block_for_ms);
        else
            strbuf_printf(o, "0 ; off");
        strbuf_printf(o, "\n");
    }
    strbuf_printf(o, "on_redis_down = %s\nshadow = %s%s\nscope = %s\n\n", modes[r->on_redis_down],
                  yes_no(r->shadow), cfg->shadow ? " ; [agent] shadow = yes" : "",
                  r->scope == SCOPE_GLOBAL ? "global" : "region");
}

char *config_render(const struct config *cfg, size_t *len)
{
    static const char *const modes[] = {"open", "closed"};
    struct strbuf o = STRBUF_INIT;

    strbuf_printf(&o, "; the effective configuration of %s, every default resolved\n\n", cfg->path);
    put_agent(&o, cfg);
    put_redis(&o, cfg);
    put_global(&o, cfg);
    strbuf_printf(&o, "[fallback]\nmode = %s\n", modes[cfg->fallback_mode]);
    if (cfg->fallback_share == CFG_SHARE_AUTO)
        strbuf_printf(&o, "share = auto\n\n");
    else
        strbuf_printf(&o, "share = %g\n\n", cfg->fallback_share);
    put_rules_source(&o, cfg);
    for (size_t i = 0; i < cfg->nrules; i++)
        put_rule(&o, cfg, &cfg->rules[i]);
    return strbuf_finish(&o, len);
}

uint64_t config_hash(const struct config *cfg)
{
    size_t len;
    char *text = config_render(cfg, &len);
    uint64_t h;

    if (!text)
        return 0;
    /* the first line names the file: not part of what the config means */
    const char *body = memchr(text, '\n', len);
    body = body ? body + 1 : text;
    h = util_hash(UTIL_HASH_INIT, body, len - (size_t)(body - text));
    free(text);
    return h;
}
