/* SPDX-License-Identifier: Apache-2.0 */
/* lease_fixture.h - what the lease cache tests (test_lease_{claim,tick,
 * exact}.c) share: a fake clock's units, the configs and rules they use, a
 * request with its waiter, and hand-written Redis replies (the scripts
 * themselves are tested against Redis in test_scripts_*.c). lt_: lease tests. */
#ifndef LEASE_FIXTURE_H
#define LEASE_FIXTURE_H

#include <stdint.h>

#include "lease/lease.h"

#define MS 1000ull
#define S 1000000ull

/* token leases only; no prefetch: these tests follow each call (see prefetch_*) */
static const struct lease_config lt_cfg = {100 * MS, 1 * S, 0.1, 0, 0, 0};
/* 10/1m burst 10 */
static const struct bucket_params lt_p10 = {0, 10, 60 * S, 10, 0, 0, 60 * 1000, 0, 0, 0};
/* 10000/1s burst 1000 */
static const struct bucket_params lt_pbig = {0, 10000, 1 * S, 1000, 0, 0, 1 * 1000, 0, 0, 0};

struct lt_req {
    struct lease_waiter w;
    struct bucket_result res;
};

/* lease_decide for key on a fresh request r. */
int lt_decide(struct lease_table *t, const char *key, const struct bucket_params *p, uint64_t now,
              int up, struct lt_req *r, struct lease_job **job);

/* reply: {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine}, then
 * share_ppm 0 (a token lease) and had (what Redis held for us before: mine - granted) */
void lt_reply(struct lease_table *t, struct lease_job *j, const int64_t v[8], uint64_t now,
              struct lease_waiter **done, struct lease_waiter **fb, struct lease_job **next);

/* The length of a list of waiters. */
int lt_count(struct lease_waiter *w);

#endif
