/* SPDX-License-Identifier: Apache-2.0 */
/* store_info_parse.h - the fields of an INFO reply that say whether a Redis
 * can evict the agent's keys (see store_info.h), and the verdict. Pure
 * (libcore), so that unit tests reach it.
 */
#ifndef STORE_INFO_PARSE_H
#define STORE_INFO_PARSE_H

#include <stddef.h>
#include <stdint.h>

struct store_info_mem {
    uint64_t maxmemory; /* 0: no limit */
    char policy[32];    /* maxmemory_policy, "" when absent */
    uint64_t evicted_keys;
    int has_maxmemory, has_policy, has_evicted;
};

/* Read maxmemory, maxmemory_policy and evicted_keys out of INFO's text
 * ("name:value" lines, CRLF or LF). Fields absent stay unset (has_* 0). */
void store_info_parse(const char *text, size_t len, struct store_info_mem *out);

/* 1 when a server with these settings can evict the agent's keys:
 * maxmemory > 0 and a policy other than noeviction (allkeys-*, volatile-*;
 * an unknown policy counts as evicting). */
int store_info_can_evict(const struct store_info_mem *m);

#endif
