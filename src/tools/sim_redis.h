/* SPDX-License-Identifier: Apache-2.0 */
/* sim_redis.h - an in-process stand-in for one Redis server, for the fleet
 * simulator: the agent's Lua scripts (the very text the agent loads, from the
 * generated src/scripts.h, batch script included) run unmodified in an
 * embedded Lua 5.1 interpreter, Redis's dialect, behind a small
 * implementation of the commands they call (TIME, HGETALL, HGET, HMGET, HSET,
 * HDEL, PEXPIRE, EXISTS, DEL). TIME reads the virtual clock passed to each
 * call; keys expire with PEXPIRE as in Redis (and are purged once expired, so
 * memory follows what Redis would hold).
 *
 * Replies are converted as Redis converts them for a client: a Lua table
 * becomes an array (up to its first nil), a Lua number an integer by
 * truncation. Single-threaded; never prints.
 */
#ifndef SIM_REDIS_H
#define SIM_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "store/script.h"

struct sim_redis;

/* Compile the scripts. NULL with a message in err on failure. */
struct sim_redis *sim_redis_new(char *err, size_t errlen);
void sim_redis_free(struct sim_redis *r);

/* EVALSHA of script (enum store_script, or SCRIPT_BATCH) at Redis time now_us
 * with the given KEYS and ARGV. On success returns 0 and the reply's integers
 * in v[0..*n) (at most cap; a longer reply is an error). On an error reply
 * (the script raised, or replied with something not an array of integers)
 * returns -1 and *err points at the message, valid until the next call. */
int sim_redis_eval(struct sim_redis *r, int script, uint64_t now_us, int nkeys,
                   const char *const *keys, const size_t *keylens, int argc,
                   const char *const *argv, const size_t *argvlen, int64_t *v, size_t cap,
                   size_t *n, const char **err);

/* Scripts a server can hold: the agent's and the batch. */
#define SIM_REDIS_SCRIPTS (SCRIPT_BATCH + 1)

/* Field field of the hash key, read as a number (0: no such key or field,
 * or not a positive number): what the simulator looks at (a block's end,
 * bu), outside any script. Changes nothing. */
uint64_t sim_redis_hget_u64(struct sim_redis *r, const char *key, size_t keylen, const char *field);

/* Keys held now, and the most held at once so far. */
size_t sim_redis_keys(const struct sim_redis *r);
size_t sim_redis_keys_peak(const struct sim_redis *r);

#endif
