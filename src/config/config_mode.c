/* SPDX-License-Identifier: Apache-2.0 */
/* config_mode.c - what a loaded configuration is (config.h): standalone
 * (no [redis] server), with a [global] Redis, and the name of its region
 * when [global] region is not set. Asked by the checks, the agent and the
 * tools; calls nothing else of the folder. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/net.h"

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
