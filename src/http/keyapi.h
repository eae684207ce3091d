/* SPDX-License-Identifier: Apache-2.0 */
/* keyapi.h - one client on the stats listener: GET /key?rule=R&key=K (its
 * state, JSON) and POST /reset?rule=R&key=K (clear it), what "show table"
 * and "clear table" are to HAProxy's stick tables.
 *
 * K is the client key as requests build it: the value of the rule's key arg,
 * or the values of several joined with '|'; a key longer than [agent]
 * max_key is hashed as requests hash it (rules_client_key), so K finds what
 * a request with that key uses. The limiter reads and clears it
 * (limiter_inspect, limiter_reset); this module parses the query and writes
 * the JSON. Standalone: the agent's bucket. With Redis:
 * this agent's lease entry, the Redis bucket (read asynchronously: the
 * answer follows Redis' reply, the loop never waits), and in both modes the
 * fail-open backstop bucket.
 *
 * A reset with Redis runs tb_reset.lua / sw_reset.lua: the bucket is full
 * again less what running leases hold, so the bound b + r*T holds across
 * it; this agent forgets its negative cache for the key. Other agents keep
 * theirs until its retry time (a stick table is cleared per node too).
 *
 * Main thread only (the limiter's loop).
 */
#ifndef KEYAPI_H
#define KEYAPI_H

struct httpd_req;
struct limiter;
struct ruleset;

/* GET /key: answer req with the state of the client named by query, now or
 * once Redis answered. rs: the rules in force (referenced while waiting). */
void keyapi_get(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query);

/* POST /reset: clear the client named by query; answer req when done. */
void keyapi_reset(struct limiter *l, struct ruleset *rs, struct httpd_req *req, const char *query);

#endif
