/* SPDX-License-Identifier: Apache-2.0 */
/* config_page.c - GET /config: the configuration in force, with its header. */
#include "config_page.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/strbuf.h"

#define VALUE_MAX 1024

/* How one restart-only setting reads: its raw value (compared: a password
 * change counts) and what the page shows (a password masked). */
typedef void setting_fn(const struct config *cfg, char *raw, char *shown, size_t cap);

static void str_value(const char *v, char *raw, char *shown, size_t cap)
{
    snprintf(raw, cap, "%s", v ? v : "");
    snprintf(shown, cap, "%s", v ? v : "");
}

static void num_value(uint64_t v, const char *unit, char *raw, char *shown, size_t cap)
{
    snprintf(raw, cap, "%" PRIu64 "%s", v, unit);
    snprintf(shown, cap, "%" PRIu64 "%s", v, unit);
}

static void s_listen(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->listen, r, s, n);
}

static void s_workers(const struct config *c, char *r, char *s, size_t n)
{
    num_value((uint64_t)c->workers, "", r, s, n);
}

static void s_frame(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->max_frame_size, "", r, s, n);
}

static void s_stats(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->stats, r, s, n);
}

/* A reload applies a new url (a reconnect, as after a Redis restart): only
 * adding or removing one changes the topology and waits for a restart. The
 * page shows it as --print does, the password as "***". */
static void s_url(const struct config *c, char *r, char *s, size_t n)
{
    const char *url = c->redis_url ? c->redis_url : "", *at = strrchr(url, '@');
    const char *colon =
        at && strlen(url) > 8 ? memchr(url + 8, ':', (size_t)(at - (url + 8))) : NULL;

    str_value(url, r, s, n);
    snprintf(r, n, "%s", c->redis_url ? "url" : "");
    if (c->redis_server.password && colon)
        snprintf(s, n, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

static void s_cluster(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->redis_cluster, r, s, n);
}

static void s_sentinel(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->redis_sentinel, r, s, n);
}

static void s_master(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->redis_master, r, s, n);
}

static void s_timeout(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->redis_timeout_ms, "ms", r, s, n);
}

static void s_keepalive(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->redis_keepalive_ms, "ms", r, s, n);
}

static void s_epoch_check(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->redis_epoch_check_ms, "ms", r, s, n);
}

static void s_prefix(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->redis_prefix, r, s, n);
}

static void s_interval(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->lease_interval_ms, "ms", r, s, n);
}

static void s_ttl(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->lease_ttl_ms, "ms", r, s, n);
}

static void s_fraction(const struct config *c, char *r, char *s, size_t n)
{
    snprintf(r, n, "%.17g", c->lease_max_fraction);
    snprintf(s, n, "%g", c->lease_max_fraction);
}

static void s_rate(const struct config *c, char *r, char *s, size_t n)
{
    snprintf(r, n, "%d", c->lease_rate);
    snprintf(s, n, "%s", c->lease_rate ? "on" : "off");
}

static void s_rate_ttl(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->lease_rate_ttl_ms, "ms", r, s, n);
}

/* [global] (v1.2): as [redis], a reload may apply a new url (only adding
 * or removing one changes the topology) and credentials, through
 * store_reconfigure() with store_options_from_global(); the rest is made
 * once, at start, with the claimer's store. The region is the holder of
 * the global buckets: a new name would hold them twice. */
static void s_global_url(const struct config *c, char *r, char *s, size_t n)
{
    const char *url = c->global_url ? c->global_url : "", *at = strrchr(url, '@');
    const char *colon =
        at && strlen(url) > 8 ? memchr(url + 8, ':', (size_t)(at - (url + 8))) : NULL;

    str_value(url, r, s, n);
    snprintf(r, n, "%s", c->global_url ? "url" : "");
    if (c->global_server.password && colon)
        snprintf(s, n, "%.*s***%s", (int)(colon + 1 - url), url, at);
}

static void s_global_cluster(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->global_cluster, r, s, n);
}

static void s_global_sentinel(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->global_sentinel, r, s, n);
}

static void s_global_master(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->global_master, r, s, n);
}

static void s_global_timeout(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->global_timeout_ms, "ms", r, s, n);
}

static void s_global_keepalive(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->global_keepalive_ms, "ms", r, s, n);
}

static void s_global_prefix(const struct config *c, char *r, char *s, size_t n)
{
    str_value(config_global(c) ? c->global_prefix : NULL, r, s, n);
}

static void s_global_interval(const struct config *c, char *r, char *s, size_t n)
{
    num_value(config_global(c) ? c->global_interval_ms : 0, "ms", r, s, n);
}

static void s_global_fraction(const struct config *c, char *r, char *s, size_t n)
{
    double f = config_global(c) ? c->global_max_fraction : 0;

    snprintf(r, n, "%.17g", f);
    snprintf(s, n, "%g", f);
}

static void s_global_region(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->global_region, r, s, n);
}

/* [rules]: the rule store is made once, at start (rules_redis.h). */
static void s_source(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->rules_source == RULES_SOURCE_REDIS ? "redis" : "file", r, s, n);
}

static void s_poll(const struct config *c, char *r, char *s, size_t n)
{
    num_value(c->rules_poll_ms, "ms", r, s, n);
}

static void s_cache(const struct config *c, char *r, char *s, size_t n)
{
    str_value(c->rules_cache ? c->rules_cache : "", r, s, n);
}

/* What only a restart changes: the listeners and threads are made once, and
 * so are the Redis topology, the lease cache and the rule store. (A reload applies a new
 * url, username and password: store_reconfigure.) */
static const struct {
    const char *name;
    setting_fn *fn;
} settings[] = {
    {"listen", s_listen},
    {"workers", s_workers},
    {"max_frame_size", s_frame},
    {"stats", s_stats},
    {"[redis] url", s_url},
    {"[redis] cluster", s_cluster},
    {"[redis] sentinel", s_sentinel},
    {"[redis] master", s_master},
    {"[redis] timeout", s_timeout},
    {"[redis] keepalive", s_keepalive},
    {"[redis] epoch_check", s_epoch_check},
    {"[redis] prefix", s_prefix},
    {"[global] url", s_global_url},
    {"[global] cluster", s_global_cluster},
    {"[global] sentinel", s_global_sentinel},
    {"[global] master", s_global_master},
    {"[global] timeout", s_global_timeout},
    {"[global] keepalive", s_global_keepalive},
    {"[global] prefix", s_global_prefix},
    {"[global] interval", s_global_interval},
    {"[global] max_fraction", s_global_fraction},
    {"[global] region", s_global_region},
    {"[lease] interval", s_interval},
    {"[lease] ttl", s_ttl},
    {"[lease] max_fraction", s_fraction},
    {"[lease] rate_leases", s_rate},
    {"[lease] rate_ttl", s_rate_ttl},
    {"[rules] source", s_source},
    {"[rules] poll", s_poll},
    {"[rules] cache", s_cache},
};

size_t config_page_pending(const struct config *in_force, const struct config *file,
                           void (*fn)(void *ctx, const char *name, const char *in_force,
                                      const char *file),
                           void *ctx)
{
    char raw_a[VALUE_MAX], raw_b[VALUE_MAX], shown_a[VALUE_MAX], shown_b[VALUE_MAX];
    size_t n = 0;

    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        settings[i].fn(in_force, raw_a, shown_a, sizeof(raw_a));
        settings[i].fn(file, raw_b, shown_b, sizeof(raw_b));
        if (strcmp(raw_a, raw_b) == 0)
            continue;
        n++;
        if (fn)
            fn(ctx, settings[i].name, shown_a, shown_b);
    }
    return n;
}

static void pending_line(void *ctx, const char *name, const char *in_force, const char *file)
{
    strbuf_printf(ctx, ";   %s = %s in force; the file says %s\n", name, in_force, file);
}

char *config_page_render(const struct config *in_force, const struct config *file,
                         uint64_t loaded_unix, size_t *len)
{
    struct strbuf pg = STRBUF_INIT;
    char hash[64], when[64], unix_s[32];
    time_t t = (time_t)loaded_unix;
    struct tm tm;
    size_t body_len;
    char *body = config_render(file, &body_len);

    if (!body)
        return NULL;
    snprintf(hash, sizeof(hash), "%" PRIu64, (uint64_t)(config_hash(file) & ((1ULL << 53) - 1)));
    if (!gmtime_r(&t, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof(when), "?");
    snprintf(unix_s, sizeof(unix_s), "%" PRIu64, loaded_unix);
    strbuf_printf(&pg, "; GET /config: the configuration in force\n");
    strbuf_printf(&pg, "; config_hash = %s (the spoa_ratelimit_config_hash gauge)\n", hash);
    strbuf_printf(&pg, "; loaded = %s (unix %s)\n", when, unix_s);
    if (config_page_pending(in_force, file, NULL, NULL) == 0) {
        strbuf_printf(&pg, "; restart pending: none\n");
    } else {
        strbuf_printf(&pg,
                      "; restart pending: the file changed settings only a restart applies:\n");
        config_page_pending(in_force, file, pending_line, &pg);
    }
    strbuf_put(&pg, "\n", 1);
    strbuf_put(&pg, body, body_len);
    free(body);
    return strbuf_finish(&pg, len);
}
