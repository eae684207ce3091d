/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_core.h - the limiter's pure core, inside src/limiter/ only: what a
 * request's hits decide (in-memory buckets, leases, exact and concurrency
 * calls, the fallback while Redis is down, cost, block_for), what goes to
 * Redis (struct rjob: a job, as data, limiter_jobs.h) and what a reply
 * does (applied as data). Given the clock, the rules, whether Redis is up
 * and the replies: no event loop, no Redis client, no socket.
 *
 * The bridge (limiter.c) is above it: it runs the core on the limiter's
 * loop, sends the jobs the core hands back (struct core_jobs) through the
 * store, and feeds the replies back in (core_reply, core_timeout). The core
 * never calls up: what is to be sent is returned. Below this file, each a
 * header of its own: concurrency (limiter_cc.h), refunds
 * (limiter_charge.h), a new key's first SET (limiter_first.h), and the
 * jobs and keys all of them share (limiter_jobs.h).
 */
#ifndef LIMITER_CORE_H
#define LIMITER_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "limiter/limiter_jobs.h"

struct lease_config;
struct limiter_req;
struct store_result;

/* Make c's tables (stripes each), budgeted to max_entries: standalone when
 * lc is NULL, else with the lease cache under lc and Redis keys under
 * prefix. 0, or -1 when out of memory (core_free() then). */
int core_init(struct limiter_core *c, size_t max_entries, unsigned stripes,
              const struct lease_config *lc, const char *prefix);
/* Free c's tables (not c). */
void core_free(struct limiter_core *c);

/* ---- decisions (limiter_core.c) ---- */

/* Decide req's hits at now_us: up = Redis is up (release calls), ask = and
 * decisions may wait for it (not stalled). Jobs to send go to out (their
 * waiters are req's). Returns the number of hits decided here, or -1 when
 * out of memory. The caller sends out's jobs, then core_decide_end(). */
long core_decide(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up, int ask,
                 struct core_jobs *out);
/* After core_decide() returned decided (>= 0) and its jobs are queued: 0
 * when req is complete, 1 when req->done will be called once the rest is
 * in (limiter_decide()'s answer). */
int core_decide_end(struct limiter_req *req, unsigned decided);
/* Decide hit i of req without Redis (the fallback, as degraded). */
void core_fallback(struct limiter_core *c, struct limiter_req *req, size_t i, uint64_t now_us);
/* One decision of req is in: complete req when it was the last. */
void core_hit_done(struct limiter_req *req);

/* A reply to j (res NULL: failed or short, or the store down), applied at
 * now_us: decisions completed, refunds counted. Frees j, or returns the job
 * to send now (j again as a release, or a lease's next call). */
struct rjob *core_reply(struct limiter_core *c, struct rjob *j, const struct store_result *res,
                        uint64_t now_us);
/* j went past [redis] timeout: what waits for it is decided by the
 * fallback (j stays in flight: its reply comes later). */
void core_timeout(struct limiter_core *c, struct rjob *j, uint64_t now_us);

#endif
