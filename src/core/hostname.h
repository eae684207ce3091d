/* SPDX-License-Identifier: Apache-2.0 */
/* hostname.h - "name[:port]" as a Host header or an [agent] stats_hosts
 * item holds it: taken apart and checked (a DNS name or an IP address, a
 * port of 1 to 65535), written lowercase. Pure: the config checks
 * stats_hosts with it, the stats listener its requests' Host (http_host.h). */
#ifndef HOSTNAME_H
#define HOSTNAME_H

#include <stddef.h>

/* Longest stats_hosts item kept, NUL included (a DNS name is at most 253
 * bytes, then ":65535"). */
#define HOSTNAME_ITEM_MAX 264

/* "name[:port]" or "[v6][:port]" taken apart: the name without brackets
 * (pointing into v) and its length, the port (0: none). -1 when v is not
 * that: an empty name, a character a host name or address cannot hold, a
 * port that is not 1 to 65535, brackets around something else than a v6
 * address. */
int hostname_split(const char *v, size_t len, const char **name, size_t *nlen, unsigned *port);

/* One item of [agent] stats_hosts checked and written lowercase into out
 * (cap bytes): 0, or -1 when it is not a host name or address with an
 * optional :port (hostname_split) or longer than cap. */
int hostname_item(const char *item, char *out, size_t cap);

#endif
