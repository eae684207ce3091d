/* log.h - leveled logfmt logging to stderr.
 *
 * One line per event: `ts=... level=warn msg="..." key=value ...`. The level
 * is checked before the arguments are evaluated, so a disabled LOG_DEBUG in
 * a hot path costs one comparison. Thread-safe: each line is one write(2).
 */
#ifndef LOG_H
#define LOG_H

#include <stdatomic.h>

/* enum cfg_log_level; default info. Atomic: SIGHUP changes it while workers log. */
extern atomic_int log_level;

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fmt is the rest of the line after `msg=`: e.g. LOG_WARN("\"redis down\" err=%s", e). */
#define LOG_AT(lvl, ...)                                                                          \
    do {                                                                                          \
        if ((lvl) <= log_level)                                                                   \
            log_write((lvl), __VA_ARGS__);                                                        \
    } while (0)
#define LOG_ERROR(...) LOG_AT(0, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(1, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(2, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(3, __VA_ARGS__)

/* Parse "error|warn|info|debug"; -1 when unknown. */
int log_level_parse(const char *s);

#endif
