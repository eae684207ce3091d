/* SPDX-License-Identifier: Apache-2.0 */
/* store_options.c - the store's settings from the config
 * (store_options_from_config, store.h): the one file of the store that reads
 * struct config, so that the store itself works from struct store_options
 * and its clocks are derived from [redis] timeout and keepalive in one place;
 * and the same from [global] (store_options_from_global) for the store a
 * region's claimer opens to the global Redis.
 */
#include "store.h"

#include <string.h>

#include "config/config.h"

/* A connection whose oldest command (or connect) waits past 10 x timeout,
 * and at least 1 s, is stuck: the watchdog gives it up. */
#define DEAD_AFTER_TIMEOUTS 10
#define DEAD_AFTER_MIN_US 1000000

static void set_dead_after(struct store_options *o)
{
    o->dead_after_us = o->timeout_us * DEAD_AFTER_TIMEOUTS;
    if (o->dead_after_us < DEAD_AFTER_MIN_US)
        o->dead_after_us = DEAD_AFTER_MIN_US;
}

void store_options_from_config(const struct config *cfg, struct store_options *o)
{
    memset(o, 0, sizeof(*o));
    o->cluster = cfg->redis_cluster_hosts.list;
    o->ncluster = cfg->redis_cluster_hosts.n;
    o->sentinels = cfg->redis_sentinel_hosts.list;
    o->nsentinels = cfg->redis_sentinel_hosts.n;
    o->master = cfg->redis_master;
    o->server = &cfg->redis_server.addr;
    o->db = cfg->redis_server.db;
    o->user = cfg->redis_auth_user;
    o->password = cfg->redis_auth_password;
    o->sentinel_user = cfg->redis_sentinel_username;
    o->sentinel_password = cfg->redis_sentinel_password;
    o->prefix = cfg->redis_prefix ? cfg->redis_prefix : "";
    o->require_noeviction = cfg->redis_require_noeviction;
    o->functions = cfg->redis_functions;
    o->timeout_us = cfg->redis_timeout_ms * 1000;
    o->keepalive_us = cfg->redis_keepalive_ms * 1000;
    o->sentinel_window_us = cfg->redis_sentinel_window_ms * 1000;
    o->errors_quiet_us = cfg->redis_errors_quiet_ms * 1000;
    set_dead_after(o);
}

void store_options_from_global(const struct config *cfg, struct store_options *o)
{
    memset(o, 0, sizeof(*o));
    o->cluster = cfg->global_cluster_hosts.list;
    o->ncluster = cfg->global_cluster_hosts.n;
    o->sentinels = cfg->global_sentinel_hosts.list;
    o->nsentinels = cfg->global_sentinel_hosts.n;
    o->master = cfg->global_master;
    o->server = &cfg->global_server.addr;
    o->db = cfg->global_server.db;
    o->user = cfg->global_auth_user;
    o->password = cfg->global_auth_password;
    o->sentinel_user = cfg->global_sentinel_username;
    o->sentinel_password = cfg->global_sentinel_password;
    o->prefix = cfg->global_prefix ? cfg->global_prefix : "";
    o->timeout_us = cfg->global_timeout_ms * 1000;
    o->keepalive_us = cfg->global_keepalive_ms * 1000;
    /* [global] has no keys of its own for these: [redis]'s */
    o->require_noeviction = cfg->redis_require_noeviction;
    o->functions = cfg->redis_functions;
    o->sentinel_window_us = cfg->redis_sentinel_window_ms * 1000;
    o->errors_quiet_us = cfg->redis_errors_quiet_ms * 1000;
    set_dead_after(o);
    o->secondary = 1;
}
