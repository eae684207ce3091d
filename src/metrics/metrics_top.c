/* SPDX-License-Identifier: Apache-2.0 */
/* metrics_top.c - each rule's heavy hitters: the keys it blocked most over
 * the last two minutes (a Space-Saving sketch per minute, with each client's
 * retry time), for /top, the status page and the shadow rules' log line.
 * The sketches live in the rule records of metrics.c (struct metrics_rule);
 * this file fills and reads them.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

/* Space-Saving: a key already tracked is counted; otherwise it takes the
 * place of the smallest entry and inherits its count as error bound. */
static void top_insert(struct top_sketch *s, const char *key, size_t keylen,
                       uint64_t retry_until_us)
{
    unsigned i, min = 0;

    for (i = 0; i < s->n; i++) {
        if (s->e[i].len == keylen && memcmp(s->e[i].key, key, keylen) == 0) {
            s->e[i].count++;
            if (retry_until_us > s->e[i].retry_until_us)
                s->e[i].retry_until_us = retry_until_us;
            return;
        }
        if (s->e[i].count < s->e[min].count)
            min = i;
    }
    if (s->n < METRICS_TOP_K) {
        i = s->n++;
        s->e[i].count = 1;
        s->e[i].error = 0;
    } else {
        i = min;
        s->e[i].error = s->e[i].count;
        s->e[i].count++;
    }
    memcpy(s->e[i].key, key, keylen);
    s->e[i].key[keylen] = '\0';
    s->e[i].len = keylen;
    s->e[i].retry_until_us = retry_until_us;
}

/* now_us may be older than the period's start: a request's clock is read
 * when it arrives, on its own worker, and it may have waited for Redis while
 * a later one rotated the sketch. That is no time passed (subtracting would
 * wrap, and both minutes were thrown away). */
static void top_rotate(struct metrics_rule *r, uint64_t now_us)
{
    if (now_us <= r->top_period_start_us || now_us - r->top_period_start_us < METRICS_TOP_PERIOD_US)
        return;
    if (now_us - r->top_period_start_us < 2 * METRICS_TOP_PERIOD_US)
        r->top_prev = r->top_cur;
    else
        memset(&r->top_prev, 0, sizeof(r->top_prev));
    memset(&r->top_cur, 0, sizeof(r->top_cur));
    r->top_period_start_us = now_us;
}

void metrics_top_add(struct metrics_rule *r, const char *key, size_t keylen, uint64_t now_us,
                     uint64_t retry_us)
{
    if (keylen > METRICS_TOP_KEY_MAX)
        keylen = METRICS_TOP_KEY_MAX;
    /* Under overload most decisions are denials, from every worker at once:
     * when another thread holds the sketch, skip this sample rather than
     * wait. Heavy hitters dominate the samples that are taken. */
    if (pthread_mutex_trylock(r->top_lock) != 0)
        return;
    if (r->top_period_start_us == 0)
        r->top_period_start_us = now_us;
    top_rotate(r, now_us);
    top_insert(&r->top_cur, key, keylen, now_us + retry_us);
    pthread_mutex_unlock(r->top_lock);
}

static int top_cmp(const void *a, const void *b)
{
    const struct top_entry *x = a, *y = b;
    return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

size_t metrics_top_list(struct metrics_rule *r, uint64_t now_us, struct top_entry *out, size_t cap)
{
    struct top_entry merged[2 * METRICS_TOP_K];
    unsigned n = 0;

    pthread_mutex_lock(r->top_lock);
    if (r->top_period_start_us)
        top_rotate(r, now_us);
    for (unsigned i = 0; i < r->top_cur.n; i++)
        merged[n++] = r->top_cur.e[i];
    for (unsigned i = 0; i < r->top_prev.n; i++) {
        const struct top_entry *p = &r->top_prev.e[i];
        unsigned j;
        for (j = 0; j < n; j++)
            if (merged[j].len == p->len && memcmp(merged[j].key, p->key, p->len) == 0)
                break;
        if (j < n) {
            merged[j].count += p->count;
            merged[j].error += p->error;
            if (p->retry_until_us > merged[j].retry_until_us)
                merged[j].retry_until_us = p->retry_until_us;
        } else {
            merged[n++] = *p;
        }
    }
    pthread_mutex_unlock(r->top_lock);
    qsort(merged, n, sizeof(merged[0]), top_cmp);
    if (n > cap)
        n = (unsigned)cap;
    memcpy(out, merged, n * sizeof(*out));
    return n;
}

/* One rule's heavy hitters, most blocked first: [{"key","blocked","error"}]. */
static json_t *top_json(const struct top_entry *e, unsigned n)
{
    json_t *arr = json_array();
    int failed = !arr;

    for (unsigned i = 0; !failed && i < n && i < METRICS_TOP_K; i++)
        failed = json_array_append_new(
            arr, json_pack("{s:o,s:I,s:I}", "key", json_latin1(e[i].key, e[i].len), "blocked",
                           (json_int_t)e[i].count, "error", (json_int_t)e[i].error));
    if (failed) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

char *metrics_top_render(uint64_t now_us, size_t *len)
{
    json_t *rules = json_object();
    json_t *doc = json_pack("{s:I,s:o}", "window_seconds",
                            (json_int_t)(2 * METRICS_TOP_PERIOD_US / 1000000), "rules", rules);
    struct metrics_rule *r;

    for (r = metrics_rules(); doc && r; r = r->next) {
        struct top_entry merged[METRICS_TOP_K];
        unsigned n = (unsigned)metrics_top_list(r, now_us, merged, METRICS_TOP_K);

        /* a rule's name is text from the INI file: read as Latin-1 like a
         * key, so that no byte of it is lost */
        char *name = json_latin1_utf8(r->name, strlen(r->name), NULL);
        if (!name || json_object_set_new_nocheck(rules, name, top_json(merged, n)) != 0) {
            json_decref(doc);
            doc = NULL;
        }
        free(name);
    }
    return json_body(doc, len);
}

void metrics_shadow_tick(void (*cb)(const char *rule, uint64_t would_block, const char *top_key,
                                    size_t top_len))
{
    for (struct metrics_rule *r = metrics_rules(); r; r = r->next) {
        uint64_t n = atomic_exchange(&r->shadow_pending, 0);
        char top[METRICS_TOP_KEY_MAX + 1] = "";
        size_t top_len = 0;

        if (n == 0)
            continue;
        pthread_mutex_lock(r->top_lock);
        const struct top_sketch *sk = r->top_cur.n ? &r->top_cur : &r->top_prev;
        unsigned best = 0;
        for (unsigned i = 1; i < sk->n; i++)
            if (sk->e[i].count > sk->e[best].count)
                best = i;
        if (sk->n) {
            memcpy(top, sk->e[best].key, sizeof(top));
            top_len = sk->e[best].len;
        }
        pthread_mutex_unlock(r->top_lock);
        cb(r->name, n, top, top_len);
    }
}
