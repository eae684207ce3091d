/* limiter.h - where decisions are taken: in-memory buckets (standalone mode
 * and the fail-open backstop), and, with Redis, the lease cache.
 *
 * limiter_decide() fills the outcome of every hit of a rule_eval. In
 * standalone mode it always completes at once.
 */
#ifndef LIMITER_H
#define LIMITER_H

#include <stdint.h>

#include "bucket.h"
#include "rules.h"

struct limiter {
    struct bucket_table *buckets; /* standalone buckets */
    struct bucket_table *backstop; /* fail-open buckets while Redis is down */
};

/* Returns NULL when out of memory. */
struct limiter *limiter_new(void);
void limiter_free(struct limiter *l);

/* Decide every hit of ev under ruleset rs at now_us. Returns 0 when all
 * outcomes are filled. */
int limiter_decide(struct limiter *l, const struct ruleset *rs, struct rule_eval *ev,
                   uint64_t now_us);

/* Drop idle in-memory buckets (call from a timer); rs gives the current
 * parameters. Returns the number dropped. */
size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit);

#endif
