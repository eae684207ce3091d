/* SPDX-License-Identifier: Apache-2.0 */
/* status_page.c - the status page's document and its policy (status_page.h). */
#include "status_page.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/sha256.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "status_page_src.h"

static char *html, *headers;
static size_t html_len;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void hash_source(const char *text, char out[48])
{
    struct sha256 s;
    uint8_t d[SHA256_LEN];

    sha256_init(&s);
    sha256_update(&s, text, strlen(text));
    sha256_final(&s, d);
    util_base64(d, sizeof(d), out);
}

/* The template with its two markers replaced by the style and the script. */
static void build(void)
{
    static const char css_mark[] = "/*CSS*/", js_mark[] = "/*JS*/";
    const char *t = page_html, *c = strstr(t, css_mark), *j = c ? strstr(c, js_mark) : NULL;
    struct strbuf b = STRBUF_INIT, h = STRBUF_INIT;
    char css_hash[48], js_hash[48];

    if (!c || !j)
        return; /* a broken template fails the unit test, never silently at run time */
    strbuf_put(&b, t, (size_t)(c - t));
    strbuf_put(&b, page_css, strlen(page_css));
    c += strlen(css_mark);
    strbuf_put(&b, c, (size_t)(j - c));
    strbuf_put(&b, page_js, strlen(page_js));
    j += strlen(js_mark);
    strbuf_put(&b, j, strlen(j));
    html = strbuf_finish(&b, &html_len);

    hash_source(page_css, css_hash);
    hash_source(page_js, js_hash);
    strbuf_printf(&h,
                  "Content-Security-Policy: default-src 'none'; script-src 'sha256-%s'; "
                  "style-src 'sha256-%s'; connect-src 'self'; img-src 'self'; base-uri 'none'; "
                  "form-action 'none'; frame-ancestors 'none'\r\n"
                  "Cache-Control: no-cache\r\n"
                  "X-Content-Type-Options: nosniff\r\n"
                  "X-Frame-Options: DENY\r\n"
                  "Referrer-Policy: no-referrer\r\n"
                  "Cross-Origin-Resource-Policy: same-origin\r\n",
                  js_hash, css_hash);
    headers = strbuf_finish(&h, NULL);
}

const char *status_page_html(size_t *len)
{
    pthread_once(&once, build);
    *len = html_len;
    return html;
}

const char *status_page_headers(void)
{
    pthread_once(&once, build);
    return headers;
}
