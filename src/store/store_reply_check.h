/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_check.h - whether a script's reply is one the script can
 * give: the number of values its layout (script.h) has, each a value its
 * script answers (no negative count or time, a flag of 0 or 1, no more
 * granted or given back than was asked). The one place a malformed reply is
 * told from a decision: a Redis (or a proxy, or something that only speaks
 * RESP) that answers anything else breaks the contract, and what it says
 * cannot be trusted for any call (store_errors.h: kind bad_reply).
 *
 * Pure: the caller hands the values read (store_reply_values) and the
 * call's own arguments.
 */
#ifndef STORE_REPLY_CHECK_H
#define STORE_REPLY_CHECK_H

#include "store_result.h"

/* NULL when res (STORE_OK, the values of a reply of elements elements) is
 * a reply a call of script (enum store_script, not the batch) with its ARGV
 * argv[0..argc) can get; else what is wrong with it, a static string for
 * the log ("4 values, tb_exact answers 5", "granted above want", ...). */
const char *store_reply_check(int script, const struct store_result *res, size_t elements, int argc,
                              char *const *argv);

#endif
