/* SPDX-License-Identifier: Apache-2.0 */
/* sim.h - spoa-sim, the fleet simulator: what one run is asked to simulate
 * and what it measured. Shared by its modules:
 *
 *   sim.c          command line, sweeps, output (table, JSON, SVG)
 *   sim_fleet.c    one run: agents running the real lease code (lease_cache.c),
 *                  their decisions beside the reference, in virtual time
 *   sim_fleet_conn.c  their Redis connections and Redis running the calls
 *   sim_rate.c     --policy rate: a model of rate leases (not in the agent)
 *   sim_heap.c     the event queue in virtual time, for both
 *   sim_score.c    for both: the exact reference, the bound checks, the waits
 *   sim_redis.c    the Redis server: the agent's Lua scripts, embedded Lua 5.1
 *   sim_pool.c     its Lua allocator: size classes carved from slabs
 *   sim_traffic.c  requests: Zipf/uniform keys, skew, spikes, trace replay
 *   sim_stats.c    histograms and the exact window check
 *   sim_svg.c      the sweep chart
 *   sim_region.c   --regions: one quota over regions, each with its own
 *                  Redis, fed by leases from a global bucket
 *   sim_cost.c     --cost, --block-for, --lease off: a request's cost, the
 *                  rule's block_for, exact calls (lease = off, or a cost
 *                  the lease does not hold)
 *   sim_cc.c       --concurrency: cc_acquire / cc_release, slots held for
 *                  a service time
 *   sim_report.c   what a run prints: the table's head and row, the JSON
 *                  line, the stall's lines under the row
 */
#ifndef SIM_H
#define SIM_H

#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"

/* Virtual time starts here (microseconds; a whole number of hours, so that
 * sliding windows of any period up to an hour start with the run). */
#define SIM_T0_US (1000ull * 3600ull * 1000000ull)

struct sim_trace; /* sim_traffic.h */

/* token: the agent's token leases (lease_cache.c, the Lua scripts); rate: a model
 * of rate leases written in the simulator only (sim_rate.c). */
enum sim_policy { SIM_POLICY_TOKEN, SIM_POLICY_RATE };

struct sim_opts {
    unsigned agents;
    uint64_t keys;
    double zipf;      /* exponent; 0: uniform */
    double skew;      /* share of each key's traffic sent to its home agent */
    double rps;       /* requests per second, fleet-wide */
    double seconds;   /* simulated time */
    uint64_t tail_us; /* agents keep ticking this long after the last request */
    /* spikes: every spike_every_us, for spike_len_us, the rate is x spike_factor */
    double spike_factor;
    uint64_t spike_len_us, spike_every_us;
    /* the rule */
    uint64_t limit, period_ms, burst;
    enum bucket_algorithm algorithm;
    /* [lease] and the network */
    uint64_t interval_ms, ttl_ms;
    uint64_t rate_ttl_ms; /* [lease] rate leases' ttl; 0: rate leases off */
    double max_fraction;
    uint64_t rtt_us;      /* agent-Redis round trip */
    uint64_t redis_op_us; /* Redis CPU per script operation (0: instant) */
    uint64_t seed;
    const struct sim_trace *trace; /* replay this instead of generating */
    enum sim_policy policy;
    /* --stall: from stall_start_us (after the start), for stall_len_us, the
     * simulated Redis answers nothing (0: never); calls fail after
     * timeout_us ([redis] timeout) and decisions fall back to a backstop
     * bucket per agent and key with the backstop's parameters. */
    uint64_t stall_start_us, stall_len_us, timeout_us;
    double share; /* [fallback] share */
    struct bucket_params backstop;
    /* --regions (0: none, one Redis as ever): the rule is scope = global.
     * agents is then per region; each region has its own Redis (rtt_us),
     * fed by one claimer per region from a global Redis global_rtt_us away,
     * which refuses every call arriving in [down_start, down_start +
     * down_len) (--global-down; down_len 0: never). */
    unsigned regions;
    uint64_t global_rtt_us, global_down_start_us, global_down_len_us;
    double global_reserve; /* --global-reserve: [global] reserve (0: none) */
    /* --global-restart AT: the global Redis restarts empty at AT (its keys
     * lost; global_restart set). --claimer-kill R:AT[:LEN]: region R's
     * claimer dies at AT; a successor claims once the dead one's lease lock
     * expired and LEN passed; claimer_no_deadline: the regional bucket keeps
     * no deadline (the design's rule off, to show what it prevents).
     * sim_region_fail.c */
    int global_restart, claimer_kill, claimer_no_deadline;
    unsigned claimer_kill_region;
    uint64_t global_restart_us, claimer_kill_at_us, claimer_kill_len_us;
    /* --cost MIN[:MAX]: each request takes a cost drawn uniformly from
     * [cost_min, cost_max] (models 0: not given, every request costs 1 and
     * nothing below changes); --block-for: the rule's block_for (block_us,
     * block_ms in p of the rule); --lease off: every decision one exact call
     * (the rule's lease = off). sim_cost.c. */
    int models;
    uint64_t cost_min, cost_max, block_ms;
    int lease_off;
    /* --concurrency N: the rule is algorithm = concurrency, limit N (cc_limit;
     * 0: not), max_hold 1m; each admitted request holds its slot for
     * service_us (--service), then its release is sent (sim_cc.c). */
    uint64_t cc_limit, service_us;
};

/* What --cost, --block-for and --lease off measured (sim_cost.c). */
struct sim_models {
    uint64_t tokens, admitted_tokens, ref_admitted_tokens; /* costs: asked, admitted */
    uint64_t exact_calls;       /* decisions by one exact call (lease off, or a cost) */
    uint64_t block_denials;     /* denied while a block ran on the key at arrival (Redis' bu) */
    uint64_t block_admits;      /* admitted all the same: a lease held before it, spent */
    uint64_t ref_block_denials; /* the reference's: denied inside its own block */
    uint64_t blocks_started;    /* by the reference */
    /* --concurrency: the most requests of one key admitted and not done at
     * once (must be <= the limit), and slots Redis freed by a release */
    uint64_t cc_max_inflight, cc_released;
};

/* What --regions measured (sim_region.c). */
struct sim_regions {
    uint64_t global_calls;      /* calls to the global Redis (a region's tick: one batch) */
    uint64_t global_ops;        /* script operations in them (one per key claimed) */
    uint64_t global_failed;     /* calls refused while it was down */
    uint64_t granted, returned; /* tokens the global bucket granted regions, and got back */
    uint64_t forfeited;         /* withdrawn unspent at a lease's deadline (global down) */
    uint64_t backstop_tokens;   /* put in regional buckets by the backstop (global down) */
    double global_calls_per_decision, global_calls_per_s;
    double global_ttl_ms; /* a region's lease on the global bucket */
    /* --global-down: requests arriving in [start, start + len) */
    uint64_t down_decisions, down_admitted, down_ref_admitted; /* all keys */
    uint64_t down_key_admitted;                                /* the most one key admitted */
    double down_allowance; /* per key: 2b + r x len (held, and the backstop shares) */
    /* b + r T over admissions outside [start, start + len + settle): must be <= 0 */
    double outside_worst_window_excess;
    double settle_ms; /* the global timeout, an interval, a ttl and the global RTT */
    /* --global-restart: what one key's regions held at it (the most over
     * keys), and the allowance: b + r*T + b over any interval (one extra b) */
    uint64_t restart_held;
    double restart_allowance;
    /* --claimer-kill: the lease lock's ttl, when the successor took over
     * (after the kill), tokens the regional bucket refused past its deadline */
    double lock_ttl_ms, takeover_ms;
    uint64_t deadline_refused;
};

/* What a stall did (sim_opts.stall_len_us > 0). "During" is by request
 * arrival in [start, start + len). */
struct sim_stall {
    uint64_t decisions, admitted, ref_admitted, false_denials;
    uint64_t fallbacks, fallback_admitted; /* decided by the backstop (whole run) */
    uint64_t timeouts;                     /* calls that failed by timeout */
    double backstop_allowed;      /* sum over agent and key of b' + r' x (last - first fallback) */
    double backstop_worst_excess; /* max over agent, key and window of fallback admissions -
                                     (b' + r' T); must be <= 0 */
    double outside_worst_window_excess;           /* the bound b + r T over admissions outside
                                                     [start, start + len + settle); must be <= 0 */
    double settle_ms;                             /* timeout + interval */
    double wait_p50_ms, wait_p99_ms, wait_max_ms; /* requests arriving during it */
    double recovery_ms; /* the last fallback decision, after the stall's end */
};

struct sim_result {
    uint64_t decisions, admitted;
    uint64_t ref_admitted;  /* by one exact bucket per key (no leases, no latency) */
    uint64_t false_denials; /* denied, admitted by the reference */
    uint64_t extra_admits;  /* admitted, denied by the reference */
    uint64_t fallbacks;     /* decided without Redis (should stay 0) */
    uint64_t redis_errors;  /* script calls that failed (should stay 0) */
    char redis_error[160];  /* the first one's message */
    uint64_t redis_calls;   /* commands on the wire (a batch is one) */
    uint64_t script_ops;    /* script operations (a batch carries several) */
    uint64_t claims, returns;
    uint64_t waited; /* decisions that waited for a claim */
    double calls_per_decision, ops_per_decision;
    double calls_per_s; /* redis_calls per simulated second */
    double utilisation; /* admitted / ref_admitted */
    double worst_window_excess, ref_worst_window_excess;
    double stranded_p99, stranded_max; /* tokens held idle on agents, per key */
    double wait_p99_ms, wait_max_ms;   /* over all decisions (0 when decided locally) */
    uint64_t redis_keys_peak;
    double sim_seconds, wall_s;
    struct sim_stall stall;
    struct sim_regions regions;
    struct sim_models models;
};

/* Simulate o; fill *res. 0, or -1 with a message in err. */
int sim_run(const struct sim_opts *o, struct sim_result *res, char *err, size_t errlen);
/* The same for o->policy == SIM_POLICY_RATE (sim_run calls it). */
int sim_run_rate(const struct sim_opts *o, struct sim_result *res, char *err, size_t errlen);

/* --regions (sim_region.c): 0 when o can run with regions, else -1 and why
 * in err; the region's figures under the table's row, and in the JSON. */
struct strbuf;
int sim_region_check(const struct sim_opts *o, int trace, char *err, size_t errlen);
void sim_region_print(const struct sim_opts *o, const struct sim_result *r);
void sim_region_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r);
/* With --global-down: -1, said on stderr, when a key admitted more than its
 * allowance during the outage, or b + r*T was exceeded outside it; else 0. */
int sim_region_verdict(const struct sim_opts *o, const struct sim_result *r);
/* --global-restart's and --claimer-kill's (sim_region_fail.c): parse their
 * text (empty: not given) into o (0, or -1 with err); their lines, JSON and
 * verdict (-1, said on stderr: the allowance or the bound exceeded). */
int sim_region_fail_opts(const char *restart, const char *kill, struct sim_opts *o, char *err,
                         size_t errlen);
void sim_region_fail_print(const struct sim_opts *o, const struct sim_result *r);
void sim_region_fail_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r);
int sim_region_fail_verdict(const struct sim_opts *o, const struct sim_result *r);
/* spoa-sim's duration syntax (250us, 0.3ms, 1s, 1m): 0, or -1. */
int sim_parse_us(const char *s, uint64_t *us);

/* --cost, --block-for, --lease off (sim_cost.c): 0 when o can run with
 * them, else -1 and why in err; their figures under the table's row, and in
 * the JSON. */
int sim_models_check(const struct sim_opts *o, char *err, size_t errlen);
/* --cost's, --lease's and --concurrency's text (empty: not given) into o,
 * and o->models when any model is asked for (o->block_ms and service_us set
 * first). 0, or -1 with err. */
int sim_models_opts(const char *cost, const char *lease, const char *cc, struct sim_opts *o,
                    char *err, size_t errlen);
/* -1, said on stderr, when --concurrency saw more in flight than its limit. */
int sim_models_verdict(const struct sim_opts *o, const struct sim_result *r);

void sim_models_print(const struct sim_opts *o, const struct sim_result *r);
void sim_models_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r);
/* What a run prints (sim_report.c): the table's head (the swept setting's
 * name, or "run"), a run's row (val: the swept value), the run as one JSON
 * line; the stall's figures. */
void sim_report_head(const char *sweep);
void sim_report_row(const struct sim_opts *o, const struct sim_result *r, const char *val);
void sim_report_json(const struct sim_opts *o, const struct sim_result *r, const char *sweep,
                     const char *val);
void sim_stall_print(const struct sim_opts *o, const struct sim_result *r);
void sim_stall_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r);

#endif
