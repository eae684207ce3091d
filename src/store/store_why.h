/* SPDX-License-Identifier: Apache-2.0 */
/* store_why.h - why Redis is down, by name: the last reason a connection of
 * the store failed, or Redis refused it, kept for /status.json and the
 * status page's "Redis down" banner (status.c reads it; the store notes it).
 *
 * A reason is the text the store logs: an error reply ("WRONGPASS invalid
 * username-password pair...", "AUTH: NOAUTH ...", "SCRIPT LOAD: NOPERM ..."),
 * hiredis' socket error ("Connection refused"), or the store's own words
 * ("connect timed out", "ROLE is slave, not master"). Its name is short and
 * stable (never renamed: operators alert on it):
 *
 *   - an error reply: its code as Redis names it, the first word of the
 *     reply (WRONGPASS, NOAUTH, NOPERM, READONLY, MASTERDOWN, LOADING, OOM,
 *     NOREPLICAS, CLUSTERDOWN, BUSY, ERR, ...); "Protocol error:
 *     unauthenticated" (Redis closing on a long command before AUTH) is
 *     NOAUTH;
 *   - otherwise one of connection_refused, timeout, connection_reset,
 *     closed, host_unreachable, network_unreachable, no_such_socket,
 *     permission_denied, name_lookup, no_address, not_master,
 *     master_unconfirmed, bad_reply, reply_too_large, NOSCRIPT (scripts that
 *     do not stay loaded), or error (none of these: the detail says).
 *
 * The record is the process's (the last of every store and connection),
 * thread-safe. Deliberate reconnects (a reload, a failover's new address)
 * and the credential trial (store_auth_trial.h) are not noted.
 */
#ifndef STORE_WHY_H
#define STORE_WHY_H

#include <stddef.h>
#include <stdint.h>

#define STORE_WHY_NAME_MAX 32
#define STORE_WHY_DETAIL_MAX 256
#define STORE_WHY_ADDR_MAX 300

/* The name of a reason (see the top) into out. Pure. */
void store_why_name(const char *why, char *out, size_t outlen);

/* The last reason noted. */
struct store_why {
    char name[STORE_WHY_NAME_MAX];
    char detail[STORE_WHY_DETAIL_MAX]; /* the reason's text, cut */
    char addr[STORE_WHY_ADDR_MAX];     /* host:port or path it came from */
    int64_t at_ms;                     /* wall clock, Unix milliseconds */
};

/* Note a failure of the connection to addr (host:port or path), why: its
 * reason. Thread-safe. */
void store_why_note(const char *addr, const char *why);

/* The last reason noted into out: 1, or 0 none yet (out zeroed). */
int store_why_last(struct store_why *out);

/* Forget it (tests). */
void store_why_reset(void);

#endif
