/* SPDX-License-Identifier: Apache-2.0 */
/* json.h - what the program adds to jansson, its one JSON writer: client
 * bytes as JSON strings, and the flags and framing every JSON body shares.
 *
 * A client's key (or any text off the wire) is arbitrary bytes, not UTF-8,
 * and jansson accepts only UTF-8. Each byte is read as Latin-1, one code
 * point U+0000..U+00FF, so every byte survives and, dumped with
 * JSON_ENSURE_ASCII, each byte < 0x20 or >= 0x80 is written as an escape.
 * Pure: no I/O; thread-safe (no shared state). */
#ifndef CORE_JSON_H
#define CORE_JSON_H

#include <jansson.h>
#include <stddef.h>

struct strbuf;

/* Compact, in insertion order, ASCII only: how every body is dumped. */
#define JSON_OUT_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)

/* len bytes of s (any bytes, NUL included) as Latin-1 in UTF-8: malloc'd,
 * NUL-terminated, its length in *out_len (if not NULL); NULL on out of
 * memory. For object keys, which jansson 2.14 takes as C strings. */
char *json_latin1_utf8(const char *s, size_t len, size_t *out_len);

/* len bytes of s as a jansson string (new reference); NULL on out of
 * memory. */
json_t *json_latin1(const char *s, size_t len);

/* doc dumped with JSON_OUT_FLAGS and a newline: malloc'd (free() it),
 * NUL-terminated, its length in *len (if not NULL). Takes the reference to
 * doc (decref'd here). NULL if doc is NULL (a build that ran out of memory)
 * or on out of memory. */
char *json_body(json_t *doc, size_t *len);

/* Appends len bytes of s as a JSON string, escaped by jansson, to text
 * built around numbers that keep their own printf formats (jansson 2.14
 * writes every real as %.17g, with ".0" added to a whole number: a fixed
 * "%.6f" column or a "%g" cannot be written through it unchanged). Out of
 * memory fails b (sticky, as every strbuf append). */
void json_put_str(struct strbuf *b, const char *s, size_t len);

#endif
