/* SPDX-License-Identifier: Apache-2.0 */
/* json.c - Latin-1 bytes as jansson strings (json.h). */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

char *json_latin1_utf8(const char *s, size_t len, size_t *out_len)
{
    /* a byte >= 0x80 takes two bytes in UTF-8 (0xC2 or 0xC3, then 0x80 |
     * its low six bits) */
    char *u = malloc(2 * len + 1);
    size_t n = 0;

    if (!u)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            u[n++] = (char)c;
        } else {
            u[n++] = (char)(0xC0 | (c >> 6));
            u[n++] = (char)(0x80 | (c & 0x3F));
        }
    }
    u[n] = '\0';
    if (out_len)
        *out_len = n;
    return u;
}

json_t *json_latin1(const char *s, size_t len)
{
    size_t n;
    char *u = json_latin1_utf8(s, len, &n);

    if (!u)
        return NULL;
    /* valid UTF-8 by construction: no second check */
    json_t *j = json_stringn_nocheck(u, n);
    free(u);
    return j;
}

char *json_body(json_t *doc, size_t *len)
{
    if (!doc)
        return NULL;
    char *text = json_dumps(doc, JSON_OUT_FLAGS);
    json_decref(doc);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *body = realloc(text, n + 2);
    if (!body) {
        free(text);
        return NULL;
    }
    body[n] = '\n';
    body[n + 1] = '\0';
    if (len)
        *len = n + 1;
    return body;
}

static int put_cb(const char *text, size_t size, void *data)
{
    strbuf_put(data, text, size);
    return 0;
}

void json_put_str(struct strbuf *b, const char *s, size_t len)
{
    json_t *j = json_latin1(s, len);

    if (!j || json_dump_callback(j, put_cb, b, JSON_OUT_FLAGS | JSON_ENCODE_ANY) != 0)
        b->failed = 1;
    json_decref(j);
}
