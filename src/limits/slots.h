/* SPDX-License-Identifier: Apache-2.0 */
/* slots.h - concurrency slots in memory: at most limit slots held per
 * (rule, key), each freed by its release or at its deadline (max_hold).
 * Exact for one agent: standalone, and the local share while Redis is down.
 *
 * Time is passed in (microseconds, monotonic), never read here. No I/O.
 * Thread-safe (one mutex: every operation is short, correctness first).
 */
#ifndef SLOTS_H
#define SLOTS_H

#include <stddef.h>
#include <stdint.h>

struct slot_table;

struct slot_table *slot_table_new(void);
void slot_table_free(struct slot_table *t);

/* A new slot id: unique in this process, unpredictable, never 0. */
uint64_t slots_new_id(void);

/* What a take did. */
struct slot_take {
    int allowed;
    uint64_t held;     /* slots held after the take (unexpired) */
    uint64_t expired;  /* slots found past their deadline and freed */
    uint64_t retry_us; /* denied: until the earliest deadline, at most 1 s */
};

/* Take slot id for (rule, key) when fewer than limit are held at now_us; it
 * frees itself at now_us + hold_us. 0, or -1 when out of memory (denied
 * then). */
int slot_table_take(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                    uint64_t limit, uint64_t hold_us, uint64_t id, uint64_t now_us,
                    struct slot_take *out);

/* Free slot id: 1 when it was held (unexpired), 0 when unknown. */
int slot_table_release(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                       uint64_t id, uint64_t now_us);

/* The slots of (rule, key) at now_us: how many are held and the earliest
 * deadline's distance (0 when none). Expired ones are dropped (counted in
 * *expired when not NULL). */
uint64_t slot_table_peek(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                         uint64_t now_us, uint64_t *earliest_us, uint64_t *expired);

/* Free every slot of (rule, key): how many were held. */
uint64_t slot_table_reset(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                          uint64_t now_us);

/* Free the expired slots of every entry and drop the entries left empty;
 * on_expired (may be NULL) is told how many slots of a rule expired, with
 * the table locked (it must not call into the table). Returns the slots
 * freed. */
typedef void slot_expired_cb(void *ctx, const char *rule, uint64_t n);
uint64_t slot_table_expire(struct slot_table *t, uint64_t now_us, slot_expired_cb *on_expired,
                           void *ctx);

/* Slots held in the table (expired ones not yet dropped included). */
size_t slot_table_count(struct slot_table *t);

#endif
