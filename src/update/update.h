/*
 * update.h: update documents: operator updates ($set, $inc, ... with the
 * positional $, $[] and $[<id>] with arrayFilters) and replacements.  An
 * update is parsed once and applied to each matched document.
 *
 * What must stay true: applying never changes _id (ImmutableField 66), the
 * result is a valid document whose _id stays the first field, and an update
 * that changes nothing reports changed = false (so nModified is right).
 */
#ifndef SBL_UPDATE_H
#define SBL_UPDATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/errors.h"
#include "doc/doc.h"

typedef struct sbl_update sbl_update_t;

/*
 * Parse an update specification.  A document whose first key starts with '$'
 * is an operator update (all keys must then be operators); otherwise it is a
 * replacement (no key may start with '$').  array_filters may be NULL.
 * Errors use MongoDB's codes: FailedToParse 9 (unknown modifier, empty
 * operator), ConflictingUpdateOperators 40 (path conflicts), BadValue 2, ...
 */
sbl_update_t *sbl_update_new(const bson_t *spec, const bson_t *array_filters, sbl_err_t *err);
void sbl_update_free(sbl_update_t *u);
/* Match arrayFilters and $pull conditions, order $push's $sort and compare
 * $addToSet, $pull, $pullAll, $min and $max values under coll (NULL: binary, the
 * default); coll must outlive u. */
void sbl_update_set_collation(sbl_update_t *u, const sbl_collation_t *coll);
bool sbl_update_is_replacement(const sbl_update_t *u);

/*
 * Apply to old (the stored document) and write the new document into out
 * (initialised by the caller).  array_pos is the matcher's array position for
 * the positional $ operator (-1 if none).  is_insert is true when the
 * document is being created by an upsert ($setOnInsert applies only then).
 * now_ms is the time for $currentDate.  *changed tells whether out differs
 * from old.  Returns 0 or an error code (e.g. TypeMismatch 14 for $inc on a
 * string, 2 BadValue when the positional $ has no match).
 */
int sbl_update_apply(const sbl_update_t *u, const bson_t *old, int32_t array_pos, bool is_insert,
                     int64_t now_ms, bson_t *out, bool *changed, sbl_err_t *err);

/*
 * Build the starting document of an upsert from the equality conditions of
 * the query (top-level fields and $and of equalities; dotted paths become
 * nested documents), as MongoDB does.  Returns 0 or an error code.
 */
int sbl_upsert_seed(const bson_t *filter, bson_t *out, sbl_err_t *err);

#endif
