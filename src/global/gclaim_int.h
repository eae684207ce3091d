/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim_int.h - inside global/: the claimer's state, shared by gclaim.c
 * (notes, the lock, the regions, life, the admin entry points), which
 * calls gclaim_round.c (a round: the region's set, the regional buckets,
 * the global call), both above gclaim_keys.c (the key table, the calls in
 * flight). Never included from outside the folder. */
#ifndef GCLAIM_INT_H
#define GCLAIM_INT_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "global/gclaim.h"
#include "global/gplan.h"
#include "store/store.h"

#define GC_NOTE_MAX 4096   /* keys noted per interval (more wait for the next) */
#define GC_READ_MAX 10000  /* active keys one round reads */
#define GC_ACTIVE_MS (GPLAN_ACTIVE_US / 1000) /* a key not noted for this long leaves the set */
#define GC_REGIONS_MS 60000 /* a region without a round for this long is not counted */
#define GC_LOCK_ROUNDS 3   /* the lease lock's ttl, in intervals */
#define GC_MEMBER_MAX 512  /* "LIMIT:PERIOD:BURST:KEY": longer keys are not followed */
#define GC_SOON 0.005      /* s: a key new to this agent is noted this soon */
#define GC_POLL_MAX 0.1    /* s: the claimer looks for new keys at least this often */
#define GC_PROBE_MIN_US 100000 /* a round's wait for a probe of a global Redis known down */
#define GC_REGIONS_EVERY 10    /* ticks between an agent's reads of the regions, but the claimer's */

enum { PH_IDLE, PH_ACTIVE, PH_READ, PH_GLOBAL };

/* One key the claimer follows. */
struct gentry {
    struct gentry *next; /* hash chain */
    struct gclaim *g;
    struct gkey k;
    struct gstep step;
    uint64_t limit, period_ms, burst;
    unsigned seen_round; /* the round that last read it from the set */
    unsigned calls;      /* calls on it not answered: kept until none */
    unsigned pcalls;     /* of which regional (tb_pool): a round skips it until none */
    unsigned gen;        /* the round generation of its round calls (stale: ignored) */
    int64_t pamt;        /* the amount of its last tb_pool call (a round has one at a time) */
    size_t keylen;
    char key[]; /* after [redis] prefix */
};

struct gclaim {
    struct ev_loop *loop;
    struct store *reg, *glob;
    struct store_epoch *epoch; /* the global keyspace's: its loss named (global_state_lost) */
    ev_timer tick;
    int stopped;
    unsigned inflight; /* calls of ours not answered (either store) */
    int zombie;        /* gclaim_free came while calls were in flight */
    /* settings */
    uint64_t interval_us, ttl_us, timeout_us;
    double max_fraction;
    double reserve; /* [global] reserve */
    char *prefix, *gprefix, *agent;
    size_t prefix_len, gprefix_len;
    char region[64];
    /* notes: keys seen since the last flush (members, deduplicated) */
    char **notes;
    size_t nnotes;
    uint64_t *note_hash, *prev_hash; /* this interval's notes, the last flush's */
    size_t note_cap; /* slots of each, a power of two */
    ev_timer flush_soon; /* a key new to this agent goes out at once */
    ev_timer poll;       /* the claimer looks for keys new to the region */
    uint64_t poll_score; /* the newest note it has seen (Redis' ms) */
    /* the claimer's keys */
    struct gentry **tab;
    size_t tab_cap, nkeys;
    unsigned round;
    int in_round;    /* a round's calls are out */
    int phase;       /* of the round: PH_* */
    unsigned gen;    /* the round's generation: an abandoned round's replies are stale */
    ev_timer limit;  /* the round's phase must be answered by then */
    ev_timer soon;   /* a round before the next tick (gplan_next_us) */
    uint64_t reg_timeout_us;
    unsigned waits;  /* its calls not answered yet, this phase */
    int global_down; /* the last global call failed */
    uint64_t down_since_us; /* the global connection is down since (0: up) */
    unsigned ticks;
    int any_ok;      /* this round's global call got an answer */
    uint64_t sent_us;
    struct gentry **batch;
    size_t nbatch;
    struct gclaim_stats st;
};

/* gclaim_keys.c: below the other two, calling neither */
uint64_t gclaim_hash(const char *s, size_t n); /* FNV-1a, never 0 */
struct gplan_cfg gclaim_plan_cfg(const struct gclaim *g, const struct gentry *e);
/* A call of ours answered (e: on that key, or NULL); a regional (tb_pool)
 * call on e. 1: do nothing more (stopped; after gclaim_free, the last one
 * freed g). */
int gclaim_call_done(struct gclaim *g, struct gentry *e);
int gclaim_pool_done(struct gclaim *g, struct gentry *e);
struct gentry *gclaim_lookup(const struct gclaim *g, const char *key, size_t keylen);
struct gentry *gclaim_upsert(struct gclaim *g, const char *key, size_t keylen);
void gclaim_sweep(struct gclaim *g); /* forget the keys idle a while */
void gclaim_destroy(struct gclaim *g);

/* gclaim_round.c: called by gclaim.c (its timers, the lock, the notes) */
void gclaim_start_round(struct gclaim *g);
void gclaim_soon_cb(struct ev_loop *loop, ev_timer *w, int revents);
void gclaim_limit_cb(struct ev_loop *loop, ev_timer *w, int revents);

#endif
