/* log.c - logfmt lines on stderr, one write(2) each so threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

atomic_int log_level = LOG_LVL_INFO;

const char *const log_level_names[] = {
    [LOG_LVL_ERROR] = "error",
    [LOG_LVL_WARN] = "warn",
    [LOG_LVL_INFO] = "info",
    [LOG_LVL_DEBUG] = "debug",
    [LOG_LVL_DEBUG + 1] = NULL,
};

void log_write(int level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int r;

    if (level < LOG_LVL_ERROR || level > LOG_LVL_DEBUG)
        level = LOG_LVL_DEBUG;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    r = snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s msg=", ts.tv_nsec / 1000000,
                 log_level_names[level]);
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
