/* SPDX-License-Identifier: Apache-2.0 */
/* store_resp.h - a Redis request (a RESP array of bulk strings) written into
 * one growable buffer, to hand to hiredis' redisAsyncFormattedCommand().
 *
 * Why not redisAsyncCommandArgv(): hiredis 0.14 builds each request with an
 * sds string grown per argument (sdscatfmt, a malloc or realloc each), and a
 * batch of a few hundred script calls has a few thousand arguments. Here the
 * buffer is reused from one request to the next and each argument is a
 * memcpy and a few digits. Pure: no I/O, no hiredis.
 *
 * Out of memory sticks: later calls do nothing and store_resp_ok() says 0
 * until the next store_resp_reset(), so a request is written in full and
 * checked once.
 */
#ifndef STORE_RESP_H
#define STORE_RESP_H

#include <stddef.h>
#include <stdint.h>

struct store_resp {
    char *buf;
    size_t len, cap;
    int oom;
};

/* Start a new request in w (keeping its buffer). */
void store_resp_reset(struct store_resp *w);

/* "*n\r\n": an array of n elements, each then written by one call below. */
void store_resp_array(struct store_resp *w, size_t n);

/* "$len\r\n" p "\r\n". */
void store_resp_bulk(struct store_resp *w, const char *p, size_t len);

/* n bulk strings, argv[i] of argvlen[i] bytes each (as n calls above). */
void store_resp_bulks(struct store_resp *w, int n, char *const *argv, const size_t *argvlen);

/* len bytes of RESP written elsewhere (store_resp_put_command), as they are. */
void store_resp_raw(struct store_resp *w, const char *p, size_t len);

/* A bulk string holding v in decimal. */
void store_resp_bulk_u64(struct store_resp *w, uint64_t v);

/* The most bytes store_resp_put_command() writes for argc arguments of
 * argvlen[i] bytes. */
size_t store_resp_command_bound(int argc, const size_t *argvlen);

/* A whole command (an array of argc bulk strings) at p, which has room for
 * store_resp_command_bound() bytes; the bytes written. For a request made
 * once and sent as is, without a store_resp buffer. */
size_t store_resp_put_command(char *p, int argc, const char *const *argv, const size_t *argvlen);

/* 1 when everything since the last reset was written, 0 when memory ran out. */
static inline int store_resp_ok(const struct store_resp *w)
{
    return !w->oom;
}

/* Free the buffer; w may be reused (it starts empty). */
void store_resp_free(struct store_resp *w);

#endif
