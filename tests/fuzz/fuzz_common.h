/*
 * fuzz_common.h: helpers shared by the libFuzzer targets in tests/fuzz/.
 * Inputs are split into BSON documents the way the seed corpora are written:
 * one or more documents back to back, each with its own length prefix.
 * What must stay true: every target accepts any byte string and only
 * aborts (or trips a sanitizer) on a real bug in Sable.
 */
#ifndef SBL_FUZZ_COMMON_H
#define SBL_FUZZ_COMMON_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc/doc.h"

/* Take the next length-prefixed document from [*p, *p + *n) into doc (a
 * static view) when it passes Sable's input validation; advance past it. */
static inline bool fuzz_next_doc(const uint8_t **p, size_t *n, bson_t *doc)
{
    sbl_err_t err;
    int32_t len;
    if (*n < 5)
        return false;
    memcpy(&len, *p, 4);
    len = (int32_t)BSON_UINT32_FROM_LE((uint32_t)len);
    if (len < 5 || (size_t)len > *n)
        return false;
    if (sbl_doc_validate(*p, (size_t)len, &err) != 0 || !bson_init_static(doc, *p, (size_t)len)) {
        *p += len;
        *n -= (size_t)len;
        return false;
    }
    *p += len;
    *n -= (size_t)len;
    return true;
}

/* Crash loudly (a fuzzer finding) when cond does not hold. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
