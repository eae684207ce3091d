/* store.h - the Redis client: the only module that includes hiredis.
 *
 * One asynchronous connection (hiredis + its libev adapter) on the loop given
 * to store_new(), normally the main thread's. Scripts are loaded with SCRIPT
 * LOAD when a connection is made and called with EVALSHA; a NOSCRIPT reply
 * (Redis restarted, SCRIPT FLUSH) reloads the script and retries the call,
 * transparently. A lost connection is re-established with backoff.
 *
 * Every store_eval() callback runs exactly once, on the loop thread: with the
 * reply, or with STORE_DOWN when the connection is lost or not up. Callers
 * must not call store functions from another thread.
 */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct config;
struct store;

enum store_script {
    SCRIPT_TB_CLAIM = 0,
    SCRIPT_TB_RETURN,
    SCRIPT_TB_EXACT,
    SCRIPT_SW_CLAIM,
    SCRIPT_SW_RETURN,
    SCRIPT_SW_EXACT,
    SCRIPT_COUNT,
};

enum store_status {
    STORE_OK = 0,   /* v[0..n) holds the integers of the reply array */
    STORE_ERR = 1,  /* Redis answered an error (err) or an unexpected type */
    STORE_DOWN = 2, /* no connection, or it was lost before the reply */
};

#define STORE_MAX_VALUES 10

struct store_result {
    int status;
    int n;
    int64_t v[STORE_MAX_VALUES];
    uint64_t latency_us;
    const char *err; /* valid during the callback only */
};

typedef void store_cb(void *arg, const struct store_result *res);

/* Connect per cfg ([redis] url, unix socket, password, db). The first
 * connection attempt is made at once; its outcome arrives later (see
 * store_up). NULL with a message in err when the URL cannot be used. */
struct store *store_new(struct ev_loop *loop, const struct config *cfg, char *err,
                        size_t errlen);

/* Close the connection. Pending callbacks run with STORE_DOWN. NULL no-op. */
void store_free(struct store *s);

/* 1 when connected and scripts are loaded. */
int store_up(const struct store *s);

/* Number of commands sent and not answered yet. */
unsigned store_pending(const struct store *s);

/* EVALSHA script with one key and argc args. The args are copied. */
int store_eval(struct store *s, enum store_script script, const char *key, size_t keylen,
               int argc, const char *const *argv, const size_t *argvlen, store_cb *cb,
               void *arg);

/* Called on every up/down transition (from the loop thread). */
void store_on_state(struct store *s, void (*fn)(void *arg, int up), void *arg);

/* The agent id this process uses in lease records: host:pid:random. */
const char *store_agent_id(const struct store *s);

#endif
