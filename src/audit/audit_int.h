/*
 * audit_int.h: what audit.c (buffer, writer, configuration) and audit_json.c
 * (the event formatter) share.  Private to src/audit/.
 *
 * What must stay true: the formatter writes relaxed extended JSON (the same
 * documents libbson's bson_as_relaxed_extended_json would give, one per
 * line) straight into an audit_buf_t; on allocation failure it sets oom and
 * the caller drops what was appended (len is restored).
 */
#ifndef SBL_AUDIT_INT_H
#define SBL_AUDIT_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct audit_buf {
    char *data;
    size_t len, cap;
    bool oom;      /* an append failed since the flag was last cleared */
    bool borrowed; /* data is the caller's array (not to be freed): growing
                    * moves the bytes to a heap block the buffer then owns */
} audit_buf_t;

/* The slow half of audit_buf_reserve: grow the buffer. */
bool audit_buf_grow(audit_buf_t *b, size_t n);
/* Make room for n more bytes; false (and oom set) when memory is short.
 * Inline: the formatter reserves once per element, and a call per
 * reservation was a good part of an event's cost. */
static inline bool audit_buf_reserve(audit_buf_t *b, size_t n)
{
    return b->cap - b->len >= n || audit_buf_grow(b, n);
}
static inline void audit_buf_put(audit_buf_t *b, const void *data, size_t n)
{
    if (n != 0 && audit_buf_reserve(b, n)) {
        memcpy(b->data + b->len, data, n);
        b->len += n;
    }
}
static inline void audit_buf_puts(audit_buf_t *b, const char *s)
{
    audit_buf_put(b, s, strlen(s));
}

/* s (n bytes) as a quoted, escaped JSON string. */
void audit_json_str(audit_buf_t *b, const char *s, size_t n);
/* An integer in decimal. */
void audit_json_int(audit_buf_t *b, int64_t v);
/* A document (or array) as relaxed extended JSON. */
void audit_json_doc(audit_buf_t *b, const bson_t *doc, bool array);
/* A command as param.args: the same, except that a top-level "pwd" is
 * written as "xxx" (the password of createUser/updateUser); its lsid's JSON
 * is remembered per thread (the same bytes give the same JSON). */
void audit_json_args(audit_buf_t *b, const bson_t *cmd);
/* The fields of doc without the braces ("a": 1, "b": 2), for splicing. */
void audit_json_fields(audit_buf_t *b, const bson_t *doc);
/* {"$date": "yyyy-mm-ddTHH:MM:SS.mmmZ"} for ms since the epoch. */
void audit_json_date(audit_buf_t *b, int64_t ms);
/* For tests: lower base64's code path to at most level (0 scalar, 1 SSSE3,
 * 2 AVX2; never above what the CPU runs); returns the level now in use. */
int audit_json_simd(int level);

#endif
