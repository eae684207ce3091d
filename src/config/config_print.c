/* config_print.c - the effective configuration as INI text: every key of
 * every section with its default resolved, what `--check --print`, GET
 * /config and the config hash show. Passwords are masked. Pure. */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct out {
    char *p;
    size_t len, cap;
    int oom;
};

static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (o->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = (o->cap + (size_t)n + 1) * 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

/* A duration in the largest unit that writes it exactly. */
static void put_duration(struct out *o, uint64_t ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (ms >= units[i].ms && ms % units[i].ms == 0) {
            put(o, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
            return;
        }
    }
    put(o, "%" PRIu64 "ms", ms);
}

static void put_cidrs(struct out *o, const struct net_cidr *c, size_t n)
{
    char buf[INET6_ADDRSTRLEN];

    for (size_t i = 0; i < n; i++) {
        if (!inet_ntop(c[i].family, c[i].addr, buf, sizeof(buf)))
            snprintf(buf, sizeof(buf), "?");
        put(o, "%s%s/%u", i ? ", " : "", buf, c[i].prefix);
    }
}

static const char *yes_no(int b)
{
    return b ? "yes" : "no";
}

/* [redis] url with the password replaced by "***". */
static void put_url(struct out *o, const struct config *cfg)
{
    const char *url = cfg->redis_url, *at, *colon;

    if (!url || !cfg->redis_server.password || !(at = strrchr(url, '@'))) {
        put(o, "%s", url ? url : "");
        return;
    }
    colon = memchr(url + 8, ':', (size_t)(at - (url + 8))); /* past "redis://" */
    if (!colon) {
        put(o, "%s", url);
        return;
    }
    put(o, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

static void put_agent(struct out *o, const struct config *cfg)
{
    put(o, "[agent]\nlisten = %s\nworkers = %d\nmax_frame_size = %" PRIu32 "\nstats = %s\n",
        cfg->listen, cfg->workers, cfg->max_frame_size, cfg->stats ? cfg->stats : "");
    put(o, "log_level = %s\nshadow = %s\n", log_level_names[cfg->log_level],
        yes_no(cfg->shadow));
    if (cfg->nallow) {
        put(o, "allow = ");
        put_cidrs(o, cfg->allow, cfg->nallow);
        put(o, "\n");
    } else {
        put(o, "; allow: any peer\n");
    }
    put(o, "max_key = %zu\nalert_share = %g\nmax_connections = %u\nmax_handshakes = %u\n",
        cfg->max_key, cfg->alert_share, cfg->max_connections, cfg->max_handshakes);
    put(o, "hello_timeout = ");
    put_duration(o, cfg->hello_timeout_ms);
    put(o, "\nstats_allow = ");
    put_cidrs(o, cfg->stats_allow, cfg->nstats_allow);
    put(o, "%s\n\n", cfg->nstats_allow ? "" : " ; any peer");
}

static void put_redis(struct out *o, const struct config *cfg)
{
    if (config_standalone(cfg)) {
        put(o, "; no [redis]: standalone, every bucket in this agent's memory\n\n");
        return;
    }
    put(o, "[redis]\n");
    if (cfg->redis_url) {
        put(o, "url = ");
        put_url(o, cfg);
        put(o, "\n");
    }
    if (cfg->redis_cluster)
        put(o, "cluster = %s\n", cfg->redis_cluster);
    if (cfg->redis_sentinel)
        put(o, "sentinel = %s\nmaster = %s\n", cfg->redis_sentinel,
            cfg->redis_master ? cfg->redis_master : "");
    /* credentials: the user, never a password (its source instead) */
    if (cfg->redis_username)
        put(o, "username = %s\n", cfg->redis_username);
    if (cfg->redis_password)
        put(o, "password = ***\n");
    if (cfg->redis_password_file)
        put(o, "password_file = %s\n", cfg->redis_password_file);
    if (cfg->redis_sentinel_username)
        put(o, "sentinel_username = %s\n", cfg->redis_sentinel_username);
    if (cfg->redis_sentinel_password)
        put(o, "sentinel_password = ***\n");
    put(o, "timeout = ");
    put_duration(o, cfg->redis_timeout_ms);
    put(o, "\nkeepalive = ");
    if (cfg->redis_keepalive_ms)
        put_duration(o, cfg->redis_keepalive_ms);
    else
        put(o, "0 ; off");
    put(o, "\nprefix = %s\nrequire_noeviction = %s\n\n[lease]\ninterval = ",
        cfg->redis_prefix ? cfg->redis_prefix : "", cfg->redis_require_noeviction ? "yes" : "no");
    put_duration(o, cfg->lease_interval_ms);
    put(o, "\nttl = ");
    put_duration(o, cfg->lease_ttl_ms);
    put(o, "\nmax_fraction = %g\nrate_leases = %s\nrate_ttl = ", cfg->lease_max_fraction,
        cfg->lease_rate ? "on" : "off");
    put_duration(o, cfg->lease_rate_ttl_ms);
    put(o, "\n\n");
}

static void put_rate(struct out *o, const char *name, uint64_t n, uint64_t period_ms)
{
    put(o, "%s = %" PRIu64 "/", name, n);
    put_duration(o, period_ms);
    put(o, "\n");
}

/* rate and burst, fixed or from args with their ceilings. */
static void put_limits(struct out *o, const struct cfg_rule *r)
{
    if (r->rate_arg) {
        put(o, "rate = arg:%s\n", r->rate_arg);
        put_rate(o, "max_rate", r->max_rate_n, r->max_rate_period_ms);
    } else {
        put_rate(o, "rate", r->rate_n, r->rate_period_ms);
    }
    if (r->burst_arg)
        put(o, "burst = arg:%s\n", r->burst_arg);
    else if (r->burst)
        put(o, "burst = %" PRIu64 "\n", r->burst);
    else
        put(o, "; burst: N of each request's rate, at most max_burst\n");
    if (r->max_burst)
        put(o, "max_burst = %" PRIu64 "\n", r->max_burst);
}

static void put_rule(struct out *o, const struct config *cfg, const struct cfg_rule *r)
{
    static const char *const modes[] = {"open", "closed"};
    static const char *const algos[] = {[BUCKET_TOKEN_BUCKET] = "token-bucket",
                                        [BUCKET_SLIDING_WINDOW] = "sliding-window"};

    put(o, "[rule:%s]\n", r->name);
    put(o, r->message ? "message = %s\n" : "; message: every message\n",
        r->message ? r->message : "");
    if (r->nkeys) {
        put(o, "key = ");
        for (size_t i = 0; i < r->nkeys; i++)
            put(o, "%s%s", i ? ", " : "", r->keys[i]);
        put(o, "\n");
    } else {
        put(o, "; no key: one bucket shared by every matching request (a global limit)\n");
    }
    for (size_t i = 0; i < r->nmatches; i++)
        put(o, "match = %s %s\n", r->matches[i].arg, r->matches[i].pattern);
    put_limits(o, r);
    put(o, "algorithm = %s\nlease = %s\n", algos[r->algorithm], yes_no(r->lease));
    put(o, "on_redis_down = %s\nshadow = %s%s\n\n", modes[r->on_redis_down], yes_no(r->shadow),
        cfg->shadow ? " ; [agent] shadow = yes" : "");
}

char *config_render(const struct config *cfg, size_t *len)
{
    static const char *const modes[] = {"open", "closed"};
    struct out o = {NULL, 0, 0, 0};

    put(&o, "; the effective configuration of %s, every default resolved\n\n", cfg->path);
    put_agent(&o, cfg);
    put_redis(&o, cfg);
    put(&o, "[fallback]\nmode = %s\n", modes[cfg->fallback_mode]);
    if (cfg->fallback_share == CFG_SHARE_AUTO)
        put(&o, "share = auto\n\n");
    else
        put(&o, "share = %g\n\n", cfg->fallback_share);
    for (size_t i = 0; i < cfg->nrules; i++)
        put_rule(&o, cfg, &cfg->rules[i]);
    if (o.oom || !o.p) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
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
