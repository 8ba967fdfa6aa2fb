/*
 * spill.h: private to src/cmd.  What the rest of the command layer needs of
 * agg_spill.c: start-up (parameters, emptying <dbpath>/_tmp), the memory
 * parameters for setParameter/getParameter, and the spill counters for
 * serverStatus.  The limits and the sorter themselves are in crud_int.h.
 */
#ifndef SBL_CMD_SPILL_H
#define SBL_CMD_SPILL_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"

/* Read the parameters given at start-up (BadValue when one is malformed) and
 * empty <dbpath>/_tmp of spill files an earlier process left. */
int sbl_agg_spill_init(sbl_err_t *err);

/* setParameter: set `name` from it and append {was: old} to reply; returns -1
 * when name is not one of agg_spill.c's parameters, else 0 or an error code. */
int sbl_agg_set_parameter(const char *name, const bson_iter_t *it, bson_t *reply, sbl_err_t *err);

/* getParameter: append name's current value to r; false when it is not one of them. */
bool sbl_agg_append_parameter(bson_t *r, const char *name);

/* serverStatus: append query: {group: {spills, spilledDataStorageSize,
 * spilledRecords}, sort: {spillToDisk, totalBytesSorted, totalKeysSorted}}. */
void sbl_agg_append_metrics(bson_t *metrics);

#endif
