/*
 * check.h: the unit tests' assertion helpers.  Each test program counts
 * passed and failed checks and ends with CHECK_DONE(), which prints
 * "<name>: N passed, M failed" and returns non-zero when anything failed.
 */
#ifndef SBL_TEST_CHECK_H
#define SBL_TEST_CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_DONE(name)                                                                           \
    (printf("%s: %d passed, %d failed\n", (name), check_passed, check_failed),                     \
     check_failed ? 1 : 0)

#endif
