/* SPDX-License-Identifier: Apache-2.0 */
/* spop_fixture.c - the SPOP codec tests' shared fixtures (spop_fixture.h). */
#include "spop_fixture.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

uint8_t *st_dup_exact(const void *src, size_t n)
{
    uint8_t *p = malloc(n);

    ck_assert_ptr_nonnull(p);
    if (n)
        memcpy(p, src, n);
    return p;
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    ck_assert_msg(0, "bad hex digit '%c'", c);
    return -1;
}

uint8_t *st_hex_dup(const char *hex, size_t *n)
{
    uint8_t tmp[512];
    size_t len = 0;

    for (const char *s = hex; *s;) {
        if (*s == ' ') {
            s++;
            continue;
        }
        ck_assert(s[1] && len < sizeof(tmp));
        tmp[len++] = (uint8_t)(hex_nibble(s[0]) << 4 | hex_nibble(s[1]));
        s += 2;
    }
    *n = len;
    return st_dup_exact(tmp, len);
}

void st_frame_ok(const uint8_t *p, size_t n, struct spop_frame *f)
{
    size_t consumed = 0;

    ck_assert_int_eq(spop_frame_decode(p, n, SPOP_DEFAULT_FRAME_SIZE, f, &consumed), SPOP_OK);
    ck_assert_uint_eq(consumed, n);
}

int st_str_is(struct spop_str s, const char *lit)
{
    return s.len == strlen(lit) && (s.len == 0 || memcmp(s.ptr, lit, s.len) == 0);
}

int st_run_messages(const uint8_t *p, size_t n)
{
    static struct spop_message m;
    struct spop_reader r = st_reader(p, n);
    const uint8_t *before;
    int rc;

    do {
        before = r.p;
        rc = spop_message_next(&r, &m);
        ck_assert(r.p >= p && r.p <= p + n);
        ck_assert(rc == 1 ? r.p > before : r.p == before);
    } while (rc == 1);
    ck_assert(rc == 0 || rc == SPOP_EINVAL);
    return rc;
}
