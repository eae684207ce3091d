/* SPDX-License-Identifier: Apache-2.0 */
/* store_backoff.c - reconnect waits with jitter (see store_backoff.h). */
#include "store_backoff.h"

double store_backoff_wait(double backoff, uint32_t rnd)
{
    if (backoff < STORE_BACKOFF_MIN)
        backoff = STORE_BACKOFF_MIN;
    if (backoff > STORE_BACKOFF_MAX)
        backoff = STORE_BACKOFF_MAX;
    return backoff / 2 + backoff / 2 * ((double)rnd / 4294967295.0);
}

double store_backoff_next(double backoff)
{
    backoff *= 2;
    if (backoff < STORE_BACKOFF_MIN)
        return STORE_BACKOFF_MIN;
    return backoff > STORE_BACKOFF_MAX ? STORE_BACKOFF_MAX : backoff;
}
