/* log.h - leveled logfmt logging to stderr.
 *
 * One line per event: `ts=... level=warn msg="..." key=value ...`. The level
 * is checked before the arguments are evaluated, so a disabled LOG_DEBUG in
 * a hot path costs one comparison. Thread-safe: each line is one write(2).
 */
#ifndef LOG_H
#define LOG_H

#include <stdatomic.h>

/* Levels, most severe first: a line is written when its level <= log_level.
 * The config's log_level values are these. */
enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN = 1, LOG_LVL_INFO = 2, LOG_LVL_DEBUG = 3 };

/* Their names, indexed by level and NULL-terminated: what lines say after
 * level=, and what the config's log_level accepts. */
extern const char *const log_level_names[];

/* enum log_level; default info. Atomic: SIGHUP changes it while workers log. */
extern atomic_int log_level;

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fmt is the rest of the line after `msg=`: e.g. LOG_WARN("\"redis down\" err=%s", e). */
#define LOG_AT(lvl, ...)                                                                          \
    do {                                                                                          \
        if ((lvl) <= log_level)                                                                   \
            log_write((lvl), __VA_ARGS__);                                                        \
    } while (0)
#define LOG_ERROR(...) LOG_AT(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
