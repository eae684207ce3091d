/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_charge.h - [agent] charge = all-or-nothing in the limiter's core
 * (limiter_charge.c): what a settled request gives back. */
#ifndef LIMITER_CHARGE_H
#define LIMITER_CHARGE_H

#include <stdint.h>

#include "limiter/limiter_jobs.h"

/* limiter_settle(): a blocked request gives back its slots and, under
 * [agent] charge = all-or-nothing, what its allowing rules took. Redis
 * calls go to out (up: Redis is up, for slot releases). */
void core_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                 struct core_jobs *out);

#endif
