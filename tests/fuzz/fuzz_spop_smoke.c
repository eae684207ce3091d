/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_spop_smoke.c - the standalone build of the SPOP fuzz target
 * (tests/fuzz/fuzz_smoke, in "make check"): seed inputs from the captured
 * frames of tests/unit/spop_vectors.h and NOTIFYs carrying limits as args,
 * each under a few configs, and this target's own mutations of them, run by
 * the shared driver (fuzz_main.h). It also writes the seed corpus (-d DIR)
 * and replays inputs saved in files (fuzz_smoke FILE...). */
#include "fuzz_spop.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spop/spop.h"
#include "spop_vectors.h"

/* The driver is fuzz_main.h's (included below); the mutations are this
 * target's own (after it): they keep the mode and config head and insert
 * captured frames. */
#define FUZZ_NAME "fuzz_smoke"
#define FUZZ_ITERATIONS 50000
#define FUZZ_MAX_INPUT 2048
#define FUZZ_MAX_MUTATIONS 8
#define FUZZ_OWN_MUTATE
#define HEAD (1 + CFG_BYTES) /* the mode and config bytes */

/* Seeds: mode bytes times sequences of frames (indexes into spop_vectors[],
 * or SEED_LIMITS + i for the NOTIFYs of limits_notify(); -1 ends), each under
 * one of the configs of seed_cfgs[]. Modes with MODE_PREPEND_HELLO get the
 * HELLO for free; the others carry their own. */
#define SEED_LIMITS 100
static const uint8_t seed_modes[] = {0x80, 0x81, 0x84, 0x87, 0xc0, 0xe5, 0x92, 0x8e, 0x00, 0x46};
static const int seed_frames[][8] = {
    {SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV6, SPOP_VEC_HAPROXY_DISCONNECT, -1},
    {SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV6,
     SPOP_VEC_NOTIFY_IPV6, -1},
    {SPOP_VEC_HAPROXY_HELLO, SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV6, -1},
    {SPOP_VEC_HAPROXY_HELLO_HEALTHCHECK, -1},
    {SPOP_VEC_HAPROXY_HELLO, SPOP_VEC_HAPROXY_DISCONNECT, -1},
    {SPOP_VEC_HAPROXY_HELLO, -1},
    {SEED_LIMITS, SEED_LIMITS + 1, SEED_LIMITS, SEED_LIMITS + 2, SEED_LIMITS + 3, SEED_LIMITS,
     SEED_LIMITS, -1},
    {SPOP_VEC_HAPROXY_HELLO, SEED_LIMITS + 3, SEED_LIMITS, SEED_LIMITS + 1, SEED_LIMITS,
     SPOP_VEC_NOTIFY_IPV4, SEED_LIMITS, -1},
};
/* Configs (see config_text): the first is close to the one this target
 * used to have built in; the others go through leases, exact calls and
 * exact-cold claims, limits from args, small keys, the closed fallback. */
static const uint8_t seed_cfgs[][CFG_BYTES] = {
    {0x03, 0x14, 0x09, 0x40, 0x2c}, {0x07, 0x07, 0x0b, 0x8d, 0x45}, {0x87, 0x04, 0x44, 0x84, 0x23},
    {0x7f, 0x13, 0x07, 0x4b, 0x8f}, {0x00, 0x04, 0x00, 0x00, 0x00}, {0x27, 0x05, 0x06, 0x09, 0x0a},
    {0x46, 0x11, 0x51, 0x91, 0x03},
};
#define NSEED_MODES (sizeof(seed_modes) / sizeof(seed_modes[0]))
#define NSEED_CFGS (sizeof(seed_cfgs) / sizeof(seed_cfgs[0]))
#define NSEEDS (NSEED_MODES * (sizeof(seed_frames) / sizeof(seed_frames[0])))

/* A NOTIFY of "check-rate" whose args carry limits (rate, burst) besides the
 * captures' key, ip, path, method, plan, n and b: asking for less than the
 * ceilings, more, nonsense, and none with a long key. */
static size_t limits_notify(unsigned i, uint8_t *buf, size_t cap)
{
    static const char *const args[][6] = {
        /* key, path, method, plan, rate, burst */
        {"tenant-1", "/login", "GET", "free", "5/1s", "3"},
        {"tenant-2", "/api/v1", "POST", "paid", "1000000/1s", "999999999"},
        {"tenant-1", "/x", "PUT", "gold", "bogus", ""},
        {"a-key-long-enough-to-be-hashed-by-a-small-max_key", "/login", "GET", "free", "1/1h",
         NULL},
    };
    static const char *const names[] = {"key", "path", "method", "plan", "rate", "burst"};
    struct spop_writer w = {buf, buf + cap};
    uint8_t *start;
    struct spop_data d;
    unsigned nargs = args[i][5] ? 9 : 8;

    if (spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 11 + i, 1, &start) < 0 ||
        spop_put_str(&w, "check-rate", 10) < 0 || w.p == w.end)
        return 0;
    *w.p++ = (uint8_t)nargs;
    for (unsigned a = 0; a < 6; a++) {
        if (!args[i][a])
            continue;
        d.type = SPOP_DATA_STR;
        d.u.buf.ptr = args[i][a];
        d.u.buf.len = strlen(args[i][a]);
        if (spop_put_str(&w, names[a], strlen(names[a])) < 0 || spop_put_data(&w, &d) < 0)
            return 0;
    }
    d = (struct spop_data){.type = SPOP_DATA_IPV4, .u.ip = {192, 0, 2, (uint8_t)(1 + i)}};
    if (spop_put_str(&w, "ip", 2) < 0 || spop_put_data(&w, &d) < 0)
        return 0;
    d = spop_int(7 * (int64_t)i);
    if (spop_put_str(&w, "n", 1) < 0 || spop_put_data(&w, &d) < 0)
        return 0;
    d = spop_bool(i % 2 == 0);
    if (spop_put_str(&w, "b", 1) < 0 || spop_put_data(&w, &d) < 0)
        return 0;
    if (spop_frame_end(&w, start) < 0)
        return 0;
    return (size_t)(w.p - buf);
}

/* Seed k into buf (FUZZ_MAX_INPUT bytes); returns its length. */
static size_t fuzz_seed(size_t k, uint8_t *buf)
{
    const int *frames = seed_frames[k / NSEED_MODES];
    size_t len = 0;

    buf[len++] = seed_modes[k % NSEED_MODES];
    memcpy(buf + len, seed_cfgs[k % NSEED_CFGS], CFG_BYTES);
    len += CFG_BYTES;
    for (size_t i = 0; frames[i] >= 0; i++) {
        if (frames[i] >= SEED_LIMITS) {
            len +=
                limits_notify((unsigned)(frames[i] - SEED_LIMITS), buf + len, FUZZ_MAX_INPUT - len);
            continue;
        }
        const struct spop_vector *v = &spop_vectors[frames[i]];

        if (len + v->len > FUZZ_MAX_INPUT)
            break;
        memcpy(buf + len, v->data, v->len);
        len += v->len;
    }
    return len;
}

static size_t fuzz_nseeds(void)
{
    return NSEEDS;
}

static void fuzz_summary(void)
{
    fuzz_spop_summary(FUZZ_NAME);
}

#include "fuzz_main.h"

void fuzz_spop_report_input(void)
{
    fuzz_report_input();
}

/* One to FUZZ_MAX_MUTATIONS random edits of buf[0..len); returns the new
 * length (at most FUZZ_MAX_INPUT). */
static size_t fuzz_mutate(uint64_t *s, uint8_t *buf, size_t len)
{
    static const uint8_t interesting[] = {0x00, 0x01, 0x03, 0x07, 0x08, 0x0f, 0x10,
                                          0x11, 0x7f, 0x80, 0xef, 0xf0, 0xfe, 0xff};
    unsigned n = 1 + (unsigned)(fuzz_rnd(s) % FUZZ_MAX_MUTATIONS);

    for (unsigned m = 0; m < n; m++) {
        /* edits of the frames leave the mode and config bytes alone: a new
         * config is a ruleset to build, the smoke run's costliest step */
        size_t pos = len > HEAD ? HEAD + (size_t)(fuzz_rnd(s) % (len - HEAD)) : 0;

        switch (fuzz_rnd(s) % 8) {
        case 0: /* flip a bit */
            if (len)
                buf[pos] ^= (uint8_t)(1u << (fuzz_rnd(s) % 8));
            break;
        case 1: /* an interesting byte */
            if (len)
                buf[pos] = interesting[fuzz_rnd(s) % sizeof(interesting)];
            break;
        case 2: /* a random byte */
            if (len)
                buf[pos] = (uint8_t)fuzz_rnd(s);
            break;
        case 3: /* insert a byte */
            if (len < FUZZ_MAX_INPUT) {
                memmove(buf + pos + 1, buf + pos, len - pos);
                buf[pos] = (uint8_t)fuzz_rnd(s);
                len++;
            }
            break;
        case 4:
            len = fuzz_delete_range(s, buf, len, pos);
            break;
        case 5:
            fuzz_copy_range(s, buf, len, pos);
            break;
        case 6: { /* insert a captured frame */
            const struct spop_vector *v = &spop_vectors[fuzz_rnd(s) % SPOP_NVECTORS];
            if (len + v->len <= FUZZ_MAX_INPUT) {
                memmove(buf + pos + v->len, buf + pos, len - pos);
                memcpy(buf + pos, v->data, v->len);
                len += v->len;
            }
            break;
        }
        default: /* another mode, or now and then one bit of the config */
            if (len > HEAD && fuzz_rnd(s) % 4 == 0)
                buf[1 + fuzz_rnd(s) % CFG_BYTES] ^= (uint8_t)(1u << (fuzz_rnd(s) % 8));
            else if (len)
                buf[0] = (uint8_t)fuzz_rnd(s);
            break;
        }
    }
    return len;
}
