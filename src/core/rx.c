/* SPDX-License-Identifier: Apache-2.0 */
/* rx.c - PCRE2 behind the bounds of re.h. */
#include "rx.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rx {
    pcre2_code *code;
    pcre2_match_context *mctx; /* the limits, read-only once built */
};

/* Options that make a PCRE2 pattern mean what the POSIX extended regex
 * written the same way meant, where the two differ, and keep the pattern
 * from changing them: $ at the end only, bytes not UTF-8 (a pattern cannot
 * turn UTF on with (*UTF)), no \C, no captures. Inline limits such as
 * (*LIMIT_MATCH=N) can only lower ours. */
#define RX_OPTIONS                                                                                 \
    (PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP | PCRE2_NEVER_BACKSLASH_C |          \
     PCRE2_NO_AUTO_CAPTURE)

struct rx *rx_compile(const char *pattern, char *err, size_t errlen)
{
    size_t len = strlen(pattern), size = 0;
    pcre2_compile_context *cctx = NULL;
    struct rx *re = NULL;
    int code;
    PCRE2_SIZE off;

    if (len > RX_MAX_LEN) {
        snprintf(err, errlen, "longer than %d bytes", RX_MAX_LEN);
        return NULL;
    }
    if (!(re = calloc(1, sizeof(*re))) || !(cctx = pcre2_compile_context_create(NULL)) ||
        !(re->mctx = pcre2_match_context_create(NULL)))
        goto nomem;
    pcre2_set_max_pattern_length(cctx, RX_MAX_LEN);
    pcre2_set_parens_nest_limit(cctx, RX_MAX_NEST);
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, RX_OPTIONS, &code, &off, cctx);
    pcre2_compile_context_free(cctx);
    cctx = NULL;
    if (!re->code) {
        PCRE2_UCHAR why[128];
        if (code == PCRE2_ERROR_NOMEMORY)
            goto nomem;
        pcre2_get_error_message(code, why, sizeof(why));
        snprintf(err, errlen, "%s at offset %zu", (const char *)why, (size_t)off);
        rx_free(re);
        return NULL;
    }
    pcre2_pattern_info(re->code, PCRE2_INFO_SIZE, &size);
    if (size > RX_MAX_COMPILED) {
        snprintf(err, errlen, "compiles to %zu bytes, more than %d", size, RX_MAX_COMPILED);
        rx_free(re);
        return NULL;
    }
    /* A failed JIT compile (no JIT on this platform, no executable memory)
     * leaves the interpreter, which the same limits bound. */
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    pcre2_set_match_limit(re->mctx, RX_MATCH_LIMIT);
    pcre2_set_depth_limit(re->mctx, RX_DEPTH_LIMIT);
    pcre2_set_heap_limit(re->mctx, RX_HEAP_LIMIT_KIB);
    return re;
nomem:
    pcre2_compile_context_free(cctx);
    rx_free(re);
    snprintf(err, errlen, "out of memory");
    return NULL;
}

void rx_free(struct rx *re)
{
    if (!re)
        return;
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->mctx);
    free(re);
}

size_t rx_size(const struct rx *re)
{
    size_t size = 0, jit = 0;

    pcre2_pattern_info(re->code, PCRE2_INFO_SIZE, &size);
    /* 0 without JIT code (none on this platform, or its compile failed) */
    if (pcre2_pattern_info(re->code, PCRE2_INFO_JITSIZE, &jit) < 0)
        jit = 0;
    return size + jit;
}

int rx_match(const struct rx *re, const char *text, size_t len, struct rx_scratch *scr)
{
    if (!scr->match_data && !(scr->match_data = pcre2_match_data_create(1, NULL)))
        return -1;
    int rc = pcre2_match(re->code, (PCRE2_SPTR)text, len, 0, 0, scr->match_data, re->mctx);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc == PCRE2_ERROR_NOMEMORY)
        return -1;
    return RX_ELIMIT; /* match, depth, heap or JIT stack limit */
}

void rx_scratch_free(struct rx_scratch *scr)
{
    pcre2_match_data_free(scr->match_data);
    scr->match_data = NULL;
}

int rx_jit_available(void)
{
    uint32_t jit = 0;
    return pcre2_config(PCRE2_CONFIG_JIT, &jit) >= 0 && jit;
}
