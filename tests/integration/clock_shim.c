/* SPDX-License-Identifier: Apache-2.0 */
/* clock_shim.c - an LD_PRELOAD shim that steps a process's wall clock, for
 * the integration tests of Redis clock steps (test_redis_clock.py): the
 * wall clock (gettimeofday, time, clock_gettime of the realtime clocks) is
 * moved by the signed number of microseconds written in the file
 * $CLOCK_SHIM_FILE, read again at most every 10 ms of monotonic time; the
 * monotonic clocks are left alone. Built by the test with cc -shared. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);

static void load(void)
{
    if (!real_clock_gettime)
        *(void **)&real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    if (!real_gettimeofday)
        *(void **)&real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
}

static long long offset_us(void)
{
    static long long off, read_at = -1;
    struct timespec m;
    const char *path = getenv("CLOCK_SHIM_FILE");

    load();
    if (!path || !real_clock_gettime)
        return 0;
    real_clock_gettime(CLOCK_MONOTONIC, &m);
    long long now = (long long)m.tv_sec * 1000000 + m.tv_nsec / 1000;
    if (read_at < 0 || now - read_at > 10000) {
        FILE *f = fopen(path, "r");
        long long v = 0;
        if (f) {
            if (fscanf(f, "%lld", &v) == 1)
                off = v;
            fclose(f);
        }
        read_at = now;
    }
    return off;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    load();
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long us = (long long)ts->tv_sec * 1000000 + ts->tv_nsec / 1000 + offset_us();
        ts->tv_sec = us / 1000000;
        ts->tv_nsec = (us % 1000000) * 1000;
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    load();
    int rc = real_gettimeofday(tv, tz);
    if (rc == 0) {
        long long us = (long long)tv->tv_sec * 1000000 + tv->tv_usec + offset_us();
        tv->tv_sec = us / 1000000;
        tv->tv_usec = us % 1000000;
    }
    return rc;
}

time_t time(time_t *t)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (t)
        *t = tv.tv_sec;
    return tv.tv_sec;
}
