/* SPDX-License-Identifier: Apache-2.0 */
/* config_access.h - whether another user could read a file (--check).
 *
 * `--check` run as root reads every file root can; the unit runs as
 * spoa-ratelimit and cannot read a root-only password_file or NAME.ini. This
 * says so before a start that would fail: from the mode bits, owner and
 * group of the file and of each directory on its path (search bit), against
 * the user's uid, primary group and supplementary groups (getgrent). POSIX
 * ACLs and MAC policies are not read: a file an ACL opens up is reported
 * unreadable (the warning says "by its mode bits").
 */
#ifndef CONFIG_ACCESS_H
#define CONFIG_ACCESS_H

#include <stddef.h>

/* The user the shipped units run as (User= of spoa-ratelimit.service). */
#define CONFIG_SERVICE_USER "spoa-ratelimit"

/* Can user read path (as open(O_RDONLY) would by the mode bits)?
 * Returns 1 readable; 0 not, with why (the file or directory in the way, its
 * mode and owner) written into why; -1 unknown: no such user, or path does
 * not stat (the caller's own read reports that), why says which. */
int config_user_can_read(const char *path, const char *user, char *why, size_t whylen);

#endif
