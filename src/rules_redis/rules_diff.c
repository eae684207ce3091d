/* SPDX-License-Identifier: Apache-2.0 */
/* rules_diff.c - a unified diff of two rule texts (see rules_diff.h).
 *
 * A line is its bytes with its '\n', so a last line without one differs
 * from the same line with one, as diff(1) has it. The edit script is one
 * op per line (same, deleted, inserted), in order; the hunks are cut from
 * it, and in each run of changes the deletions are printed before the
 * insertions, as diff -u does.
 */
#include "rules_redis/rules_diff.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"

enum { OP_SAME = 0, OP_DEL, OP_INS };

struct line {
    const char *p;
    size_t len; /* with its '\n', if it has one */
    uint32_t hash;
};

struct lines {
    struct line *v;
    size_t n;
};

/* text cut into lines, each hashed (FNV-1a) to compare most pairs in one
 * step. -1 out of memory. */
static int split(const char *text, size_t len, struct lines *out)
{
    size_t n = 0, i = 0;

    for (size_t j = 0; j < len; j++)
        n += text[j] == '\n';
    n += len && text[len - 1] != '\n';
    out->n = n;
    if (!(out->v = calloc(n ? n : 1, sizeof(*out->v))))
        return -1;
    for (size_t start = 0; start < len; i++) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        uint32_t h = 2166136261u;
        for (size_t j = start; j < end; j++)
            h = (h ^ (unsigned char)text[j]) * 16777619u;
        out->v[i] = (struct line){text + start, end - start, h};
        start = end;
    }
    return 0;
}

static int same(const struct line *x, const struct line *y)
{
    return x->hash == y->hash && x->len == y->len && memcmp(x->p, y->p, x->len) == 0;
}

/* Myers' greedy search over a[0..n) and b[0..m), the ops of a shortest
 * edit script written backwards from ops[nops - 1], the first at
 * ops[*start]. 0 found, 1 past the
 * bounds, -1 out of memory. The V array of every step d is kept (d = 0..D:
 * (D + 1)^2 values, bounded by RULES_DIFF_MAX_EDITS) to walk back. */
static int myers(const struct line *a, long n, const struct line *b, long m, unsigned char *ops,
                 size_t nops, size_t *start)
{
    long max = n + m < RULES_DIFF_MAX_EDITS ? n + m : RULES_DIFF_MAX_EDITS;
    long off = max + 1, d, found = -1;
    unsigned long work = 0;
    int32_t *v = calloc((size_t)(2 * max + 3), sizeof(*v)), *trace;
    size_t tcap = 0, tlen = 0;

    trace = NULL;
    if (!v)
        return -1;
    for (d = 0; d <= max && found < 0; d++) {
        /* V as it was before step d, over k = -d..d */
        if (tlen + (size_t)(2 * d + 1) > tcap) {
            size_t cap = tcap ? tcap * 2 : 1024;
            while (cap < tlen + (size_t)(2 * d + 1))
                cap *= 2;
            int32_t *t = realloc(trace, cap * sizeof(*t));
            if (!t) {
                free(trace);
                free(v);
                return -1;
            }
            trace = t, tcap = cap;
        }
        memcpy(trace + tlen, v + off - d, (size_t)(2 * d + 1) * sizeof(*v));
        tlen += (size_t)(2 * d + 1);
        for (long k = -d; k <= d; k += 2) {
            long x = k == -d || (k != d && v[off + k - 1] < v[off + k + 1]) ? v[off + k + 1]
                                                                            : v[off + k - 1] + 1;
            long y = x - k;
            while (x < n && y < m && same(&a[x], &b[y]))
                x++, y++, work++;
            v[off + k] = (int32_t)x;
            work++;
            if (x >= n && y >= m) {
                found = d;
                break;
            }
        }
        if (work > RULES_DIFF_MAX_WORK)
            break;
    }
    free(v);
    if (found < 0) {
        free(trace);
        return 1;
    }
    /* back from (n, m): each step d came from step d - 1 by one insertion
     * or deletion, after a run of equal lines */
    long x = n, y = m;
    size_t o = nops;
    for (d = found; d > 0; d--) {
        const int32_t *pv = trace + (size_t)d * (size_t)d + (size_t)d; /* index k = 0 */
        long k = x - y;
        long pk = k == -d || (k != d && pv[k - 1] < pv[k + 1]) ? k + 1 : k - 1;
        long px = pv[pk], py = px - pk;
        while (x > px && y > py)
            ops[--o] = OP_SAME, x--, y--;
        ops[--o] = x == px ? OP_INS : OP_DEL;
        x = px, y = py;
    }
    while (x > 0 && y > 0)
        ops[--o] = OP_SAME, x--, y--;
    *start = o;
    free(trace);
    return 0;
}

/* A hunk's range as diff -u writes it: "start,count", "start" when count
 * is 1, and the line before it when count is 0. */
static void range(struct strbuf *sb, size_t at, size_t count)
{
    if (count == 1)
        strbuf_printf(sb, "%zu", at + 1);
    else
        strbuf_printf(sb, "%zu,%zu", count ? at + 1 : at, count);
}

static void put_line(struct strbuf *sb, char mark, const struct line *l)
{
    strbuf_put(sb, &mark, 1);
    strbuf_put(sb, l->p, l->len);
    if (!l->len || l->p[l->len - 1] != '\n')
        strbuf_printf(sb, "\n\\ No newline at end of file\n");
}

/* The hunks of the edit script ops[0..nops). */
static void hunks(struct strbuf *sb, const struct lines *a, const struct lines *b,
                  const unsigned char *ops, size_t nops)
{
    size_t i = 0, ai = 0, bi = 0; /* ops[i] is at line ai of a, bi of b */

    for (;;) {
        size_t c = i;
        while (c < nops && ops[c] == OP_SAME)
            c++;
        if (c == nops)
            return;
        size_t s = c - i > RULES_DIFF_CONTEXT ? c - RULES_DIFF_CONTEXT : i;
        ai += s - i, bi += s - i; /* skipped: all the same */
        /* the last change of the hunk: the next one joins it when at most
         * two contexts of equal lines lie between them */
        size_t last = c, j = c + 1;
        for (;;) {
            while (j < nops && ops[j] == OP_SAME)
                j++;
            if (j == nops || j - last - 1 > 2 * RULES_DIFF_CONTEXT)
                break;
            last = j++;
        }
        size_t e = last + 1 + RULES_DIFF_CONTEXT < nops ? last + 1 + RULES_DIFF_CONTEXT : nops;
        size_t na = 0, nb = 0;
        for (size_t k = s; k < e; k++)
            na += ops[k] != OP_INS, nb += ops[k] != OP_DEL;
        strbuf_printf(sb, "@@ -");
        range(sb, ai, na);
        strbuf_printf(sb, " +");
        range(sb, bi, nb);
        strbuf_printf(sb, " @@\n");
        for (size_t k = s; k < e;) {
            if (ops[k] == OP_SAME) {
                put_line(sb, ' ', &a->v[ai]);
                ai++, bi++, k++;
                continue;
            }
            size_t r = k;
            while (r < e && ops[r] != OP_SAME)
                r++;
            for (size_t q = k; q < r; q++)
                if (ops[q] == OP_DEL)
                    put_line(sb, '-', &a->v[ai++]);
            for (size_t q = k; q < r; q++)
                if (ops[q] == OP_INS)
                    put_line(sb, '+', &b->v[bi++]);
            k = r;
        }
        i = e;
    }
}

char *rules_diff(const char *a, size_t alen, const char *b, size_t blen, const char *aname,
                 const char *bname, size_t *len, int *whole)
{
    struct lines la = {0}, lb = {0};
    struct strbuf sb = STRBUF_INIT;
    unsigned char *ops = NULL;
    char *out = NULL;

    *whole = 0;
    *len = 0;
    if (alen == blen && memcmp(a, b, alen) == 0)
        return calloc(1, 1);
    if (split(a, alen, &la) < 0 || split(b, blen, &lb) < 0)
        goto out;
    size_t head = 0, tail = 0, nops = la.n + lb.n;
    while (head < la.n && head < lb.n && same(&la.v[head], &lb.v[head]))
        head++;
    while (tail < la.n - head && tail < lb.n - head &&
           same(&la.v[la.n - 1 - tail], &lb.v[lb.n - 1 - tail]))
        tail++;
    long n = (long)(la.n - head - tail), m = (long)(lb.n - head - tail);
    if (!(ops = malloc(nops ? nops : 1)))
        goto out;
    /* head and tail the same; the middle's script ends where the tail
     * starts, with the unused room before it */
    size_t mid_end = nops - tail;
    memset(ops + mid_end, OP_SAME, tail);
    size_t o = 0, mid_len;
    int rc = myers(la.v + head, n, lb.v + head, m, ops, mid_end, &o);
    if (rc < 0)
        goto out;
    if (rc == 0) {
        mid_len = mid_end - o;
        memmove(ops + head, ops + o, mid_len);
    } else {
        *whole = 1;
        memset(ops + head, OP_DEL, (size_t)n);
        memset(ops + head + n, OP_INS, (size_t)m);
        mid_len = (size_t)(n + m);
    }
    memset(ops, OP_SAME, head);
    memmove(ops + head + mid_len, ops + mid_end, tail);
    strbuf_printf(&sb, "--- %s\n+++ %s\n", aname, bname);
    hunks(&sb, &la, &lb, ops, head + mid_len + tail);
    out = strbuf_finish(&sb, len);
out:
    strbuf_free(&sb);
    free(ops);
    free(la.v);
    free(lb.v);
    return out;
}
