/*
 * doc_int.h: private to src/doc.  The canonical form of a BSON number that
 * both comparison (doc_cmp.c) and the key encoding (doc_key.c) are built on,
 * so that the two can never disagree, and the keystring type tags.
 *
 * What must stay true: the tag values are part of the on-disk key format
 * (see doc_key.c); never renumber them.
 */
#ifndef SBL_DOC_INT_H
#define SBL_DOC_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

/* Keystring type tags, in MongoDB's cross-type order.  0x00 ends a document or array. */
enum {
    KT_END = 0x00,
    KT_MINKEY = 0x0A,
    KT_NULL = 0x14,
    KT_NUM = 0x1E, /* numbers use 0x1E..0x27, one tag per numeric class (NK_*) */
    KT_STRING = 0x28,
    KT_OBJECT = 0x32,
    KT_ARRAY = 0x3C,
    KT_BINARY = 0x46,
    KT_OID = 0x50,
    KT_BOOL = 0x5A,
    KT_DATE = 0x64,
    KT_TIMESTAMP = 0x6E,
    KT_REGEX = 0x78,
    KT_DBPOINTER = 0x82,
    KT_CODE = 0x8C,
    KT_CODEWSCOPE = 0x96,
    KT_MAXKEY = 0xF0,
};

/* Numeric classes, ordered by value; each is also the number's key tag. */
enum {
    NK_NAN = 0x1E,
    NK_NEG_INF = 0x1F,
    NK_NEG_HUGE = 0x20, /* decimal128 with magnitude >= 1e4900 */
    NK_NEG = 0x21,
    NK_NEG_TINY = 0x22, /* decimal128 with magnitude < 1e-4900 */
    NK_ZERO = 0x23,
    NK_POS_TINY = 0x24,
    NK_POS = 0x25,
    NK_POS_HUGE = 0x26,
    NK_POS_INF = 0x27,
};

/*
 * A number's exact value.  For NK_NEG/NK_POS the magnitude is
 * (1 + frac / 2^64) * 2^exp; when inexact is set (decimal128 only) the true
 * magnitude lies strictly between that and the next 64-bit-mantissa value,
 * and dexp/dig (the decimal itself) order values inside that gap.  For the
 * TINY/HUGE classes only dexp/dig are used.  dig holds digit values 0..9,
 * most significant first, with no trailing zeros; dexp is the exponent of the
 * first digit (value = d.ddd * 10^dexp).
 */
typedef struct sbl_numkey {
    uint8_t cls;
    bool inexact;
    uint8_t ndig;
    int32_t exp;
    uint64_t frac;
    int32_t dexp;
    uint8_t dig[34];
} sbl_numkey_t;

/* True for the BSON types that are numbers. */
bool sbl_is_number(bson_type_t t);
/* Canonical form of a numeric value (v must be a number type). */
void sbl_numkey_make(const bson_value_t *v, sbl_numkey_t *k);
/* Three-way comparison of two canonical numbers. */
int sbl_numkey_cmp(const sbl_numkey_t *a, const sbl_numkey_t *b);
/* Append a number's key encoding (tag included). */
void sbl_numkey_append(sbl_buf_t *out, const sbl_numkey_t *k);

/* A bounds-checked reader over key bytes; every byte read is XORed with mask. */
typedef struct sbl_keyrd {
    const uint8_t *p;
    size_t len;
    size_t pos;
    uint8_t mask;
} sbl_keyrd_t;

/* Read one byte; false at end of input. */
static inline bool sbl_keyrd_byte(sbl_keyrd_t *r, uint8_t *b)
{
    if (r->pos >= r->len)
        return false;
    *b = r->p[r->pos++] ^ r->mask;
    return true;
}

/*
 * Decode a number whose tag (tag, already read) is one of NK_*; append it to
 * doc under key k.  Returns false on malformed input.
 */
bool sbl_numkey_decode(sbl_keyrd_t *r, uint8_t tag, bson_t *doc, const char *k);

#endif
