/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h - process-wide counters, gauges and histograms, rendered in the
 * Prometheus text format 0.0.4; per-rule decision counters; a heavy-hitters
 * sketch of blocked clients per rule (for GET /top; metrics_top.c).
 *
 * Counters are relaxed atomics: exact under concurrency, no locks on the
 * request path. Per-rule records are created on first use and live until exit
 * (their number is bounded by the rule names ever configured).
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_HIST_BUCKETS 15
#define METRICS_TOP_K 16                           /* clients kept per rule and period */
#define METRICS_TOP_PERIOD_US (60ull * 1000000ull) /* sketches rotate every minute */
#define METRICS_TOP_KEY_MAX 64                     /* bytes of a client key kept in the sketch */

struct metrics_hist {
    atomic_uint_fast64_t buckets[METRICS_HIST_BUCKETS]; /* non-cumulative; _count is their sum */
    atomic_uint_fast64_t sum_ns;
};

struct top_entry {
    char key[METRICS_TOP_KEY_MAX + 1];
    size_t len; /* keys may hold NUL bytes (binary args) */
    uint64_t count;
    uint64_t error;          /* Space-Saving over-estimate bound */
    uint64_t retry_until_us; /* monotonic: the latest block's retry time */
};

struct top_sketch {
    struct top_entry e[METRICS_TOP_K];
    unsigned n;
};

struct metrics_rule {
    char name[48];
    atomic_uint_fast64_t allowed;
    atomic_uint_fast64_t blocked;
    atomic_uint_fast64_t would_block;
    atomic_uint_fast64_t degraded;
    /* requests denied because their cost exceeds the bucket's capacity (they
     * can never pass), and when that was last logged (at most every 10 s) */
    atomic_uint_fast64_t cost_over_burst;
    atomic_uint_fast64_t cost_over_logged_us;
    /* denials that started a penalty box (block_for), as this agent saw them */
    atomic_uint_fast64_t blocks_started;
    /* tokens given back because another rule blocked the request ([agent]
     * charge = all-or-nothing) */
    atomic_uint_fast64_t refunded;
    /* tokens the backstop admitted while Redis did not decide, charged back
     * to Redis once it answered (lease_fallback_note, lease_reply) */
    atomic_uint_fast64_t fallback_repaid;
    /* algorithm = concurrency: slots this agent took and has not seen
     * released or expired (a gauge: its view only, a release may reach
     * another agent), releases by result, slots freed by max_hold */
    atomic_int_fast64_t slots_held;
    atomic_uint_fast64_t slots_released_ok, slots_released_unknown;
    atomic_uint_fast64_t slots_expired;
    /* last-minute share of blocks, for the alert log line: the counts
     * above at the last minute tick (only that tick reads and sets them) */
    uint64_t minute_decisions;
    uint64_t minute_blocks;       /* blocked (enforcing) */
    uint64_t minute_would_blocks; /* would_block (shadow) */
    /* would-be blocks of a shadow rule since the last shadow log line */
    atomic_uint_fast64_t shadow_pending;
    /* blocked clients: the current and the previous minute */
    void *top_lock; /* pthread_mutex_t, opaque here */
    struct top_sketch top_cur, top_prev;
    uint64_t top_period_start_us;
    struct metrics_rule *next;
};

enum metrics_listener { METRICS_SPOP = 0, METRICS_STATS = 1, METRICS_LISTENERS = 2 };
enum metrics_refusal {
    METRICS_REFUSED_ALLOW = 0,     /* peer outside the allow list */
    METRICS_REFUSED_MAX_CONNS = 1, /* the connection cap, with nothing to evict */
    /* accepted, then closed to admit a newer connection: it was still in its
     * handshake (SPOP: no HELLO yet; stats: no whole request) when a cap
     * was reached, and the oldest such */
    METRICS_REFUSED_HANDSHAKE_EVICTED = 2,
    /* SPOP: past its HELLO, then no whole frame for [agent] idle_grace, and
     * the connection idle the longest when max_connections was reached */
    METRICS_REFUSED_IDLE_EVICTED = 3,
    METRICS_REFUSALS = 4,
};

enum metrics_timeout {
    METRICS_TIMEOUT_HELLO = 0, /* SPOP: no HAPROXY-HELLO in time */
    METRICS_TIMEOUT_DRAIN = 1, /* SPOP: the peer half-closed; answers not all out in time */
    METRICS_TIMEOUT_STATS = 2, /* stats: no whole request (or response read) in time */
    METRICS_TIMEOUTS = 3,
};

/* SPOP frames received, by type: HAProxy's frame types keep their number
 * (spop_conn.c checks that they match enum spop_frame_type); any other is
 * counted as METRICS_FRAME_OTHER. */
enum metrics_frame {
    METRICS_FRAME_OTHER = 0,
    METRICS_FRAME_HELLO = 1,
    METRICS_FRAME_DISCONNECT = 2,
    METRICS_FRAME_NOTIFY = 3,
    METRICS_FRAMES = 4,
};

/* Connections closed on a protocol error, by SPOE status code: 1..13 at
 * their number (enum spop_status; spop_conn.c checks the last), 99 and any
 * other at 0. */
#define METRICS_STATUSES 14

/* Error replies from Redis, by kind (spoa_ratelimit_redis_error_replies_total;
 * store_errors.h tells them apart). */
enum metrics_redis_error {
    METRICS_REDIS_READONLY = 0,    /* a replica: not the master */
    METRICS_REDIS_MASTERDOWN,      /* a replica that lost its master */
    METRICS_REDIS_NOPERM,          /* the ACL user may not run a command or touch a key */
    METRICS_REDIS_OOM,             /* maxmemory reached, nothing to evict */
    METRICS_REDIS_NOAUTH,          /* a password is needed */
    METRICS_REDIS_WRONGPASS,       /* the user or password was refused */
    METRICS_REDIS_NOSCRIPT,        /* Redis lost the scripts (reloaded at once) */
    METRICS_REDIS_NOREPLICAS,      /* fewer replicas than min-replicas-to-write */
    METRICS_REDIS_LOADING,         /* Redis is loading its data set */
    METRICS_REDIS_TRYAGAIN,        /* Cluster: a multi-key call during a slot migration */
    METRICS_REDIS_CLUSTERDOWN,     /* Cluster: the slot is not served */
    METRICS_REDIS_BUSY,            /* a script runs past lua-time-limit */
    METRICS_REDIS_REPLY_TOO_LARGE, /* a reply past the caps (store_reply_cap.h): not
                                    * an error reply, the connection closed on it */
    METRICS_REDIS_BAD_REPLY,       /* a malformed script reply, or a protocol error */
    METRICS_REDIS_OTHER,
    METRICS_REDIS_ERROR_KINDS,
};
/* By enum metrics_redis_error (metrics.c checks the count). */
extern const char *const metrics_redis_error_names[];

struct metrics {
    atomic_uint_fast64_t redis_commands;
    /* of those, the calls made for decisions (limiter.c send_job): claims
     * and top-ups, exact calls, concurrency acquires; not the heartbeat,
     * polls, pings, give-backs, refunds, releases (the status page) */
    atomic_uint_fast64_t redis_decision_calls;
    atomic_uint_fast64_t redis_error_replies[METRICS_REDIS_ERROR_KINDS];
    atomic_uint_fast64_t redis_errors;
    atomic_uint_fast64_t redis_clock_jumps;   /* steps of Redis' clock over 1 s */
    atomic_uint_fast64_t redis_batches;       /* batch script calls sent */
    atomic_uint_fast64_t redis_batched_calls; /* script calls they carried */
    atomic_uint_fast64_t redis_keepalives;    /* PINGs on idle connections ([redis] keepalive) */
    atomic_uint_fast64_t redis_reconnects;    /* connections made again after one was lost */
    atomic_uint_fast64_t redis_failovers;     /* a new master (Sentinel) or slot owner (Cluster) */
    atomic_int redis_up;
    atomic_int redis_configured;
    /* INFO (store_info.c): 1 when a Redis we use has a maxmemory-policy that
     * can evict our keys and a maxmemory; evicted_keys summed over them */
    atomic_int redis_eviction_possible;
    atomic_int redis_function_connections; /* calling the scripts with FCALL ([redis] functions) */
    atomic_uint_fast64_t redis_evicted_keys;
    atomic_uint fleet_agents;              /* heartbeats in Redis (store_heartbeat.c); 0 unknown */
    atomic_uint_fast64_t redis_state_lost; /* the epoch key gone or replaced (store_epoch.c) */
    atomic_uint fleet_agents_max;          /* the N of share = auto: max over fleet.h's window */
    /* [global] (src/global/gclaim.c): one quota across regions */
    atomic_int global_configured;
    atomic_int global_up;      /* the global Redis' connection is up */
    atomic_int global_claimer; /* this agent is its region's claimer */
    atomic_uint regions;       /* regions seen in the global Redis (0: none yet) */
    atomic_uint_fast64_t global_calls;     /* global calls (batches) sent */
    atomic_uint_fast64_t global_claims;    /* operations in them, one per key */
    atomic_uint_fast64_t global_failed;    /* global calls that failed */
    atomic_uint_fast64_t global_granted;   /* tokens granted to this region */
    atomic_uint_fast64_t global_state_lost; /* the global epoch key gone or replaced */
    atomic_uint_fast64_t global_returned;  /* tokens it gave back */
    atomic_uint_fast64_t global_backstop;  /* backstop tokens it deposited (global unreachable) */
    atomic_uint_fast64_t global_forfeited; /* tokens dropped: a lease's end, a failed give-back */
    atomic_int connections;
    atomic_uint_fast64_t connections_total;
    atomic_uint_fast64_t frames_in[METRICS_FRAMES];         /* by enum metrics_frame */
    atomic_uint_fast64_t protocol_errors[METRICS_STATUSES]; /* by status; [0]: 99 */
    atomic_uint_fast64_t acks;
    atomic_uint_fast64_t acks_truncated; /* only blocked (+ retry_after): frame too small */
    atomic_uint_fast64_t match_limited;  /* match regexes stopped by a limit of core/rx.h */
    atomic_uint_fast64_t reloads;
    atomic_uint_fast64_t config_hash;       /* of the configuration in force */
    atomic_uint_fast64_t rules_without_key; /* in the configuration in force */
    atomic_uint_fast64_t last_reload_unix;  /* when it was loaded (start or SIGHUP), s */
    atomic_uint_fast64_t reload_failures;
    /* [rules] source = redis (rules_redis/rules_redis.c) */
    atomic_uint_fast64_t rules_version;          /* the version applied; 0: none from Redis */
    atomic_uint_fast64_t rules_applied_ok;       /* versions applied */
    atomic_uint_fast64_t rules_applied_rejected; /* versions refused (each once) */
    atomic_int rules_cached; /* 1: on the rules of the cache file, Redis not read since start */
    atomic_uint_fast64_t rules_current_version; /* the current version in Redis, last read */
    /* leases */
    atomic_uint_fast64_t lease_claims;
    atomic_uint_fast64_t lease_exact_calls; /* cold keys' single decisions (lease_cache.c) */
    atomic_uint_fast64_t redis_first_sets;  /* of those, made by one plain SET (limiter_first.c) */
    atomic_uint_fast64_t lease_tokens_granted;
    atomic_uint_fast64_t lease_tokens_returned;
    atomic_uint_fast64_t lease_local_decisions;
    atomic_uint_fast64_t lease_negative_hits;
    atomic_uint_fast64_t lease_waiters;
    atomic_int lease_keys;
    atomic_uint_fast64_t lease_active_keys; /* walked by the last tick */
    atomic_uint_fast64_t lease_rate_claims; /* claims of rate leases (lease_rate.c) */
    atomic_int lease_rate_keys;             /* keys holding a rate lease here */
    atomic_uint_fast64_t buckets;
    /* protection of the listeners (server.c, server_conn.c, httpd.c): indexed by enum
     * metrics_listener, enum metrics_refusal and enum metrics_timeout */
    atomic_uint_fast64_t accept_pauses[METRICS_LISTENERS];
    atomic_uint_fast64_t refused[METRICS_LISTENERS][METRICS_REFUSALS];
    atomic_uint_fast64_t timeouts[METRICS_TIMEOUTS];
    atomic_uint_fast64_t notify_read_pauses; /* a connection reached the waiting-NOTIFY cap */
    atomic_int notifies_waiting;             /* NOTIFYs waiting for Redis, all connections */
    atomic_uint_fast64_t evictions;          /* buckets and lease entries dropped for max_entries */
    struct metrics_hist decision;
    struct metrics_hist redis_latency;
};

extern struct metrics metrics;

/* A counter's value, as renderers read it (relaxed: exact once the writers
 * are done, never torn). */
static inline uint64_t metrics_ld(atomic_uint_fast64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* Count one relaxed increment. */
#define METRIC_INC(field) atomic_fetch_add_explicit(&metrics.field, 1, memory_order_relaxed)
#define METRIC_ADD(field, n) atomic_fetch_add_explicit(&metrics.field, (n), memory_order_relaxed)

/* The counters a decision bumps, batched per thread: a worker thread counts
 * its frames, ACKs, local decisions and a rule's allowed decisions with plain
 * adds, and adds them to the shared atomics in one go before it writes its
 * answers and when its callback ends (metrics_local_flush), so a scrape that
 * follows an ACK sees it counted, and the shared cache lines take one locked
 * add per batch instead of several per decision. A thread that never called
 * metrics_local_enable() counts straight into the shared atomics. */
struct metrics_local {
    int on;
    int dirty;
    uint64_t frames_in[METRICS_FRAMES];
    uint64_t acks;
    uint64_t lease_local_decisions;
    uint64_t lease_negative_hits;
    struct metrics_rule *rule; /* the rule whose allowed decisions are pending */
    uint64_t rule_allowed;
};
extern _Thread_local struct metrics_local metrics_local;

#define METRIC_INC_LOCAL(field)                                                                    \
    do {                                                                                           \
        if (metrics_local.on) {                                                                    \
            metrics_local.field++;                                                                 \
            metrics_local.dirty = 1;                                                               \
        } else {                                                                                   \
            METRIC_INC(field);                                                                     \
        }                                                                                          \
    } while (0)

/* Batch this thread's counters from now on (a worker's event loop thread). */
void metrics_local_enable(void);
/* Add this thread's pending counts to the shared counters. */
void metrics_local_flush_slow(void);
static inline void metrics_local_flush(void)
{
    if (metrics_local.dirty)
        metrics_local_flush_slow();
}
/* One allowed decision of rule m. */
void metrics_rule_allowed(struct metrics_rule *m);
/* One request of rule m denied because its cost is over the capacity: 1
 * when the caller should log it (the first in METRICS_COST_LOG_US). */
#define METRICS_COST_LOG_US 10000000ULL
int metrics_rule_cost_over(struct metrics_rule *m, uint64_t now_us);

/* Record one observation of ns nanoseconds. */
void metrics_hist_observe(struct metrics_hist *h, uint64_t ns);
/* Record n observations, now_us - t0_us[i] microseconds each: the same as n
 * calls of metrics_hist_observe(), with an atomic add per bucket they fall
 * in rather than two per observation. */
void metrics_hist_observe_since(struct metrics_hist *h, uint64_t now_us, const uint64_t *t0_us,
                                size_t n);

/* Find or create the record of a rule. NULL only when out of memory. */
struct metrics_rule *metrics_rule_get(const char *name);
/* The first rule record (then ->next), newest first; records are never
 * freed, so the list may be walked without a lock. */
struct metrics_rule *metrics_rules(void);
/* The upper bound of histogram bucket i in seconds (for the last, +Inf
 * bucket: its lower bound, the largest finite one). */
double metrics_hist_bound_s(unsigned i);

/* Record a blocked client key for rule r at now_us (Space-Saving). */
void metrics_top_add(struct metrics_rule *r, const char *key, size_t keylen, uint64_t now_us,
                     uint64_t retry_us);
/* A rule's heavy hitters of the last two minutes, most blocked first, into
 * out (at most cap); returns how many. */
size_t metrics_top_list(struct metrics_rule *r, uint64_t now_us, struct top_entry *out, size_t cap);

/* The last DISCONNECT an HAProxy sent (status, message) and from whom. */
struct metrics_disconnect {
    int status;
    char message[128];
    char peer[64];
    uint64_t unix_s;
};
/* Any thread: records a HAPROXY-DISCONNECT (message: len bytes, any bytes:
 * kept as far as they are printable ASCII, others as '?'). */
void metrics_note_disconnect(int status, const char *message, size_t len, const char *peer);
/* The last one into *out: 1, or 0 when none came yet. */
int metrics_last_disconnect(struct metrics_disconnect *out);

/* The version in spoa_ratelimit_build_info (a static string); set once at
 * start. */
void metrics_set_version(const char *version);

/* The configuration now in force: its hash (config_hash) and the time it
 * was loaded. */
void metrics_config_loaded(uint64_t hash, uint64_t unix_s);

/* Render all metrics as Prometheus text. Returns a malloc'd NUL-terminated
 * buffer (caller frees) and its length in *len; NULL when out of memory. */
char *metrics_render(size_t *len);

/* Render /top as JSON (same ownership as metrics_render). */
char *metrics_top_render(uint64_t now_us, size_t *len);

/* For the alert log: call once a minute. For each rule whose share of
 * blocked decisions over the minute exceeded share, calls cb(rule, 0,
 * blocks, decisions); for each whose share of would-block decisions (a
 * shadow rule's, which never block) did, cb(rule, 1, would_blocks,
 * decisions). Resets the minute counters. */
void metrics_minute_tick(double share, void (*cb)(const char *rule, int shadow, uint64_t blocks,
                                                  uint64_t decisions));

/* For the shadow log: the would-be blocks of each rule since the last call
 * (reset), with the client most blocked recently (top_len bytes, any bytes:
 * escape them to log them); cb only for rules with would-be blocks. */
void metrics_shadow_tick(void (*cb)(const char *rule, uint64_t would_block, const char *top_key,
                                    size_t top_len));

#endif
