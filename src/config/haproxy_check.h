/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_check.h - an HAProxy config, and the SPOE file its "filter spoe"
 * names, checked against the agent's config (--check --haproxy): what would
 * leave the agent never asked, or its answer unused.
 *
 * Found: no "filter spoe"; an SPOE file that HAProxy would not find (a
 * relative path without "default-path config" is relative to the directory
 * HAProxy starts in: / under systemd); no "send-spoe-group" (nor a message
 * with an "event") sending what the rules read, or one whose condition reads
 * a variable that nothing sets before it; messages and args a rule reads
 * (message, key, match, arg: of rate, burst and cost) that no sent message
 * carries; a concurrency rule whose release message no response rule sends;
 * an "option var-prefix" that the deny and header lines do not read; agents
 * (the SPOE "use-backend" backend's servers) none of which is at the agent's
 * listen address.
 *
 * Pure: files and the environment come through the caller's hooks, nothing
 * is printed; messages are appended to a caller's buffer.
 */
#ifndef HAPROXY_CHECK_H
#define HAPROXY_CHECK_H

#include "core/strbuf.h"

struct config;

struct haproxy_check_io {
    /* The text of the file at path (as HAProxy would open it: relative
     * paths are relative to the caller's working directory), malloc'd and
     * NUL-terminated; NULL with errno set when it cannot be read. */
    char *(*read_file)(void *ctx, const char *path);
    /* An environment variable as HAProxy would see it at start; NULL: unset. */
    const char *(*get_env)(void *ctx, const char *name);
    void *ctx;
};

/* Check the HAProxy config at cfg_path against cfg (the agent's config,
 * whose path names it in messages about its rules). Appends one line per
 * finding to out: "FILE:LINE: message" for an error, "FILE:LINE: warning:
 * message" for what may be intended (the check cannot tell: a server named
 * by a host name, a variable only Lua could set, a relative SPOE path).
 * Returns the number of errors (0: HAProxy asks the agent and uses its
 * answer), or -1 out of memory. *warnings (when not NULL) gets the number of
 * warnings. */
int haproxy_check(const struct config *cfg, const char *cfg_path, const struct haproxy_check_io *io,
                  struct strbuf *out, int *warnings);

#endif
