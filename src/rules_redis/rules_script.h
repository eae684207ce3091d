/* SPDX-License-Identifier: Apache-2.0 */
/* rules_script.h - the contract with the rule store's scripts
 * (lua/rules_push.lua, lua/rules_history.lua, lua/rules_fleet.lua,
 * lua/rules_fetch.lua): the
 * position of every argument and reply value, as src/store/script.h is for
 * the limiter's. What they mean: lua/README.md, "Rules from Redis", and
 * each script's header; tests/unit/rules_redis/test_rules_scripts.c calls them through
 * these names. Pure: constants only.
 *
 * Keys: rules_push takes KEYS = {PREFIX{rules}:current,
 * PREFIX{rules}:versions, PREFIX{rules}:agents, PREFIX{rules}:seen} (the
 * last two only read: the fleet's versions); rules_history the first two;
 * rules_fleet KEYS = {PREFIX{rules}:agents, PREFIX{rules}:seen};
 * rules_fetch KEYS = {PREFIX{rules}:v:N}. ARGV[i + 1]
 * in Lua is position i here.
 */
#ifndef RULES_SCRIPT_H
#define RULES_SCRIPT_H

enum rules_push_arg {
    RULES_PUSH_ARG_OP = 0,     /* "push" or "rollback" */
    RULES_PUSH_ARG_IF_VERSION, /* "" or N: write only if N is current */
    RULES_PUSH_ARG_HISTORY,    /* versions kept (>= 1) */
    RULES_PUSH_ARG_HOST,       /* who writes */
    RULES_PUSH_ARG_MESSAGE,    /* "" (rollback: "rollback to N") or a note */
    RULES_PUSH_ARG_TEXT,       /* push: the rule text; rollback: the version N */
    RULES_PUSH_ARG_SHA256,     /* push: the text's sha256, hex; rollback: N's, as
                                * checked (copied only if N still has it) */
    RULES_PUSH_ARG_FORCE,      /* "1": number above the fleet's highest version */
    RULES_PUSH_ARG_LIVE_MS,    /* agents that reported within this long count */
    RULES_PUSH_ARGC,
};

enum rules_push_reply {
    RULES_PUSH_R_STATUS = 0, /* enum rules_push_status */
    RULES_PUSH_R_VERSION,    /* written: the new version; else the current one */
    RULES_PUSH_R_FLEET,      /* the highest version a live agent reports (0: none) */
    RULES_PUSH_R_N,
};

enum rules_push_status {
    RULES_PUSH_BEHIND_FLEET = -2, /* the new number would not be above the fleet's
                                   * highest (the store lost versions): force */
    RULES_PUSH_NOT_KEPT = -1,     /* rollback of a version not kept (or no sha256) */
    RULES_PUSH_MOVED = 0,         /* if_version is not the current version */
    RULES_PUSH_WRITTEN = 1,
};

/* rules_history: no ARGV. Reply: the current version, then per kept
 * version, newest first, RULES_HISTORY_E_N values. */
#define RULES_HISTORY_R_CURRENT 0
#define RULES_HISTORY_R_HEAD 1
enum rules_history_entry {
    RULES_HISTORY_E_VERSION = 0,
    RULES_HISTORY_E_TIME, /* Redis time of the write, unix s */
    RULES_HISTORY_E_HOST,
    RULES_HISTORY_E_SHA256,
    RULES_HISTORY_E_MESSAGE,
    RULES_HISTORY_E_N,
};

enum rules_fleet_arg {
    RULES_FLEET_ARG_AGENT = 0, /* "host=H pid=P listen=L", or "" to only read */
    RULES_FLEET_ARG_VERSION,   /* its applied version (0: none) */
    RULES_FLEET_ARG_ERROR,     /* its last apply error, "" when none */
    RULES_FLEET_ARG_LIVE_MS,   /* older reports are gone (>= 1) */
    RULES_FLEET_ARGC,
};

/* rules_fleet's reply: the current version, Redis time (ms), then per live
 * agent RULES_FLEET_E_N values. */
#define RULES_FLEET_R_CURRENT 0
#define RULES_FLEET_R_NOW_MS 1
#define RULES_FLEET_R_HEAD 2
enum rules_fleet_entry {
    RULES_FLEET_E_AGENT = 0,
    RULES_FLEET_E_SEEN_MS, /* Redis time of its last report */
    RULES_FLEET_E_VERSION,
    RULES_FLEET_E_ERROR,
    RULES_FLEET_E_N,
};

/* rules_fetch: ARGV = {the cap in bytes}. Reply: the text and its
 * sha256 (RULES_FETCH_R_N values; nil for a missing field), or, for a text
 * larger than the cap, its size alone (RULES_FETCH_R_OVER values). */
#define RULES_FETCH_ARG_CAP 0
#define RULES_FETCH_ARGC 1
enum rules_fetch_reply {
    RULES_FETCH_R_TEXT = 0,
    RULES_FETCH_R_SHA256,
    RULES_FETCH_R_N,
};
#define RULES_FETCH_R_SIZE 0
#define RULES_FETCH_R_OVER 1

#endif
