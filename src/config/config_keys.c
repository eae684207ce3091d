/* SPDX-License-Identifier: Apache-2.0 */
/* config_keys.c - the key table: every key of every section, its type,
 * range and field (struct config or struct cfg_rule), and the lookups the
 * parser and the checks make in it. */
#include "config_internal.h"

#include <stddef.h>
#include <string.h>

#include "config.h"
#include "core/log.h"
#include "spop/spop.h"

#define MAX_PREFIX 64 /* [redis] prefix */

static const char *const mode_names[] = {"open", "closed", NULL};
/* [agent] charge: enum cfg_charge */
static const char *const charge_names[] = {
    [CHARGE_ALL_OR_NOTHING] = "all-or-nothing", [CHARGE_EACH] = "each", NULL};
static const char *const source_names[] = {
    [RULES_SOURCE_FILE] = "file", [RULES_SOURCE_REDIS] = "redis", NULL};
/* a rule's scope: enum cfg_scope */
static const char *const scope_names[] = {
    [SCOPE_REGION] = "region", [SCOPE_GLOBAL] = "global", NULL};

#define CF(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define PF(f) offsetof(struct config, f) /* the parsed form of an address key */
#define RF(f) offsetof(struct cfg_rule, f), sizeof(((struct cfg_rule *)0)->f)

static const struct key_def key_defs[] = {
    {SEC_AGENT, "listen", T_ADDR, CF(listen), 0, 0, 0, NULL, PF(listen_addr)},
    {SEC_AGENT, "workers", T_UINT, CF(workers), 1, MAX_WORKERS, 0, NULL, 0},
    {SEC_AGENT, "max_frame_size", T_UINT, CF(max_frame_size), SPOP_MIN_FRAME_SIZE,
     SPOP_MAX_FRAME_SIZE, 0, NULL, 0},
    {SEC_AGENT, "stats", T_ADDR, CF(stats), 0, 0, F_OPT, NULL, PF(stats_addr)},
    {SEC_AGENT, "log_level", T_ENUM, CF(log_level), 0, 0, 0, log_level_names, 0},
    {SEC_AGENT, "shadow", T_BOOL, CF(shadow), 0, 0, 0, NULL, 0},
    {SEC_AGENT, "allow", T_ALLOW, CF(allow), 0, 0, F_LIST, NULL, PF(nallow)},
    /* a 64-bit hash takes 16 hex digits: a smaller limit would lengthen keys */
    {SEC_AGENT, "max_key", T_UINT, CF(max_key), 16, 65536, 0, NULL, 0},
    {SEC_AGENT, "alert_share", T_SHARE, CF(alert_share), 0, 0, 0, NULL, 0},
    {SEC_AGENT, "max_connections", T_UINT, CF(max_connections), 1, 1000000, 0, NULL, 0},
    {SEC_AGENT, "max_handshakes", T_UINT, CF(max_handshakes), 1, 1000000, 0, NULL, 0},
    {SEC_AGENT, "hello_timeout", T_DUR, CF(hello_timeout_ms), 0, 0, 0, NULL, 0},
    /* the warning haproxy_never_asks: shorter than HAProxy's health checks
     * would page on every quiet second */
    {SEC_AGENT, "notify_silence", T_DUR, CF(notify_silence_ms), 1000, 0, F_ZERO, NULL, 0},
    {SEC_AGENT, "stats_allow", T_ALLOW, CF(stats_allow), 0, 0, F_LIST, NULL, PF(nstats_allow)},
    {SEC_AGENT, "stats_auth", T_STR, CF(stats_auth), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_AGENT, "stats_auth_file", T_STR, CF(stats_auth_file), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_AGENT, "stats_reset", T_BOOL, CF(stats_reset), 0, 0, 0, NULL, 0},
    {SEC_AGENT, "max_entries", T_UINT, CF(max_entries), 1, CFG_MAX_ENTRIES, 0, NULL, 0},
    {SEC_AGENT, "charge", T_ENUM, CF(charge), 0, 0, 0, charge_names, 0},
    {SEC_REDIS, "url", T_URL, CF(redis_url), 0, 0, 0, NULL, PF(redis_server)},
    {SEC_REDIS, "cluster", T_HOSTS, CF(redis_cluster), 0, 0, F_LIST, NULL, PF(redis_cluster_hosts)},
    {SEC_REDIS, "sentinel", T_HOSTS, CF(redis_sentinel), 0, 0, F_LIST, NULL,
     PF(redis_sentinel_hosts)},
    {SEC_REDIS, "master", T_STR, CF(redis_master), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_REDIS, "timeout", T_DUR, CF(redis_timeout_ms), 0, 0, 0, NULL, 0},
    /* more than 10 PINGs a second would be load, not keepalive (and the
     * store looks for idle connections every 50 ms) */
    {SEC_REDIS, "keepalive", T_DUR, CF(redis_keepalive_ms), 100, 0, F_ZERO, NULL, 0},
    /* the agent's master unconfirmed after this long without a sentinel; the
     * sentinels are asked every second: a shorter window would flap */
    {SEC_REDIS, "sentinel_window", T_DUR, CF(redis_sentinel_window_ms), 2000, 0, 0, NULL, 0},
    /* redis_errors clears after this long without an error reply: longer
     * than the reconnection backoff's 2 s cap, or a lasting refusal (one
     * probe per backoff) would flap it */
    {SEC_REDIS, "errors_quiet", T_DUR, CF(redis_errors_quiet_ms), 5000, 0, 0, NULL, 0},
    /* a check is one EVAL (16 on a Cluster): at most 10 a second */
    {SEC_REDIS, "epoch_check", T_DUR, CF(redis_epoch_check_ms), 100, 0, F_ZERO, NULL, 0},
    {SEC_REDIS, "prefix", T_STR, CF(redis_prefix), 0, MAX_PREFIX, 0, NULL, 0},
    {SEC_REDIS, "require_noeviction", T_BOOL, CF(redis_require_noeviction), 0, 0, 0, NULL, 0},
    {SEC_REDIS, "functions", T_BOOL, CF(redis_functions), 0, 0, 0, NULL, 0},
    {SEC_REDIS, "username", T_STR, CF(redis_username), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_REDIS, "password", T_STR, CF(redis_password), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_REDIS, "password_file", T_STR, CF(redis_password_file), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_REDIS, "sentinel_username", T_STR, CF(redis_sentinel_username), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_REDIS, "sentinel_password", T_STR, CF(redis_sentinel_password), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_LEASE, "interval", T_DUR, CF(lease_interval_ms), 0, 0, 0, NULL, 0},
    {SEC_LEASE, "ttl", T_DUR, CF(lease_ttl_ms), 0, 0, 0, NULL, 0},
    {SEC_LEASE, "max_fraction", T_SHARE, CF(lease_max_fraction), 0, 0, 0, NULL, 0},
    {SEC_LEASE, "rate_leases", T_BOOL, CF(lease_rate), 0, 0, 0, NULL, 0},
    {SEC_LEASE, "rate_ttl", T_DUR, CF(lease_rate_ttl_ms), 0, 0, 0, NULL, 0},
    {SEC_FALLBACK, "mode", T_ENUM, CF(fallback_mode), 0, 0, 0, mode_names, 0},
    {SEC_FALLBACK, "share", T_SHARE_AUTO, CF(fallback_share), 0, 0, 0, NULL, 0},
    {SEC_RULES, "source", T_ENUM, CF(rules_source), 0, 0, 0, source_names, 0},
    /* a GET of one small key per poll: more than 10 a second buys nothing */
    {SEC_RULES, "poll", T_DUR, CF(rules_poll_ms), 100, 0, 0, NULL, 0},
    {SEC_RULES, "cache", T_STR, CF(rules_cache), 0, 0, 0, NULL, 0},
    {SEC_RULES, "history", T_UINT, CF(rules_history), 1, 1000, 0, NULL, 0},
    {SEC_RULE, "message", T_STR, RF(message), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_RULE, "key", T_KEYS, 0, 0, 0, 0, F_LIST, NULL, 0},
    {SEC_RULE, "match", T_MATCH, 0, 0, 0, 0, F_LIST | F_MULTI, NULL, 0},
    {SEC_RULE, "rate", T_RATE, 0, 0, 0, 0, F_ARG, NULL, offsetof(struct cfg_rule, rate_arg)},
    {SEC_RULE, "burst", T_UINT, RF(burst), 1, CFG_MAX_COUNT, F_ARG, NULL,
     offsetof(struct cfg_rule, burst_arg)},
    {SEC_RULE, "max_rate", T_MAX_RATE, 0, 0, 0, 0, 0, NULL, 0},
    {SEC_RULE, "max_burst", T_UINT, RF(max_burst), 1, CFG_MAX_COUNT, 0, NULL, 0},
    {SEC_RULE, "cost", T_UINT, RF(cost), 0, CFG_MAX_COUNT, F_ARG, NULL,
     offsetof(struct cfg_rule, cost_arg)},
    {SEC_RULE, "max_cost", T_UINT, RF(max_cost), 1, CFG_MAX_COUNT, 0, NULL, 0},
    {SEC_RULE, "algorithm", T_ENUM, RF(algorithm), 0, 0, 0, bucket_algorithm_names, 0},
    {SEC_RULE, "window_offset", T_DUR, RF(window_offset_ms), 0, 0, F_ZERO, NULL, 0},
    {SEC_RULE, "lease", T_BOOL, RF(lease), 0, 0, 0, NULL, 0},
    /* a penalty box: 0 (off, the default) or any duration */
    {SEC_RULE, "block_for", T_DUR, RF(block_for_ms), 1, 0, F_ZERO, NULL, 0},
    {SEC_RULE, "on_redis_down", T_ENUM, RF(on_redis_down), 0, 0, 0, mode_names, 0},
    {SEC_RULE, "shadow", T_BOOL, RF(shadow), 0, 0, 0, NULL, 0},
    /* algorithm = concurrency */
    {SEC_RULE, "limit", T_UINT, RF(cc_limit), 1, CFG_MAX_CC_LIMIT, 0, NULL, 0},
    {SEC_RULE, "release", T_STR, RF(release), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_RULE, "max_hold", T_DUR, RF(max_hold_ms), 0, 0, 0, NULL, 0},
    /* the Host names the stats listener answers besides its own address
     * (http_host.h: the defence against DNS rebinding) */
    {SEC_AGENT, "stats_hosts", T_NAMES, CF(stats_hosts), 0, 0, F_LIST, NULL, 0},
    /* an HAProxy connection is idle up to its SPOE `timeout idle`: shorter
     * than a second would close live ones (at most CFG_MAX_IDLE_GRACE_MS,
     * checked in config_check.c) */
    {SEC_AGENT, "idle_grace", T_DUR, CF(idle_grace_ms), 1000, 0, 0, NULL, 0},
    /* [global] (v1.2): the Redis of every region's scope = global rules;
     * its connection keys are [redis]'s, parsed alike */
    {SEC_GLOBAL, "url", T_URL, CF(global_url), 0, 0, 0, NULL, PF(global_server)},
    {SEC_GLOBAL, "cluster", T_HOSTS, CF(global_cluster), 0, 0, F_LIST, NULL,
     PF(global_cluster_hosts)},
    {SEC_GLOBAL, "sentinel", T_HOSTS, CF(global_sentinel), 0, 0, F_LIST, NULL,
     PF(global_sentinel_hosts)},
    {SEC_GLOBAL, "master", T_STR, CF(global_master), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_GLOBAL, "timeout", T_DUR, CF(global_timeout_ms), 0, 0, 0, NULL, 0},
    {SEC_GLOBAL, "keepalive", T_DUR, CF(global_keepalive_ms), 100, 0, F_ZERO, NULL, 0},
    {SEC_GLOBAL, "prefix", T_STR, CF(global_prefix), 0, MAX_PREFIX, 0, NULL, 0},
    {SEC_GLOBAL, "username", T_STR, CF(global_username), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_GLOBAL, "password", T_STR, CF(global_password), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_GLOBAL, "password_file", T_STR, CF(global_password_file), 0, 0, F_NONEMPTY, NULL, 0},
    {SEC_GLOBAL, "sentinel_username", T_STR, CF(global_sentinel_username), 0, 0, F_NONEMPTY, NULL,
     0},
    {SEC_GLOBAL, "sentinel_password", T_STR, CF(global_sentinel_password), 0, 0, F_NONEMPTY, NULL,
     0},
    /* a global call per interval per region: more than 10 a second buys
     * nothing a far Redis can answer in time */
    {SEC_GLOBAL, "interval", T_DUR, CF(global_interval_ms), 100, 0, 0, NULL, 0},
    {SEC_GLOBAL, "max_fraction", T_SHARE, CF(global_max_fraction), 0, 0, 0, NULL, 0},
    /* the share of each key's burst set aside for the regions' reserves
     * (doc/design.md "The reserve"); at most 1/2 (config_check.c) */
    {SEC_GLOBAL, "reserve", T_SHARE, CF(global_reserve), 0, 0, F_ZERO, NULL, 0},
    /* checked at the end of the file (config_check.c: its characters, its default) */
    {SEC_GLOBAL, "region", T_STR, CF(global_region), 0, CFG_MAX_REGION, F_NONEMPTY, NULL, 0},
    {SEC_RULE, "scope", T_ENUM, RF(scope), 0, 0, 0, scope_names, 0},
};

#define NKEYS (sizeof(key_defs) / sizeof(key_defs[0]))

_Static_assert(NKEYS == CONFIG_NKEYS, "CONFIG_NKEYS in config_internal.h must count key_defs");

const struct key_def *config_find_key(int section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (key_defs[i].section == section && strcmp(key_defs[i].name, name) == 0)
            return &key_defs[i];
    }
    return NULL;
}

const struct key_def *config_key_at(size_t i)
{
    return &key_defs[i];
}

size_t config_key_index(const struct key_def *d)
{
    return (size_t)(d - key_defs);
}

unsigned config_seen_line(const struct parse_state *st, int section, const char *name)
{
    return st->seen[config_find_key(section, name) - key_defs];
}
