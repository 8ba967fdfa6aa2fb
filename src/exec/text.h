/*
 * text.h: private to src/exec (exec.c, text.c): the $text stage.  A query
 * whose filter has a top-level $text reads the collection's text index: each
 * positive term's entries give candidate documents and their scores (summed
 * over the terms), the candidates are read best first and checked against
 * what the index cannot answer (negations, phrases, case and diacritic
 * sensitivity) and the rest of the filter, and each result carries its score
 * in the hidden field SBL_TEXT_SCORE_FIELD.
 */
#ifndef SBL_EXEC_TEXT_H
#define SBL_EXEC_TEXT_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"
#include "op/op.h"
#include "query/query.h"
#include "storage/storage.h"

typedef struct sbl_text_exec sbl_text_exec_t;

/*
 * When filter has $text at its top level, parse it into *tp and copy the rest
 * of the filter into rest (initialised here, the caller destroys it); else *tp
 * is NULL and rest is untouched.  Errors: BadValue (2) for a malformed $text,
 * two $text, or $text below the top level.
 */
int sbl_text_parse(const bson_t *filter, bson_t *rest, sbl_text_exec_t **tp, sbl_err_t *err);

/*
 * The next result (a new document with its score appended, or NULL at the
 * end).  The first call finds c's text index and reads it: IndexNotFound (27)
 * without one, BadValue (2) when the filter does not pin its prefix keys.
 * m: the rest of the filter.
 */
int sbl_text_next(sbl_text_exec_t *t, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                  const bson_t *rest, bson_t **docp, sbl_err_t *err);

void sbl_text_free(sbl_text_exec_t *t);

#endif
