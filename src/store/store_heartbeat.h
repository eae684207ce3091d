/* SPDX-License-Identifier: Apache-2.0 */
/* store_heartbeat.h - every agent says it is alive in Redis, and counts the
 * agents that do: the fleet size behind [fallback] share = auto (fleet.h)
 * and the gauge fleet_agents. A client of the store above it, through
 * store.h alone (store_read, store_up, store_on_state): main.c makes it
 * beside the limiter's store; the store knows nothing of it.
 *
 * One sorted set per prefix, PREFIX "agents": a member per agent, "host=H
 * pid=P listen=L", scored by the time of its last beat (Redis' clock, in
 * ms). Every STORE_HEARTBEAT_EVERY the agent sends one EVAL that drops the
 * members older than STORE_HEARTBEAT_LIVE, sets its own, and answers how
 * many remain, with the fleet's count of clean departures (PREFIX "agents"
 * wrapped in a hash tag, ":left"; an agent stopping cleanly removes its
 * member and adds one: fleet.h takes the departures off N at once). One
 * hash slot, so it works on Redis Cluster too; one
 * command every five seconds per agent, none per decision. While Redis is down
 * no beat goes out and the last count stays. The count goes to fleet.h,
 * which keeps the largest over a window (the N of share = auto); counts
 * read within STORE_HEARTBEAT_REBUILD_US of Redis coming up never lower it.
 */
#ifndef STORE_HEARTBEAT_H
#define STORE_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#define STORE_HEARTBEAT_EVERY 5.0  /* seconds between two beats */
#define STORE_HEARTBEAT_LIVE 20000 /* ms: an agent not heard from for this long is gone */
/* us after Redis came up during which the set may still be filling up (an
 * empty restart, FLUSHDB): two beats, by then every agent up has beaten */
#define STORE_HEARTBEAT_REBUILD_US 10000000ULL
/* The fleet's rows (the status page's fleet table): each beat writes this
 * agent's row, its counters as a JSON object of at most
 * STORE_HEARTBEAT_ROW_MAX bytes, into a hash beside the set (PREFIX
 * "agents" in a hash tag, ":stats", expiring with the live window, a field
 * per member, dropped with the member), and answers the rows of the
 * STORE_HEARTBEAT_ROWS agents last heard from: a beat's reply stays under
 * STORE_HEARTBEAT_ROWS * (STORE_HEARTBEAT_ROW_MAX + 400) bytes. */
#define STORE_HEARTBEAT_ROWS 256
#define STORE_HEARTBEAT_ROW_MAX 1024
#define STORE_HEARTBEAT_ROW_MAX_S "1024"

struct ev_loop;
struct store;
struct store_heartbeat;

/* Beats for this agent (listen: its SPOP address as configured) under prefix
 * on s: every STORE_HEARTBEAT_EVERY, and at once whenever s comes up (it
 * watches s with store_on_state). NULL when out of memory. */
struct store_heartbeat *store_heartbeat_new(struct ev_loop *loop, struct store *s,
                                            const char *prefix, const char *listen);

/* The set was lost under a live connection (the keyspace's epoch said so:
 * FLUSHDB/FLUSHALL, a restart seen only now): the counts of the next
 * STORE_HEARTBEAT_REBUILD_US are read as the set's rebuild, as after Redis
 * came up, and can raise the fleet's N but never lower it. Beats at once. */
void store_heartbeat_rebuilding(struct store_heartbeat *hb); /* NULL no-op */

/* Stop beating: before the store is freed (a beat in flight then completes
 * with STORE_DOWN). store_heartbeat_free() after the store is freed, since
 * the store calls its watcher until then. */
void store_heartbeat_stop(struct store_heartbeat *hb); /* NULL no-op */

/* Stop beating and leave the fleet (a clean stop): the member removed and
 * the departures counted, sent when Redis is up (store_pending() counts it
 * until answered). NULL no-op. */
void store_heartbeat_leave(struct store_heartbeat *hb);
void store_heartbeat_free(struct store_heartbeat *hb); /* NULL no-op */

/* One live agent as the last beat's reply had it: member ("host=H pid=P
 * listen=L"), row (its JSON text as the agent wrote it: parse it as
 * untrusted), when Redis last heard from it, and whether it is this agent. */
struct store_heartbeat_row {
    const char *member;
    const char *row;
    size_t row_len;
    uint64_t seen_ms; /* Redis' clock, ms */
    uint64_t ago_ms;  /* seen this long before the beat (store_heartbeat_rows sets it) */
    int self;
};

/* The last beat's rows (*rows, valid until the next beat's reply: read them
 * on the loop thread, within one callback), newest first; *age_ms: how long
 * ago that reply came, UINT64_MAX when no beat answered yet (0 rows; hb
 * NULL too). */
size_t store_heartbeat_rows(const struct store_heartbeat *hb,
                            const struct store_heartbeat_row **rows, uint64_t *age_ms);

/* Which beat's reply the rows are from (changes at each reply; 0: none
 * yet, or hb NULL): a reader that keeps what it made of them knows when to
 * make it again. */
uint64_t store_heartbeat_beat(const struct store_heartbeat *hb);

#endif
