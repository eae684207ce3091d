/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - leveled logfmt logging to stderr.
 *
 * One line per event: `ts=... level=warn msg="..." key=value ...`. The level
 * is checked before the arguments are evaluated, so a disabled LOG_DEBUG in
 * a hot path costs one comparison. Thread-safe: each line is one write(2).
 */
#ifndef LOG_H
#define LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Levels, most severe first: a line is written when its level <= log_level.
 * The config's log_level values are these. */
enum log_level { LOG_LVL_ERROR = 0, LOG_LVL_WARN = 1, LOG_LVL_INFO = 2, LOG_LVL_DEBUG = 3 };

/* Their names, indexed by level and NULL-terminated: what lines say after
 * level=, and what the config's log_level accepts. */
extern const char *const log_level_names[];

/* enum log_level; default info. Atomic: SIGHUP changes it while workers log. */
extern atomic_int log_level;

/* Writes one line. Control bytes that reach the formatted message (a value
 * passed without log_esc/log_val) are written as \xHH, so that no value can
 * end the line and forge the next one. */
void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Values from clients (keys), from Redis (errors, addresses) or from the
 * config (paths, names) go through one of these, so that a '"' cannot close
 * a quoted value and forge fields, nor a newline a line:
 *
 *   log_esc(s, len)  the body of a quoted value: '"' and '\' backslashed,
 *                    \n \r \t, other bytes outside 0x20..0x7e as \xHH. For
 *                    key="%s". s may hold NUL bytes.
 *   log_val(s)       a whole value: s as it is when it needs no quotes
 *                    (printable, no space, '=', '"' or '\', not empty), else
 *                    quoted and escaped. For key=%s. NULL is "".
 *
 * At most LOG_VALUE_MAX bytes of s are shown ("..." marks a cut). The result
 * lives in a buffer of the calling thread that stays valid for the next
 * LOG_VALUE_SLOTS - 1 calls: enough for the values of one line. */
#define LOG_VALUE_MAX 256
#define LOG_VALUE_SLOTS 8
const char *log_esc(const void *s, size_t len);
const char *log_val(const char *s);

/* fmt is the rest of the line after `msg=`: e.g. LOG_WARN("\"redis down\" err=%s", e). */
#define LOG_AT(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((lvl) <= log_level)                                                                    \
            log_write((lvl), __VA_ARGS__);                                                         \
    } while (0)
#define LOG_ERROR(...) LOG_AT(LOG_LVL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(LOG_LVL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(LOG_LVL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(LOG_LVL_DEBUG, __VA_ARGS__)

/* Rate-limited lines for events a peer can cause at will (refusals at a
 * connection cap or an allow list, DISCONNECTs): 1 when a line may be written now, with the number
 * of calls suppressed since the last line in *suppressed. At most one per every_s seconds per gate;
 * thread-safe. */
struct log_gate {
    atomic_uint_fast64_t last_us; /* 0: never */
    atomic_uint_fast64_t suppressed;
};
int log_gate_open(struct log_gate *g, double every_s, unsigned long long *suppressed);

/* The same with bursts: up to `burst` lines at once, then one per every_s
 * on average (GCRA; last_us holds the theoretical arrival time). A gate is
 * used with one of the two functions only. */
int log_gate_open_burst(struct log_gate *g, double every_s, unsigned burst,
                        unsigned long long *suppressed);

#endif
