/* SPDX-License-Identifier: Apache-2.0 */
/* reset_msg.c - a fleet-wide reset's member in Redis (see reset_msg.h). */
#include "limits/reset_msg.h"

#include <string.h>

static const char hexd[] = "0123456789abcdef";

size_t reset_msg_size(size_t idlen, size_t rulelen, size_t ckeylen, size_t rkeylen)
{
    return idlen + rulelen + 2 * ckeylen + 2 * rkeylen + 4;
}

static int plain(const char *s)
{
    return *s && !strpbrk(s, "\t\r\n");
}

static char *hex(char *o, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        *o++ = hexd[c >> 4];
        *o++ = hexd[c & 15];
    }
    return o;
}

size_t reset_msg_format(char *out, size_t cap, const char *id, const char *rule, const char *ckey,
                        size_t ckeylen, const char *rkey, size_t rkeylen)
{
    size_t il = strlen(id), rl = strlen(rule);

    if (!plain(id) || !plain(rule) || il > RESET_MSG_ID_MAX ||
        reset_msg_size(il, rl, ckeylen, rkeylen) > cap)
        return 0;
    char *o = out;
    memcpy(o, id, il);
    o += il;
    *o++ = '\t';
    memcpy(o, rule, rl);
    o += rl;
    *o++ = '\t';
    o = hex(o, ckey, ckeylen);
    *o++ = '\t';
    o = hex(o, rkey, rkeylen);
    *o = '\0';
    return (size_t)(o - out);
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decode the hex run s[0..len) into out; its length, or -1. */
static long unhex(const char *s, size_t len, char *out)
{
    if (len % 2)
        return -1;
    for (size_t i = 0; i < len; i += 2) {
        int a = nibble(s[i]), b = nibble(s[i + 1]);
        if (a < 0 || b < 0)
            return -1;
        out[i / 2] = (char)(a << 4 | b);
    }
    return (long)(len / 2);
}

int reset_msg_parse(const char *s, size_t len, char *buf, struct reset_msg *m)
{
    const char *f[4];
    size_t fl[4], n = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '\t')
            continue;
        if (n == 4)
            return -1; /* a fifth field */
        f[n] = s + start;
        fl[n++] = i - start;
        start = i + 1;
    }
    if (n != 4 || !fl[0] || !fl[1] || fl[0] > RESET_MSG_ID_MAX || memchr(s, '\0', len))
        return -1;
    /* id NUL rule NUL ckey rkey: the decoded keys are half their hex */
    char *o = buf;
    memcpy(o, f[0], fl[0]);
    o[fl[0]] = '\0';
    m->id = o;
    o += fl[0] + 1;
    memcpy(o, f[1], fl[1]);
    o[fl[1]] = '\0';
    m->rule = o;
    o += fl[1] + 1;
    long cl = unhex(f[2], fl[2], o);
    if (cl < 0)
        return -1;
    m->client_key = o;
    m->client_keylen = (size_t)cl;
    o += cl;
    long rl = unhex(f[3], fl[3], o);
    if (rl <= 0)
        return -1;
    m->redis_key = o;
    m->redis_keylen = (size_t)rl;
    return 0;
}

int reset_msg_from(const char *id, const char *agent_id)
{
    size_t n = strlen(agent_id);

    return strncmp(id, agent_id, n) == 0 && id[n] == ':';
}
