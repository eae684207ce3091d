/* SPDX-License-Identifier: Apache-2.0 */
/* store_backoff.h - how long a Redis connection waits before it is made
 * again (after a loss, a refusal, a malformed reply, a NOSCRIPT that does
 * not stick): exponential from STORE_BACKOFF_MIN, doubled per failed attempt
 * up to STORE_BACKOFF_MAX, each wait drawn with jitter, and back to the
 * minimum once a connection has stayed ready for STORE_BACKOFF_HEALTHY_US.
 * A Redis that accepts connections and breaks each one at once (protocol
 * garbage, scripts that do not stay loaded) so costs about one connection
 * per 4 s, not ten a second; and agents that lost the same Redis do not
 * come back in step.
 *
 * Pure: the caller keeps the state (one double) and draws the randomness.
 */
#ifndef STORE_BACKOFF_H
#define STORE_BACKOFF_H

#include <stdint.h>

#define STORE_BACKOFF_MIN 0.1 /* seconds */
#define STORE_BACKOFF_MAX 4.0 /* below [redis] errors_quiet's minimum, 5 s */
#define STORE_BACKOFF_HEALTHY_US 5000000ULL

/* The wait before the next attempt, seconds: uniform in [backoff / 2,
 * backoff] ("equal jitter"), rnd any 32 random bits. */
double store_backoff_wait(double backoff, uint32_t rnd);

/* The backoff after one more failed attempt: doubled, within [MIN, MAX]. */
double store_backoff_next(double backoff);

#endif
