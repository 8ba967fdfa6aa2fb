/*
 * plan.h: private to src/exec (exec.c, plan.c, explain.c):
 * the candidate plans of a query over secondary indexes and the choice among
 * them.
 *
 * What must stay true: index bounds may be looser than the filter, never
 * tighter (the executor re-checks every fetched document with the matcher);
 * a plan that provides the sort scans its intervals in index order.
 */
#ifndef SBL_EXEC_PLAN_H
#define SBL_EXEC_PLAN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/errors.h"
#include "doc/doc.h"
#include "storage/storage.h"

/* One interval of encoded index keys: lo <= key < hi (hi_len 0: no end). */
typedef struct sbl_ival {
    size_t lo_off, lo_len, hi_off, hi_len; /* into the plan's arena */
} sbl_ival_t;

typedef struct sbl_ixplan {
    sbl_index_t *ix;  /* referenced */
    sbl_buf_t *arena; /* interval bytes */
    sbl_ival_t *ivals;
    size_t nivals;
    bool backward;      /* scan the intervals (and each interval) in reverse */
    bool provides_sort; /* the scan order is the requested sort */
    bool multi_points;  /* more than one interval */
    size_t nbounded;    /* leading index fields with bounds */
    int64_t probe;      /* keys counted in the bounds (capped) */
    double cost;
    bson_t *bounds; /* explain: {field: ["[1, 1]", ...]} */
} sbl_ixplan_t;

typedef struct sbl_plan_input {
    const char *ns;
    const bson_t *filter; /* never NULL */
    const bson_t *sort;   /* NULL: none (or _id / $natural order) */
    const bson_value_t *hint; /* NULL: none */
    int64_t skip, limit;
    bool id_points; /* the filter pins _id to points: IDHACK wins */
    bool id_range;  /* the filter bounds _id */
    const sbl_collation_t *collation; /* the query's; only indexes with the same one are used */
} sbl_plan_input_t;

typedef enum {
    SBL_HINT_NONE,
    SBL_HINT_ID,      /* the _id index */
    SBL_HINT_NATURAL, /* {$natural: ±1}: a collection scan */
    SBL_HINT_INDEX    /* a secondary index */
} sbl_hint_kind_t;

/*
 * Plan in over its collection (the calling thread's session): every usable
 * secondary index becomes a candidate, costed by the keys its bounds hold
 * (probed up to a cap) against the collection scan's document count.
 * *bestp is the chosen index plan or NULL (use _id / collection scan);
 * *rejp, *nrejp: the other candidates (for explain; may be NULL).  A hint
 * naming no index gives BadValue (2) in MongoDB's words.
 */
int sbl_plan_choose(const sbl_plan_input_t *in, sbl_hint_kind_t *hintp, sbl_ixplan_t **bestp,
                    sbl_ixplan_t ***rejp, size_t *nrejp, sbl_err_t *err);
void sbl_ixplan_free(sbl_ixplan_t *p);

/* find's min/max on a hinted index: replace p's intervals with the one from
 * min (inclusive) to max (exclusive; either NULL: open).  Each must name the
 * index's key pattern fields in order (51174), both the same fields (51176),
 * and min must sort before max (51175), as mongod requires. */
int sbl_ixplan_set_min_max(sbl_ixplan_t *p, const bson_t *min, const bson_t *max,
                           const sbl_collation_t *coll, sbl_err_t *err);

/* The keyPattern of the plan's index as a document (into out, initialised by the caller). */
void sbl_ixplan_key_pattern(const sbl_ixplan_t *p, bson_t *out);
/* "IXSCAN { a: 1, b: -1 }" into buf. */
void sbl_ixplan_summary(const sbl_ixplan_t *p, char *buf, size_t len);

#endif
