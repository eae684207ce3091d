/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - logfmt lines on stderr, one write(2) each so threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

atomic_int log_level = LOG_LVL_INFO;

const char *const log_level_names[] = {
    [LOG_LVL_ERROR] = "error", [LOG_LVL_WARN] = "warn",    [LOG_LVL_INFO] = "info",
    [LOG_LVL_DEBUG] = "debug", [LOG_LVL_DEBUG + 1] = NULL,
};

/* Room for LOG_VALUE_MAX bytes at 4 each (\xHH), quotes, "..." and NUL. */
#define SLOT_SIZE (LOG_VALUE_MAX * 4 + 8)

static _Thread_local char slots[LOG_VALUE_SLOTS][SLOT_SIZE];
static _Thread_local unsigned next_slot;

static const char hex[] = "0123456789abcdef";

/* Escape len bytes of s into out (at least 4 x len + 1 bytes); returns the
 * length written, NUL excluded. */
static size_t escape(const unsigned char *s, size_t len, char *out)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            out[n++] = '\\';
            out[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20 || c > 0x7e) {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
    return n;
}

static char *slot(void)
{
    return slots[next_slot++ % LOG_VALUE_SLOTS];
}

const char *log_esc(const void *s, size_t len)
{
    char *out = slot();
    size_t n = escape(s, len > LOG_VALUE_MAX ? LOG_VALUE_MAX : len, out);

    if (len > LOG_VALUE_MAX)
        memcpy(out + n, "...", 4);
    return out;
}

static int needs_quotes(const char *s, size_t len)
{
    if (len == 0)
        return 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '=')
            return 1;
    }
    return 0;
}

const char *log_val(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    size_t shown = len > LOG_VALUE_MAX ? LOG_VALUE_MAX : len;
    char *out = slot();
    size_t n;

    if (!needs_quotes(s, len) && len <= LOG_VALUE_MAX) {
        memcpy(out, s, len + 1);
        return out;
    }
    out[0] = '"';
    n = 1 + escape((const unsigned char *)(s ? s : ""), shown, out + 1);
    if (len > shown) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n++] = '"';
    out[n] = '\0';
    return out;
}

void log_write(int level, const char *fmt, ...)
{
    char line[2048], msg[2048];
    struct timespec ts;
    struct tm tm;
    size_t n, mlen;
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
    r = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mlen = r < 0 ? 0 : (size_t)r < sizeof(msg) ? (size_t)r : sizeof(msg) - 1;
    /* Whatever reached the message unescaped: control bytes as \xHH (4
     * bytes), as far as the line has room; the newline is ours alone. */
    for (size_t i = 0; i < mlen && n + 5 < sizeof(line); i++) {
        unsigned char c = (unsigned char)msg[i];
        if (c < 0x20 || c == 0x7f) {
            line[n++] = '\\';
            line[n++] = 'x';
            line[n++] = hex[c >> 4];
            line[n++] = hex[c & 15];
        } else {
            line[n++] = (char)c;
        }
    }
    line[n++] = '\n';
    /* stderr is unbuffered but fprintf may split; one write keeps lines whole. */
    if (write(STDERR_FILENO, line, n) == -1)
        return;
}

int log_gate_open(struct log_gate *g, double every_s, unsigned long long *suppressed)
{
    uint64_t now = util_now_us(), last = atomic_load(&g->last_us);

    if (last != 0 && now - last < (uint64_t)(every_s * 1e6)) {
        atomic_fetch_add(&g->suppressed, 1);
        return 0;
    }
    /* another thread may win the same slot: then it writes the line */
    if (!atomic_compare_exchange_strong(&g->last_us, &last, now)) {
        atomic_fetch_add(&g->suppressed, 1);
        return 0;
    }
    *suppressed = (unsigned long long)atomic_exchange(&g->suppressed, 0);
    return 1;
}

int log_gate_open_burst(struct log_gate *g, double every_s, unsigned burst,
                        unsigned long long *suppressed)
{
    uint64_t now = util_now_us(), every = (uint64_t)(every_s * 1e6);
    uint64_t tat = atomic_load(&g->last_us);

    for (;;) {
        uint64_t base = tat > now ? tat : now;
        if (base - now > (uint64_t)(burst ? burst - 1 : 0) * every) {
            atomic_fetch_add(&g->suppressed, 1);
            return 0;
        }
        if (atomic_compare_exchange_weak(&g->last_us, &tat, base + every))
            break;
    }
    *suppressed = (unsigned long long)atomic_exchange(&g->suppressed, 0);
    return 1;
}
