/*
 * geonear.h: private to src/exec (exec.c, geonear.c): the geo stages.
 *  - GEO_NEAR: a filter with $near / $nearSphere at its top level (or in its
 *    top-level $and) returns documents in distance order.  Over a 2dsphere
 *    index whose first field is the near field it searches growing caps: each
 *    round covers a cap twice as wide with S2 cells, reads the index entries
 *    of those cells (and of their ancestors, where shapes larger than a cell
 *    are indexed), fetches each document once, and hands out the candidates
 *    nearer than the cap's radius, nearest first: no document outside the cap
 *    can be nearer.  Otherwise (a 2d index, or a compound index with the geo
 *    field later) it reads the collection once and sorts by distance.
 *  - GEO scan: a top-level spherical $geoWithin / $geoIntersects on the first
 *    field of a 2dsphere index reads the entries of the region's covering
 *    (and ancestors) and fetches each document once; the matcher decides.
 */
#ifndef SBL_EXEC_GEONEAR_H
#define SBL_EXEC_GEONEAR_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"
#include "op/op.h"
#include "query/query.h"
#include "storage/storage.h"

typedef struct sbl_geo_exec sbl_geo_exec_t;

/*
 * When filter has $near / $nearSphere at its top level (or in its top-level
 * $and), parse it into *gp and copy the rest of the filter into rest
 * (initialised here; the caller destroys it); else *gp is NULL and rest is
 * untouched.  Errors: BadValue (2) for a malformed near, or two of them.
 */
int sbl_geo_near_extract(const bson_t *filter, bson_t *rest, sbl_geo_exec_t **gp,
                         sbl_err_t *err);
/* A top-level spherical $geoWithin / $geoIntersects of filter, as a geo scan
 * (*gp NULL when there is none). */
void sbl_geo_scan_extract(const bson_t *filter, sbl_geo_exec_t **gp);
/*
 * Choose the index of ns that serves g (on the calling thread's session).
 * A near without a 2dsphere or 2d index on its field: NoQueryExecutionPlans
 * (291); a scan without one: *usablep false.  A missing collection: usable,
 * nothing to read.
 */
int sbl_geo_exec_plan(sbl_geo_exec_t *g, const char *ns, bool *usablep, sbl_err_t *err);
/* The plan summary ("GEO_NEAR_2DSPHERE { loc: \"2dsphere\" }", "IXSCAN ..."). */
void sbl_geo_exec_summary(const sbl_geo_exec_t *g, char *buf, size_t len);
const char *sbl_geo_exec_index_name(const sbl_geo_exec_t *g);
bool sbl_geo_exec_is_near(const sbl_geo_exec_t *g);

/*
 * The next result (a new document, or NULL at the end).  m: the rest of the
 * filter (a scan's: the whole filter).  With keep, a near result carries its
 * distance and the point it was measured from in SBL_GEO_DIST_FIELD and
 * SBL_GEO_LOC_FIELD (appended).
 */
int sbl_geo_exec_next(sbl_geo_exec_t *g, sbl_opctx_t *ctx, sbl_coll_t *c, const sbl_matcher_t *m,
                      bool keep, bson_t **docp, sbl_err_t *err);
void sbl_geo_exec_free(sbl_geo_exec_t *g);

#endif
