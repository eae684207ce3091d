/* check_util.h - what the Check unit test programs share: the runner their
 * main() ends in, and a config loaded from INI text (check_config.c, for the
 * programs that link the config module; the runner needs nothing but Check).
 */
#ifndef CHECK_UTIL_H
#define CHECK_UTIL_H

#include <check.h>
#include <stddef.h>

struct config;

#define CHECK_ERRLEN 4096 /* room for every message of a refused config */

/* Runs every test of suite s (forking, as Check does by default) and frees
 * it; returns EXIT_SUCCESS when none failed, else EXIT_FAILURE. */
int check_run(Suite *s);

/* check_run of a suite named name that holds the one test case tc. */
int check_run_case(const char *name, TCase *tc);

/* Adds the tests listed (START_TEST names) to tc, in that order. */
#define CHECK_ADD(tc, ...)                                                    \
    check_add_tests((tc), (const TTest *const[]){__VA_ARGS__},                \
                    sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *))
void check_add_tests(TCase *tc, const TTest *const *tests, size_t n);

/* Adds the loop test fn over the rows of a static table. */
#define CHECK_LOOP(tc, fn, table) \
    tcase_add_loop_test(tc, fn, 0, (int)(sizeof(table) / sizeof((table)[0])))

/* text loaded as the file "t.ini"; fails the test, showing the errors, when
 * it is refused. */
struct config *check_config_ok(const char *text);

/* text, as "t.ini", must be refused; err receives the messages. */
void check_config_bad(const char *text, char *err, size_t errlen);

#endif
