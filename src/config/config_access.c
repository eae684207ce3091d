/* SPDX-License-Identifier: Apache-2.0 */
/* config_access.c - whether another user could read a file, by the mode
 * bits of the file and of the directories above it (config_access.h). */
#include "config_access.h"

#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Is the user (uid, primary gid, name) in group gid? */
static int in_group(gid_t gid, gid_t primary, const char *name)
{
    if (gid == primary)
        return 1;
    struct group *g = getgrgid(gid);
    if (!g || !g->gr_mem)
        return 0;
    for (char **m = g->gr_mem; *m; m++)
        if (strcmp(*m, name) == 0)
            return 1;
    return 0;
}

/* The bit of st's mode that applies to the user, from want (S_IRUSR or
 * S_IXUSR): owner, else group, else others, as the kernel picks one class. */
static int allowed(const struct stat *st, mode_t want, uid_t uid, gid_t gid, const char *name)
{
    if (uid == 0)
        return 1;
    if (st->st_uid == uid)
        return (st->st_mode & want) != 0;
    if (in_group(st->st_gid, gid, name))
        return (st->st_mode & (want >> 3)) != 0;
    return (st->st_mode & (want >> 6)) != 0;
}

static void describe(char *why, size_t whylen, const char *what, const char *path,
                     const struct stat *st, const char *user)
{
    struct passwd *o = getpwuid(st->st_uid);
    struct group *g = getgrgid(st->st_gid);
    char oid[16], gid[16];

    snprintf(oid, sizeof(oid), "%u", (unsigned)st->st_uid);
    snprintf(gid, sizeof(gid), "%u", (unsigned)st->st_gid);
    snprintf(why, whylen, "%s %s (mode %04o, %s:%s) is not %s by user %s by its mode bits", what,
             path, (unsigned)(st->st_mode & 07777), o ? o->pw_name : oid, g ? g->gr_name : gid,
             what[0] == 'f' ? "readable" : "searchable", user);
}

int config_user_can_read(const char *path, const char *user, char *why, size_t whylen)
{
    struct passwd *pw = getpwnam(user);
    struct stat st;
    char *real, *slash;

    why[0] = '\0';
    if (!pw) {
        snprintf(why, whylen, "no user %s", user);
        return -1;
    }
    uid_t uid = pw->pw_uid;
    gid_t gid = pw->pw_gid;
    char name[256];
    snprintf(name, sizeof(name), "%s", pw->pw_name); /* getgr* may reuse pw's storage */

    if (stat(path, &st) == -1 || !(real = realpath(path, NULL))) {
        snprintf(why, whylen, "cannot stat %s", path);
        return -1;
    }
    /* every directory from / down to the file needs its search bit */
    for (slash = strchr(real + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        struct stat d;
        *slash = '\0';
        int r = stat(real, &d);
        if (r == 0 && !allowed(&d, S_IXUSR, uid, gid, name)) {
            describe(why, whylen, "directory", real, &d, name);
            free(real);
            return 0;
        }
        *slash = '/';
    }
    free(real);
    if (!allowed(&st, S_IRUSR, uid, gid, name)) {
        describe(why, whylen, "file", path, &st, name);
        return 0;
    }
    return 1;
}
