/* SPDX-License-Identifier: Apache-2.0 */
/* spop_fixture.h - what the SPOP codec tests (test_spop_*.c) share: inputs
 * in heap buffers of exactly their size (so that AddressSanitizer reports a
 * read of even one byte past the end), readers and writers over a buffer,
 * and checks of frames, strings and NOTIFY messages. st_: SPOP tests. */
#ifndef SPOP_FIXTURE_H
#define SPOP_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "spop/spop.h"

#define ST_NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A heap copy of exactly n bytes. */
uint8_t *st_dup_exact(const void *src, size_t n);

/* Hex (blanks allowed) to an exact-size heap buffer of *n bytes. */
uint8_t *st_hex_dup(const char *hex, size_t *n);

static inline struct spop_reader st_reader(const uint8_t *p, size_t n)
{
    return (struct spop_reader){p, p + n};
}

static inline struct spop_writer st_writer(uint8_t *p, size_t n)
{
    return (struct spop_writer){p, p + n};
}

/* Decode the whole frame at p[0..n), which must be valid. */
void st_frame_ok(const uint8_t *p, size_t n, struct spop_frame *f);

/* s holds exactly the text lit. */
int st_str_is(struct spop_str s, const char *lit);

#define ck_assert_spop_str(s, lit)                                                                 \
    ck_assert_msg(st_str_is((s), (lit)), "got \"%.*s\", want \"%s\"", (int)(s).len,                \
                  (s).ptr ? (s).ptr : "", (lit))

/* Every message of the NOTIFY payload p[0..n), each read moving forward and
 * staying inside it; returns 0 at the end or SPOP_EINVAL. */
int st_run_messages(const uint8_t *p, size_t n);

#endif
