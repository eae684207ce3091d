/* log.c - logfmt lines on stderr, one write(2) each so threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

atomic_int log_level = 2;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_write(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int r;

    if (level < 0 || level > 3)
        level = 3;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    r = snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s msg=", ts.tv_nsec / 1000000,
                 level_names[level]);
    if (r > 0)
        n += (size_t)r;

    va_list ap;
    va_start(ap, fmt);
    r = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (r > 0)
        n += (size_t)r < sizeof(line) - n - 1 ? (size_t)r : sizeof(line) - n - 2;
    line[n++] = '\n';
    /* stderr is unbuffered but fprintf may split; one write keeps lines whole. */
    if (write(STDERR_FILENO, line, n) == -1)
        return;
}

int log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return 1;
    return -1;
}
