/* SPDX-License-Identifier: Apache-2.0 */
/* check_util.h - what the Check unit test programs share: the runner their
 * main() ends in, and a config loaded from INI text (check_config.c, for the
 * programs that link the config module; the runner needs nothing but Check).
 */
#ifndef CHECK_UTIL_H
#define CHECK_UTIL_H

#include <check.h>
#include <stddef.h>

struct config;
struct sockaddr_storage;

#define CHECK_ERRLEN 4096 /* room for every message of a refused config */

/* Runs every test of suite s (forking, as Check does by default) and frees
 * it; returns EXIT_SUCCESS when none failed, else EXIT_FAILURE. */
int check_run(Suite *s);

/* check_run of a suite named name that holds the one test case tc. */
int check_run_case(const char *name, TCase *tc);

/* Adds the tests listed (START_TEST names) to tc, in that order; with
 * CK_RUN_TEST=name in the environment, only the one of that name. */
#define CHECK_ADD(tc, ...)                                                                         \
    check_add_tests((tc), (const TTest *const[]){__VA_ARGS__},                                     \
                    sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *))
void check_add_tests(TCase *tc, const TTest *const *tests, size_t n);

/* Adds the loop test fn over the rows of a static table. */
#define CHECK_LOOP(tc, fn, table)                                                                  \
    tcase_add_loop_test(tc, fn, 0, (int)(sizeof(table) / sizeof((table)[0])))

/* A row of a CIDR parser's table: the text, and what it must parse to. */
struct check_cidr {
    const char *s;
    int family; /* 0: must be rejected */
    unsigned prefix;
    const char *net; /* the stored network, as text */
};

/* A parser's answer rc (0 or -1) and result (family, prefix, network address
 * addr) for the row want. */
void check_cidr_parsed(const struct check_cidr *want, int rc, int family, unsigned prefix,
                       const void *addr);

/* The peer address text (IPv6 when it holds a ':') as a sockaddr in *ss. */
void check_peer_addr(const char *text, struct sockaddr_storage *ss);

/* text loaded as the file "t.ini"; fails the test, showing the errors, when
 * it is refused. */
struct config *check_config_ok(const char *text);

/* text, as "t.ini", must be refused; err receives the messages. */
void check_config_bad(const char *text, char *err, size_t errlen);

struct rx;
/* rx_match() of a compiled match regex over the NUL-terminated text s. */
int check_re(const struct rx *re, const char *s);

#endif
