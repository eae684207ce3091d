/* SPDX-License-Identifier: Apache-2.0 */
/* config_page.h - GET /config on the stats listener: the configuration the
 * agent runs with, as INI text. The body is config_render() of the file last
 * loaded (what `--check --print` prints for it), under a header of INI
 * comments: its hash (the spoa_ratelimit_config_hash gauge), when it was
 * loaded, and the restart-only settings whose value in that file differs
 * from the one in force (a reload does not apply them: the agent keeps what
 * it started with until a restart). Pure: no clock, no I/O.
 */
#ifndef CONFIG_PAGE_H
#define CONFIG_PAGE_H

#include <stddef.h>
#include <stdint.h>

struct config;

/* For each restart-only setting (listen, workers, max_frame_size, stats,
 * [redis] url (added or removed: a url changed in place is applied by the
 * reload), cluster, sentinel, master, timeout, prefix, [lease] interval,
 * ttl, max_fraction) whose value in file differs from in_force: fn(ctx,
 * name, value in force, value in the file), values as the page shows them
 * (a password masked). Returns how many differ. */
size_t config_page_pending(const struct config *in_force, const struct config *file,
                           void (*fn)(void *ctx, const char *name, const char *in_force,
                                      const char *file),
                           void *ctx);

/* The page for file, loaded at loaded_unix (seconds), with the restart-only
 * settings of in_force: malloc'd, NUL-terminated, its length in *len; NULL
 * when out of memory. */
char *config_page_render(const struct config *in_force, const struct config *file,
                         uint64_t loaded_unix, size_t *len);

#endif
