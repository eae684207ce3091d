/* SPDX-License-Identifier: Apache-2.0 */
/* status_page.h - GET / on the stats listener: the status page, one
 * self-contained HTML document. Its CSS and JavaScript are kept as files in
 * src/http/page/ and embedded at build time (lua/embed.sh); the document is
 * assembled once, with the style and the script inline, and served under a
 * Content-Security-Policy that admits exactly that style and that script (by
 * their SHA-256), fetches to this origin only, and nothing else: no other
 * script, frame, form target, plugin or remote resource.
 *
 * Built on first use and kept until exit (read-only after: any thread). */
#ifndef STATUS_PAGE_H
#define STATUS_PAGE_H

#include <stddef.h>

/* The document and its length; NULL when out of memory. */
const char *status_page_html(size_t *len);

/* The header lines to send with it (Content-Security-Policy and the other
 * security and caching headers), "\r\n"-terminated; NULL out of memory. */
const char *status_page_headers(void);

#endif
