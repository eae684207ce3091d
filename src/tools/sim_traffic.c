/* SPDX-License-Identifier: Apache-2.0 */
/* sim_traffic.c - generated and replayed requests for the simulator. */
#include "tools/sim_traffic.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define LINE_MAX_LEN 4096

/* ---- random numbers ------------------------------------------------------------- */

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void sim_rng_seed(struct sim_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) { /* splitmix64 spreads the seed over the state */
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t sim_rng_next(struct sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double sim_rng_unit(struct sim_rng *r)
{
    return (double)(sim_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- names to numbers ------------------------------------------------------------- */

struct name_map {
    char **names;    /* by number */
    uint32_t *slots; /* number + 1; 0: free */
    size_t n, nslots;
};

static int map_grow(struct name_map *m)
{
    size_t ns = m->nslots ? m->nslots * 2 : 1024;
    uint32_t *slots = calloc(ns, sizeof(*slots));
    char **names = realloc(m->names, ns / 2 * sizeof(*names));
    if (!slots || !names) {
        free(slots);
        if (names)
            m->names = names;
        return -1;
    }
    m->names = names;
    for (size_t i = 0; i < m->nslots; i++) {
        if (!m->slots[i])
            continue;
        const char *s = m->names[m->slots[i] - 1];
        size_t j = util_hash(UTIL_HASH_INIT, s, strlen(s)) & (ns - 1);
        while (slots[j])
            j = (j + 1) & (ns - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = ns;
    return 0;
}

/* The number of name (len bytes), given a new one when first seen; -1 OOM. */
static int64_t map_get(struct name_map *m, const char *name, size_t len)
{
    if (m->n + 1 > m->nslots / 2 && map_grow(m) < 0)
        return -1;
    size_t j = util_hash(UTIL_HASH_INIT, name, len) & (m->nslots - 1);
    for (; m->slots[j]; j = (j + 1) & (m->nslots - 1)) {
        const char *s = m->names[m->slots[j] - 1];
        if (strncmp(s, name, len) == 0 && s[len] == '\0')
            return m->slots[j] - 1;
    }
    char *copy = strndup(name, len);
    if (!copy)
        return -1;
    m->names[m->n] = copy;
    m->slots[j] = (uint32_t)++m->n;
    return (int64_t)m->n - 1;
}

static void map_free(struct name_map *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->names[i]);
    free(m->names);
    free(m->slots);
}

/* ---- traces ------------------------------------------------------------------------ */

struct trace_req {
    uint64_t at_us;
    uint32_t key;
    int32_t agent; /* -1: unnamed */
};

struct sim_trace {
    struct trace_req *req;
    size_t n, cap;
    uint64_t keys;
    unsigned agents;
};

static int by_time(const void *a, const void *b)
{
    const struct trace_req *x = a, *y = b;
    return x->at_us < y->at_us ? -1 : x->at_us > y->at_us;
}

/* One line into *r; 1 to skip it, -1 malformed. */
static int parse_line(char *line, struct name_map *keys, struct name_map *agents,
                      struct trace_req *r)
{
    char *p = line, *end;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0' || *p == '#')
        return 1;
    errno = 0;
    double s = strtod(p, &end);
    if (end == p || errno || !isfinite(s) || s < 0 || s > 1e9 || !isspace((unsigned char)*end))
        return -1;
    p = end;
    while (isspace((unsigned char)*p))
        p++;
    size_t klen = strcspn(p, " \t\r\n");
    if (klen == 0)
        return -1;
    int64_t k = map_get(keys, p, klen);
    p += klen;
    while (isspace((unsigned char)*p))
        p++;
    size_t alen = strcspn(p, " \t\r\n");
    int64_t a = alen ? map_get(agents, p, alen) : -1;
    if (k < 0 || (alen && a < 0) || k > INT32_MAX)
        return -2;
    r->at_us = (uint64_t)llround(s * 1e6);
    r->key = (uint32_t)k;
    r->agent = (int32_t)a;
    return 0;
}

struct sim_trace *sim_trace_load(const char *path, char *err, size_t errlen)
{
    struct name_map keys = {0}, agents = {0};
    struct sim_trace *t = calloc(1, sizeof(*t));
    FILE *f = fopen(path, "r");
    char line[LINE_MAX_LEN];
    unsigned long lineno = 0;
    int sorted = 1;

    if (!t || !f) {
        snprintf(err, errlen, "%s: %s", path, f ? "out of memory" : strerror(errno));
        goto fail;
    }
    while (fgets(line, sizeof(line), f)) {
        struct trace_req r;
        lineno++;
        int v = parse_line(line, &keys, &agents, &r);
        if (v == 1)
            continue;
        if (v < 0) {
            snprintf(err, errlen,
                     v == -1 ? "%s:%lu: want SECONDS KEY [AGENT]" : "%s:%lu: out of memory", path,
                     lineno);
            goto fail;
        }
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 4096;
            struct trace_req *q = realloc(t->req, cap * sizeof(*q));
            if (!q) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto fail;
            }
            t->req = q;
            t->cap = cap;
        }
        if (t->n && r.at_us < t->req[t->n - 1].at_us)
            sorted = 0;
        t->req[t->n++] = r;
    }
    if (t->n == 0) {
        snprintf(err, errlen, "%s: no requests", path);
        goto fail;
    }
    if (!sorted) /* requests at one instant may change order: they are simultaneous */
        qsort(t->req, t->n, sizeof(*t->req), by_time);
    t->keys = keys.n;
    t->agents = (unsigned)agents.n;
    map_free(&keys);
    map_free(&agents);
    fclose(f);
    return t;
fail:
    map_free(&keys);
    map_free(&agents);
    if (f)
        fclose(f);
    sim_trace_free(t);
    return NULL;
}

void sim_trace_free(struct sim_trace *t)
{
    if (t) {
        free(t->req);
        free(t);
    }
}

uint64_t sim_trace_keys(const struct sim_trace *t)
{
    return t->keys;
}

unsigned sim_trace_agents(const struct sim_trace *t)
{
    return t->agents;
}

uint64_t sim_trace_requests(const struct sim_trace *t)
{
    return t->n;
}

double sim_trace_seconds(const struct sim_trace *t)
{
    return (double)t->req[t->n - 1].at_us / 1e6;
}

/* ---- the generator -------------------------------------------------------------------- */

struct sim_traffic {
    struct sim_opts o;
    struct sim_rng rng;
    double *cdf;      /* Zipf: cumulative weights by key; NULL: uniform */
    double peak_rate; /* per us, the highest rate (thinning) */
    double t_us;      /* the last candidate arrival */
    uint64_t end_us;
    size_t next; /* trace: the next request */
    unsigned rr; /* trace: round-robin agent for unnamed requests */
};

struct sim_traffic *sim_traffic_new(const struct sim_opts *o, char *err, size_t errlen)
{
    struct sim_traffic *t = calloc(1, sizeof(*t));

    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->o = *o;
    sim_rng_seed(&t->rng, o->seed);
    t->end_us = (uint64_t)(o->seconds * 1e6);
    if (o->trace)
        return t;
    if (o->keys == 0 || o->keys > UINT32_MAX || o->agents == 0 || !(o->rps > 0)) {
        snprintf(err, errlen, "need keys in 1..2^32-1, agents >= 1, rps > 0");
        free(t);
        return NULL;
    }
    if (o->zipf > 0) {
        t->cdf = malloc(o->keys * sizeof(*t->cdf));
        if (!t->cdf) {
            snprintf(err, errlen, "out of memory for %llu keys", (unsigned long long)o->keys);
            free(t);
            return NULL;
        }
        double sum = 0;
        for (uint64_t i = 0; i < o->keys; i++)
            t->cdf[i] = (sum += pow((double)(i + 1), -o->zipf));
    }
    double factor = o->spike_factor > 1 && o->spike_len_us ? o->spike_factor : 1;
    t->peak_rate = o->rps * factor / 1e6;
    return t;
}

void sim_traffic_free(struct sim_traffic *t)
{
    if (t) {
        free(t->cdf);
        free(t);
    }
}

static double rate_at(const struct sim_traffic *t, uint64_t at_us)
{
    const struct sim_opts *o = &t->o;
    if (o->spike_factor > 1 && o->spike_len_us && o->spike_every_us &&
        at_us % o->spike_every_us < o->spike_len_us)
        return o->rps * o->spike_factor / 1e6;
    return o->rps / 1e6;
}

static uint32_t pick_key(struct sim_traffic *t)
{
    if (!t->cdf)
        return (uint32_t)(sim_rng_unit(&t->rng) * (double)t->o.keys);
    double u = sim_rng_unit(&t->rng) * t->cdf[t->o.keys - 1];
    size_t lo = 0, hi = t->o.keys - 1; /* the first i with cdf[i] > u */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return (uint32_t)lo;
}

/* Each key's home agent (for --skew): spread by a multiplicative hash. */
static unsigned home_of(uint32_t key, unsigned agents)
{
    return (unsigned)((((uint64_t)key * 0x9e3779b97f4a7c15ull) >> 32) % agents);
}

int sim_traffic_next(struct sim_traffic *t, uint64_t *at_us, uint32_t *key, unsigned *agent)
{
    if (t->o.trace) {
        const struct sim_trace *tr = t->o.trace;
        if (t->next >= tr->n || tr->req[t->next].at_us >= t->end_us)
            return 1;
        const struct trace_req *r = &tr->req[t->next++];
        *at_us = r->at_us;
        *key = r->key;
        *agent = r->agent >= 0 ? (unsigned)r->agent % t->o.agents : t->rr++ % t->o.agents;
        return 0;
    }
    /* Poisson arrivals at the peak rate, each kept with probability
     * rate(t) / peak (thinning): exact for a rate that changes in steps. */
    for (;;) {
        t->t_us += -log(1.0 - sim_rng_unit(&t->rng)) / t->peak_rate;
        if (t->t_us >= (double)t->end_us)
            return 1;
        uint64_t at = (uint64_t)t->t_us;
        if (sim_rng_unit(&t->rng) * t->peak_rate < rate_at(t, at)) {
            *at_us = at;
            break;
        }
    }
    *key = pick_key(t);
    if (t->o.skew > 0 && sim_rng_unit(&t->rng) < t->o.skew)
        *agent = home_of(*key, t->o.agents);
    else
        *agent = (unsigned)(sim_rng_unit(&t->rng) * t->o.agents);
    return 0;
}

/* spoa-sim's durations, "0.3ms", "250us", "1s": microseconds (sim.h). */
int sim_parse_us(const char *s, uint64_t *us)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"us", 1}, {"ms", 1e3}, {"s", 1e6}, {"m", 6e7}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v > 1e12)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            *us = (uint64_t)llround(v * units[i].mult);
            return 0;
        }
    }
    return -1;
}
