/* SPDX-License-Identifier: Apache-2.0 */
/* rules_diff.h - a unified diff of two rule texts, line by line, as
 * `diff -u` writes it (--rules-diff A B): "--- A" and "+++ B", then @@
 * hunks with RULES_DIFF_CONTEXT lines of context, "\ No newline at end of
 * file" after a last line without one.
 *
 * The shortest edit script is Myers' O(ND) greedy search, after the common
 * head and tail are set aside (an edit of a rule file is usually one
 * place). Its work is bounded by named constants, never by time: texts of
 * up to 1 MiB each (the rule store's cap) that differ in more than
 * RULES_DIFF_MAX_EDITS lines, or that need more than RULES_DIFF_MAX_WORK
 * steps, are shown as one replacement of everything between the common head
 * and tail - still a diff that `patch` applies, only not the shortest; the
 * caller is told, to say so. Pure: no I/O.
 */
#ifndef RULES_DIFF_H
#define RULES_DIFF_H

#include <stddef.h>

#define RULES_DIFF_CONTEXT 3
#define RULES_DIFF_MAX_EDITS 2000      /* lines inserted plus deleted */
#define RULES_DIFF_MAX_WORK 50000000UL /* line comparisons and search steps */

/* The diff that turns a (alen bytes) into b (blen bytes), under the names
 * aname and bname: a malloc'd, NUL-terminated text (free() it) of *len
 * bytes, "" when the texts are equal; NULL when out of memory. *whole is set
 * to 1 when the bounds above were reached and the differing middle is shown
 * as one replacement, else 0. */
char *rules_diff(const char *a, size_t alen, const char *b, size_t blen, const char *aname,
                 const char *bname, size_t *len, int *whole);

#endif
