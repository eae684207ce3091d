/* SPDX-License-Identifier: Apache-2.0 */
/* lease_fixture.c - the lease cache tests' shared fixtures (lease_fixture.h). */
#include "lease_fixture.h"

#include <string.h>

int lt_decide(struct lease_table *t, const char *key, const struct bucket_params *p, uint64_t now,
              int up, struct lt_req *r, struct lease_job **job)
{
    memset(r, 0, sizeof(*r));
    r->w.out = &r->res;
    r->w.req = r;
    *job = NULL;
    return lease_decide(t, key, strlen(key), p, now, up, &r->w, &r->res, job);
}

void lt_reply(struct lease_table *t, struct lease_job *j, const int64_t v[8], uint64_t now,
              struct lease_waiter **done, struct lease_waiter **fb, struct lease_job **next)
{
    int64_t w[CLAIM_R_COUNT];
    memcpy(w, v, 8 * sizeof(*v));
    w[CLAIM_R_SHARE_PPM] = 0;
    w[CLAIM_R_HAD] =
        v[CLAIM_R_MINE] > v[CLAIM_R_GRANTED] ? v[CLAIM_R_MINE] - v[CLAIM_R_GRANTED] : 0;
    *done = *fb = NULL;
    *next = NULL;
    lease_reply(t, j, 1, w, CLAIM_R_COUNT, now, done, fb, next);
}

int lt_count(struct lease_waiter *w)
{
    int n = 0;
    for (; w; w = w->next)
        n++;
    return n;
}
