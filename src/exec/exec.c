/*
 * exec.c: plan and iterate the documents matching a filter, shared by
 * find, count, distinct, update, delete, findAndModify and aggregate.
 *
 * The plan comes from what the filter says about _id: point lookups
 * (sbl_coll_get per value), a bounded _id range scan, or a full scan; the
 * matcher then checks every document.  A sort on _id alone is the scan
 * direction; any other sort collects the matches and sorts them in memory
 * (keeping at most skip+limit of them when limited: top-k).  An unlimited
 * sort whose matches outgrow internalQueryMaxBlockingSortMemoryUsageBytes
 * goes through spill.c's sorter (allowDiskUse) or fails with 292.
 *
 * What must stay true:
 *  - Documents are read in chunks: each chunk opens the collection and a
 *    fresh scan, copies at most a bounded number of matching documents and
 *    closes everything again, remembering the last _id seen (or the next
 *    point).  The next chunk resumes strictly after it, so a document is
 *    never produced twice even when the caller updates documents between
 *    calls, and no storage scan outlives a call.  In a time-series collection
 *    (several documents per _id, sbl_coll_dup_ids) a chunk ends only after
 *    the last document with its last _id, and a point reads every document
 *    with that _id.
 *  - skip and limit are applied by the stream when the order is _id's, and
 *    after sorting otherwise.
 *  - On a capped collection a full scan without a sort (or sorted or hinted
 *    {$natural: ±1}) follows the natural (insertion) order and resumes past
 *    the last position seen; if that position was deleted meanwhile the scan
 *    fails with CappedPositionLost, as mongod's does.  A tailable executor
 *    looks again for newer documents each time it is asked after running dry
 *    (in a batch with documents, only when a capped insert committed since).
 *  - A router's read or write on a shard (ctx->shard_filter) drops the
 *    documents of its collection that the shard does not own (orphans) where
 *    a match is taken, before skip, limit and sorting, so counts and limits
 *    (a deleteOne's, a findAndModify's) see only owned documents.  The
 *    executor keeps the filter its first call saw, so a cursor's getMores
 *    filter as its first batch did.
 */
#include "exec/exec.h"
#include "exec/plan.h"
#include "exec/geonear.h"
#include "exec/text.h"
#include "exec/ts_bound.h"
#include "doc/doc.h"
#include "shard/shard.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_FIRST 102 /* a default first batch (101) plus the read-ahead */
#define CHUNK_MAX 1024
#define CHUNK_MAX_BYTES (4 * 1024 * 1024)
#define DEADLINE_EVERY 128

typedef struct entry {
    bson_t *doc;
    int32_t pos;
    uint64_t seq; /* arrival order: ties in a sort keep the _id order */
} entry_t;

struct sbl_qexec {
    char ns[SBL_NS_MAX];
    sbl_matcher_t *m;
    sbl_sort_t *sort; /* NULL: _id order */
    bool desc;        /* direction of the _id order */
    sbl_id_range_t range;
    int64_t skip, limit; /* for the in-memory sort */

    /* the stream of matches in _id order */
    int64_t to_skip;   /* matches still to drop */
    int64_t remaining; /* matches still to produce; -1: unlimited */
    bool exhausted;    /* the stream has nothing beyond buf */
    sbl_err_t failed;  /* an $expr's error met after the matches in buf: after them, it */
    bool natural_ok;   /* no sort but {$natural: ±1}: a capped collection's scan is natural */
    uint64_t nat_pos;  /* the last natural position read (0: none) */
    sbl_ts_bound_t ts; /* {ts: {$gte|$gt: T}} (ts_bound.h); ts.from is 0 once read from */
    bool tailable;     /* exhaustion is not final: look again on the next call */
    uint64_t look_gen; /* tailable: sbl_capped_generation() when it last read */
    bool resume;       /* last_id is set */
    bson_value_t last_id;
    size_t next_point;
    size_t chunk;

    /* a $text query (text.c): its stage, the rest of its filter */
    sbl_text_exec_t *text;
    bson_t text_rest;
    bool keep_score; /* leave the score field on the results ($meta reads it later) */

    /* a geo stage (geonear.c): GEO_NEAR (the rest of its filter in geo_rest) or a
     * 2dsphere scan of $geoWithin / $geoIntersects */
    sbl_geo_exec_t *geo;
    bson_t geo_rest;
    bool geo_has_rest, keep_geo;

    /* the secondary-index plan (plan.c), when one won */
    sbl_ixplan_t *ixp;
    sbl_ixplan_t **rejected;
    size_t nrejected;
    sbl_hint_kind_t hint;
    size_t ival;       /* the interval being scanned */
    sbl_buf_t *ixlast; /* the last key read in it (resume point) */
    bool ixresume;
    uint64_t *seen; /* hashes of the _ids produced (a multikey scan meets a document again) */
    size_t nseen, seen_cap;
    int64_t keys_examined, docs_examined;
    bool counted; /* the index used was counted ($indexStats) */
    char summary[200];

    /* documents read ahead (a chunk, or every sorted result) */
    entry_t *buf;
    size_t n, i, cap;
    uint64_t seq;
    bool sorted; /* the in-memory sort has run: buf holds the final results */
    int8_t disk_use;     /* allowDiskUse: 1, -1, 0 not given (sbl_qexec_set_disk_use) */
    sbl_sorter_t *spill; /* the sort went through the disk: the results come from it */
    sbl_shard_filter_t *own; /* the ownership filter (a reference), NULL: keep everything */
    bool own_set;            /* own was taken from the first caller's ctx */
};

static void buf_clear(sbl_qexec_t *q)
{
    for (size_t k = q->i; k < q->n; k++)
        bson_destroy(q->buf[k].doc);
    q->n = q->i = 0;
}

static void buf_push(sbl_qexec_t *q, const bson_t *doc, int32_t pos)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->buf = realloc(q->buf, q->cap * sizeof(*q->buf));
        if (q->buf == NULL)
            abort(); /* as libbson does on allocation failure */
    }
    q->buf[q->n].doc = bson_copy(doc);
    q->buf[q->n].pos = pos;
    q->buf[q->n].seq = q->seq++;
    q->n++;
}

/* Is the sort {$natural: 1|-1}?  Sets *descp. */
static bool sort_is_natural(const bson_t *sort, bool *descp)
{
    bson_iter_t it;
    if (bson_count_keys(sort) != 1 || !bson_iter_init(&it, sort) || !bson_iter_next(&it) ||
        strcmp(bson_iter_key(&it), "$natural") != 0)
        return false;
    *descp = BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_int64(&it) < 0;
    return true;
}

/* Could the _id bounds hold a string (whose binary order a collation changes)? */
static bool may_hold_string(const bson_value_t *v)
{
    bson_type_t t = v->value_type;
    return t == BSON_TYPE_UTF8 || t == BSON_TYPE_SYMBOL || t == BSON_TYPE_DOCUMENT ||
           t == BSON_TYPE_ARRAY;
}

static bool range_has_strings(const sbl_id_range_t *r)
{
    if (r->kind == SBL_ID_POINTS) {
        for (size_t i = 0; i < r->npoints; i++)
            if (may_hold_string(&r->points[i]))
                return true;
        return false;
    }
    if (r->kind != SBL_ID_RANGE)
        return false;
    return (r->has_lo && may_hold_string(&r->lo)) || (r->has_hi && may_hold_string(&r->hi));
}

/* Free the $text and geo stages and their rest filters. */
static void free_stages(sbl_qexec_t *q)
{
    if (q->text != NULL) {
        sbl_text_free(q->text);
        bson_destroy(&q->text_rest);
        q->text = NULL;
    }
    sbl_geo_exec_free(q->geo);
    q->geo = NULL;
    if (q->geo_has_rest) {
        bson_destroy(&q->geo_rest);
        q->geo_has_rest = false;
    }
}

int sbl_qexec_new(const char *ns, const sbl_qexec_opts_t *o, sbl_qexec_t **qp, sbl_err_t *err)
{
    return sbl_qexec_new_hinted(ns, o, NULL, qp, err);
}

/*
 * find's min/max: they need a hint (51173), which must be an index, not
 * {$natural} (NoQueryExecutionPlans); on the _id index they become the _id
 * range [min._id, max._id), on a secondary index its one interval.
 */
static int apply_min_max(sbl_qexec_t *q, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                         const bson_t *min, const bson_t *max, sbl_err_t *err)
{
    bson_iter_t it;

    if (hint == NULL)
        return sbl_err_set(err, 51173, "When using min()/max() a hint of which index to use "
                                       "must be provided");
    if (q->hint == SBL_HINT_NATURAL)
        return sbl_err_set(err, SBL_E_NoQueryExecutionPlans,
                           "No query solutions: min()/max() need an index, not a $natural hint");
    if (q->ixp != NULL)
        return sbl_ixplan_set_min_max(q->ixp, min, max, o->collation, err);
    if (q->hint != SBL_HINT_ID || q->range.kind == SBL_ID_NONE)
        return 0; /* no collection, or nothing can match */
    const bson_t *b[2] = {min, max};
    for (int k = 0; k < 2; k++)
        if (b[k] != NULL && (!bson_iter_init(&it, b[k]) || !bson_iter_next(&it) ||
                             strcmp(bson_iter_key(&it), "_id") != 0 || bson_iter_next(&it)))
            return sbl_err_set(err, 51174, "The index chosen is not consistent with min/max");
    if (q->range.kind == SBL_ID_POINTS)
        return 0; /* the points are the tighter bound; the matcher keeps them */
    sbl_id_range_destroy(&q->range);
    memset(&q->range, 0, sizeof(q->range));
    q->range.kind = SBL_ID_RANGE;
    if (min != NULL && bson_iter_init_find(&it, min, "_id")) {
        q->range.has_lo = q->range.lo_inclusive = true;
        bson_value_copy(bson_iter_value(&it), &q->range.lo);
    }
    if (max != NULL && bson_iter_init_find(&it, max, "_id")) {
        q->range.has_hi = true;
        bson_value_copy(bson_iter_value(&it), &q->range.hi);
    }
    if (q->range.has_lo && q->range.has_hi &&
        sbl_value_compare(&q->range.lo, &q->range.hi) >= 0)
        return sbl_err_set(err, 51175, "max() must be greater than min()");
    return 0;
}

int sbl_qexec_new_hinted(const char *ns, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                         sbl_qexec_t **qp, sbl_err_t *err)
{
    return sbl_qexec_new_min_max(ns, o, hint, NULL, NULL, qp, err);
}

int sbl_qexec_new_min_max(const char *ns, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                          const bson_t *min, const bson_t *max, sbl_qexec_t **qp, sbl_err_t *err)
{
    bson_t empty = BSON_INITIALIZER;
    const bson_t *filter = o->filter != NULL ? o->filter : &empty;
    sbl_qexec_t *q = calloc(1, sizeof(*q));
    bool id_sort = false, id_desc = false; /* the sort is {_id: ±1} alone */

    *qp = NULL;
    if (q == NULL)
        return sbl_err_set(err, SBL_E_ExceededMemoryLimit, "out of memory planning a query");
    sbl_strcpy_n(q->ns, sizeof(q->ns), ns);
    if (sbl_text_parse(filter, &q->text_rest, &q->text, err) != 0) {
        free(q);
        return err->code;
    }
    if (q->text != NULL)
        filter = &q->text_rest;
    else if (sbl_geo_near_extract(filter, &q->geo_rest, &q->geo, err) != 0) {
        free(q);
        return err->code;
    } else if (q->geo != NULL) {
        q->geo_has_rest = true;
        filter = &q->geo_rest;
    }
    q->keep_score = o->keep_text_score;
    q->keep_geo = o->keep_geo_distance;
    q->m = sbl_matcher_new(filter, err);
    if (q->m == NULL) {
        free_stages(q);
        free(q);
        return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid filter");
    }
    if (o->collation != NULL)
        sbl_matcher_set_collation(q->m, o->collation);
    if (o->sort != NULL && !bson_empty(o->sort) && !sort_is_natural(o->sort, &q->desc)) {
        q->sort = sbl_sort_new(o->sort, err);
        bool score_only = false;
        if (q->sort != NULL && q->text == NULL && sbl_sort_text_score(q->sort, NULL)) {
            sbl_sort_free(q->sort);
            q->sort = NULL;
            sbl_err_set(err, 40218, "query requires text score metadata, but it is not available");
        }
        if (q->sort == NULL) {
            sbl_matcher_free(q->m);
            free_stages(q);
            free(q);
            return err->code ? err->code : sbl_err_set(err, SBL_E_BadValue, "invalid sort");
        }
        sbl_sort_set_collation(q->sort, o->collation);
        if (sbl_sort_text_score(q->sort, &score_only) && score_only) {
            sbl_sort_free(q->sort); /* the text stage hands results out best first */
            q->sort = NULL;
        }
        /* the _id table is in binary order (under a collation string _ids
         * sort in memory): a plan that scans it needs no sort (below) */
        id_sort = q->sort != NULL && o->collation == NULL && sbl_sort_is_id(q->sort, &id_desc);
    }
    bool natural_desc = false;
    q->natural_ok = o->sort == NULL || bson_empty(o->sort) || sort_is_natural(o->sort, &natural_desc);
    if (q->text != NULL) {
        /* the text index is the plan: no _id ranges, no other index, no hint */
        q->range.kind = SBL_ID_ANY;
        q->skip = o->skip > 0 ? o->skip : 0;
        q->limit = o->limit > 0 ? o->limit : 0;
        snprintf(q->summary, sizeof(q->summary), "TEXT_MATCH");
        goto planned;
    }
    if (q->geo == NULL && hint == NULL)
        sbl_geo_scan_extract(filter, &q->geo);
    if (q->geo != NULL) {
        /* a near's index is its plan; a scan's when a 2dsphere index leads with the field */
        bool usable = false;
        int rc = sbl_geo_exec_plan(q->geo, ns, &usable, err);
        if (rc != 0) {
            sbl_qexec_free(q);
            return rc;
        }
        if (usable) {
            q->range.kind = SBL_ID_ANY;
            q->skip = o->skip > 0 ? o->skip : 0;
            q->limit = o->limit > 0 ? o->limit : 0;
            sbl_geo_exec_summary(q->geo, q->summary, sizeof(q->summary));
            goto planned;
        }
        sbl_geo_exec_free(q->geo);
        q->geo = NULL;
    }
    sbl_id_range_from_filter(filter, &q->range);
    sbl_ts_bound_parse(filter, &q->ts);
    if (o->collation != NULL && (q->range.kind == SBL_ID_NONE || range_has_strings(&q->range))) {
        sbl_id_range_destroy(&q->range); /* _id keys are binary: scan, let the matcher decide */
        q->range.kind = SBL_ID_ANY;
    }
    q->skip = o->skip > 0 ? o->skip : 0;
    q->limit = o->limit > 0 ? o->limit : 0;
    if (q->range.kind != SBL_ID_NONE) {
        sbl_plan_input_t in = {ns,        filter,  q->sort != NULL && !id_sort ? o->sort : NULL,
                               hint,      q->skip, q->limit,
                               q->range.kind == SBL_ID_POINTS, q->range.kind == SBL_ID_RANGE,
                               o->collation};
        int rc = sbl_plan_choose(&in, &q->hint, &q->ixp, &q->rejected, &q->nrejected, err);
        if (rc != 0) {
            sbl_qexec_free(q);
            return rc;
        }
        if (q->hint == SBL_HINT_NATURAL && q->range.kind != SBL_ID_ANY) {
            sbl_id_range_destroy(&q->range); /* a collection scan, as asked */
            q->range.kind = SBL_ID_ANY;
        }
        /* {$natural: -1} without a sort: the scan runs backwards */
        if (q->hint == SBL_HINT_NATURAL && (o->sort == NULL || bson_empty(o->sort)) &&
            hint != NULL && hint->value_type == BSON_TYPE_DOCUMENT) {
            bson_t h;
            bson_iter_t hit;
            if (bson_init_static(&h, hint->value.v_doc.data, hint->value.v_doc.data_len) &&
                bson_iter_init_find(&hit, &h, "$natural") && BSON_ITER_HOLDS_NUMBER(&hit))
                q->desc = bson_iter_as_double(&hit) < 0;
        }
        if (rc == 0 && (min != NULL || max != NULL))
            rc = apply_min_max(q, o, hint, min, max, err);
        if (rc != 0) {
            sbl_qexec_free(q);
            return rc;
        }
        if ((q->ixp != NULL && q->ixp->provides_sort) || (q->ixp == NULL && id_sort)) {
            sbl_sort_free(q->sort); /* the index's (or the _id table's) order is the sort order */
            q->sort = NULL;
            if (q->ixp == NULL)
                q->desc = id_desc;
        }
    } else if (min != NULL || max != NULL) {
        int rc = apply_min_max(q, o, hint, min, max, err); /* the errors still apply */
        if (rc != 0) {
            sbl_qexec_free(q);
            return rc;
        }
    }
    sbl_qexec_summary(q, q->summary, sizeof(q->summary));
planned:
    if (q->sort == NULL) {
        q->to_skip = q->skip;
        q->remaining = q->limit > 0 ? q->limit : -1;
    } else {
        q->remaining = -1;
    }
    q->exhausted = q->range.kind == SBL_ID_NONE;
    q->chunk = CHUNK_FIRST;
    *qp = q;
    return 0;
}

void sbl_qexec_free(sbl_qexec_t *q)
{
    if (q == NULL)
        return;
    buf_clear(q);
    free(q->buf);
    if (q->resume)
        bson_value_destroy(&q->last_id);
    sbl_ixplan_free(q->ixp);
    for (size_t k = 0; k < q->nrejected; k++)
        sbl_ixplan_free(q->rejected[k]);
    free(q->rejected);
    if (q->ixlast != NULL) {
        sbl_buf_destroy(q->ixlast);
        free(q->ixlast);
    }
    free(q->seen);
    sbl_id_range_destroy(&q->range);
    sbl_sorter_free(q->spill); /* before the sort it compares with */
    sbl_sort_free(q->sort);
    sbl_matcher_free(q->m);
    free_stages(q);
    sbl_shard_filter_release(q->own);
    free(q);
}

const sbl_matcher_t *sbl_qexec_matcher(const sbl_qexec_t *q)
{
    return q->m;
}

const bson_value_t *sbl_qexec_points(const sbl_qexec_t *q, size_t *np)
{
    if (q->range.kind != SBL_ID_POINTS) {
        *np = 0;
        return NULL;
    }
    *np = q->range.npoints;
    return q->range.points;
}

/* ctx's ownership filter when it is for ns and filters anything (a new
 * reference), else NULL. */
static sbl_shard_filter_t *own_filter(const sbl_opctx_t *ctx, const char *ns)
{
    sbl_shard_filter_t *f = ctx->shard_filter;
    if (f == NULL || sbl_shard_filter_trivial(f) || strcmp(sbl_shard_filter_ns(f), ns) != 0)
        return NULL;
    return sbl_shard_filter_ref(f);
}

/* Offer a document that matched to the stream: skip it, or keep it. Returns
 * false when the limit has been reached (stop reading). */
static bool take_match(sbl_qexec_t *q, const bson_t *doc, int32_t pos)
{
    if (q->own != NULL && !sbl_shard_filter_owns(q->own, doc))
        return true; /* an orphan: as if it had not matched */
    if (q->to_skip > 0) {
        q->to_skip--;
        return true;
    }
    buf_push(q, doc, pos);
    if (q->remaining > 0 && --q->remaining == 0) {
        q->exhausted = true;
        return false;
    }
    return true;
}

/* Every document with _id v (a time-series collection's point), in scan order. */
static int point_all(sbl_qexec_t *q, sbl_session_t *ss, sbl_coll_t *c, const bson_value_t *v,
                     sbl_err_t *err)
{
    sbl_scan_bounds_t b = {v, true, v, true};
    sbl_scan_t *scan = NULL;
    int rc = sbl_scan_open(ss, c, &b, q->desc, &scan, err);
    while (rc == 0 && !q->exhausted) {
        bson_t doc;
        bool done = false;
        int32_t pos = -1;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0 || done)
            break;
        if (sbl_matcher_match(q->m, &doc, &pos))
            take_match(q, &doc, pos);
    }
    sbl_scan_close(scan);
    return rc;
}

static int refill_points(sbl_qexec_t *q, sbl_session_t *ss, sbl_coll_t *c, size_t max,
                         sbl_err_t *err)
{
    while (q->next_point < q->range.npoints && q->n < max && !q->exhausted) {
        size_t k = q->desc ? q->range.npoints - 1 - q->next_point : q->next_point;
        q->next_point++;
        bson_t doc;
        bool found = false;
        if (sbl_coll_dup_ids(c)) {
            SBL_RET(point_all(q, ss, c, &q->range.points[k], err));
            continue;
        }
        SBL_RET(sbl_coll_get(ss, c, &q->range.points[k], &doc, &found, err));
        if (!found)
            continue;
        int32_t pos = -1;
        if (sbl_matcher_match(q->m, &doc, &pos))
            take_match(q, &doc, pos);
        bson_destroy(&doc);
    }
    if (q->next_point >= q->range.npoints)
        q->exhausted = true;
    return 0;
}

static int refill_scan(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_coll_t *c, size_t max,
                       sbl_err_t *err)
{
    sbl_scan_bounds_t b = {0};
    if (q->range.kind == SBL_ID_RANGE) {
        if (q->range.has_lo) {
            b.lo = &q->range.lo;
            b.lo_inclusive = q->range.lo_inclusive;
        }
        if (q->range.has_hi) {
            b.hi = &q->range.hi;
            b.hi_inclusive = q->range.hi_inclusive;
        }
    }
    if (q->resume) {
        if (q->desc) {
            b.hi = &q->last_id;
            b.hi_inclusive = false;
        } else {
            b.lo = &q->last_id;
            b.lo_inclusive = false;
        }
    }
    sbl_scan_t *scan = NULL;
    bool unbounded = b.lo == NULL && b.hi == NULL;
    SBL_RET(sbl_scan_open(ctx->ss, c, unbounded ? NULL : &b, q->desc, &scan, err));

    int rc = 0;
    size_t examined = 0, bytes = 0;
    bool run_tail = false; /* the chunk is full: only the rest of last_id's documents */
    for (;;) {
        bson_t doc;
        bool done = false;
        if (++examined % DEADLINE_EVERY == 0 && (rc = sbl_op_check_interrupt(ctx, err)) != 0)
            break;
        if ((rc = sbl_scan_next(scan, &doc, &done, err)) != 0)
            break;
        if (done) {
            q->exhausted = true;
            break;
        }
        if (run_tail) {
            bson_iter_t id;
            if (!bson_iter_init_find(&id, &doc, "_id") ||
                !sbl_value_equal(bson_iter_value(&id), &q->last_id))
                break; /* read again by the next chunk */
        }
        ctx->docs_examined++;
        if (q->range.kind == SBL_ID_RANGE)
            ctx->keys_examined++;
        int32_t pos = -1;
        bool more = true;
        if (sbl_matcher_match(q->m, &doc, &pos)) {
            more = take_match(q, &doc, pos);
            bytes += doc.len;
        }
        if (!more || sbl_matcher_error(NULL) != 0) /* an $expr failed: refill returns it */
            break;
        if (!run_tail &&
            (q->n >= max || bytes >= CHUNK_MAX_BYTES || examined >= 16 * CHUNK_MAX)) {
            bson_iter_t id;
            if (bson_iter_init_find(&id, &doc, "_id")) {
                if (q->resume)
                    bson_value_destroy(&q->last_id);
                bson_value_copy(bson_iter_value(&id), &q->last_id);
                q->resume = true;
                run_tail = sbl_coll_dup_ids(c);
            }
            if (!run_tail)
                break;
        }
    }
    sbl_scan_close(scan);
    return rc;
}

void sbl_qexec_set_disk_use(sbl_qexec_t *q, int8_t disk_use)
{
    q->disk_use = disk_use;
}

/* Read the next chunk of a capped collection in natural order, past nat_pos. */
static int refill_natural(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_coll_t *c, size_t max,
                          sbl_err_t *err)
{
    /* A tailing oplog read ({ts: {$gte: T}}, a secondary's fetcher) starts at
     * T's own position (the oplog's natural order is its ts order), not at
     * its first entry; where T is not there, at the first as before. */
    uint64_t from = 0;
    if (q->ts.from != 0 && q->nat_pos == 0 && !q->desc &&
        strcmp(sbl_coll_ns(c), "local.oplog.rs") == 0)
        SBL_RET(sbl_natural_pos_of_ts(ctx->ss, c, q->ts.from, &from, err));
    q->ts.from = 0;
    bool resume = from <= 1 && q->nat_pos != 0; /* nat_pos was read: it must still be there */
    if (from > 1)
        q->nat_pos = from - 1; /* what is read is past nat_pos; from - 1 need not exist */
    sbl_natural_t *scan = NULL;
    SBL_RET(sbl_natural_open(ctx->ss, c, q->nat_pos, q->desc, &scan, err));
    bool exists = true;
    int rc = resume ? sbl_natural_seek(scan, &exists, err) : 0;
    if (rc != 0 || !exists) {
        sbl_natural_close(scan);
        return rc != 0 ? rc
                       : sbl_err_set(err, SBL_E_CappedPositionLost,
                                     q->tailable ? "CollectionScan died due to failure to restore "
                                                   "tailable cursor position. Last seen record "
                                                   "id: RecordId(%llu)"
                                                 : "CollectionScan died due to position in capped "
                                                   "collection being deleted. Last seen record "
                                                   "id: RecordId(%llu)",
                                     (unsigned long long)q->nat_pos);
    }
    bool by_key = q->ts.key_len > 0 && strcmp(sbl_coll_key_field(c), "ts") == 0;
    size_t examined = 0, bytes = 0;
    for (;;) {
        bson_t doc;
        bool done = false;
        uint64_t pos = 0;
        if (++examined % DEADLINE_EVERY == 0 && (rc = sbl_op_check_interrupt(ctx, err)) != 0)
            break;
        if ((rc = sbl_natural_next(scan, &doc, &pos, &done, err)) != 0)
            break;
        if (done) {
            q->exhausted = true;
            break;
        }
        q->nat_pos = pos;
        ctx->docs_examined++;
        int32_t p = -1;
        bool more = true, match = false;
        size_t klen = 0;
        const void *key = by_key ? sbl_natural_key(scan, &klen) : NULL;
        if (key == NULL || !sbl_ts_bound_decides(&q->ts, key, klen, &match))
            match = sbl_matcher_match(q->m, &doc, &p);
        if (match) {
            more = take_match(q, &doc, p);
            bytes += doc.len;
        }
        if (!more || sbl_matcher_error(NULL) != 0 || q->n >= max || bytes >= CHUNK_MAX_BYTES ||
            examined >= 16 * CHUNK_MAX)
            break;
    }
    sbl_natural_close(scan);
    return rc;
}

bool sbl_qexec_limit_reached(const sbl_qexec_t *q)
{
    return q != NULL && q->remaining == 0;
}

void sbl_qexec_set_tailable(sbl_qexec_t *q)
{
    q->tailable = true;
}

/* The summary the slow-query log shows; per thread, as the dispatcher reads
 * it after the executor may be gone. */
static _Thread_local char tls_summary[200];

/* Remember an _id (by a 64-bit hash of its encoding); false when seen before.
 * A false "seen" needs a 64-bit collision among the scan's documents. */
static bool first_sight(sbl_qexec_t *q, const uint8_t *idk, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < len; k++)
        h = (h ^ idk[k]) * 1099511628211ull;
    h |= 1; /* 0 marks an empty slot */
    if (2 * (q->nseen + 1) > q->seen_cap) {
        size_t cap = q->seen_cap ? q->seen_cap * 2 : 1024;
        uint64_t *t = calloc(cap, sizeof(uint64_t));
        if (t == NULL)
            abort();
        for (size_t k = 0; k < q->seen_cap; k++)
            if (q->seen[k] != 0) {
                size_t j = q->seen[k] & (cap - 1);
                while (t[j] != 0)
                    j = (j + 1) & (cap - 1);
                t[j] = q->seen[k];
            }
        free(q->seen);
        q->seen = t;
        q->seen_cap = cap;
    }
    size_t j = h & (q->seen_cap - 1);
    while (q->seen[j] != 0) {
        if (q->seen[j] == h)
            return false;
        j = (j + 1) & (q->seen_cap - 1);
    }
    q->seen[j] = h;
    q->nseen++;
    return true;
}

/* Read the next chunk from the index plan's intervals, fetching each entry's document. */
static int refill_ixscan(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_coll_t *c, size_t max,
                         sbl_err_t *err)
{
    sbl_ixplan_t *p = q->ixp;
    size_t examined = 0, bytes = 0;
    int rc = 0;

    if (q->ixlast == NULL) {
        q->ixlast = malloc(sizeof(sbl_buf_t));
        if (q->ixlast == NULL)
            abort();
        sbl_buf_init(q->ixlast);
    }
    while (q->ival < p->nivals) {
        const sbl_ival_t *v = &p->ivals[p->backward ? p->nivals - 1 - q->ival : q->ival];
        const uint8_t *lo = p->arena->data + v->lo_off, *hi = p->arena->data + v->hi_off;
        size_t lo_len = v->lo_len, hi_len = v->hi_len;
        sbl_buf_t start;
        sbl_iscan_t *sc = NULL;
        bool stop = false;

        sbl_buf_init(&start);
        if (q->ixresume) {
            /* strictly past the last key read: keys are unique, so key + 0x00 is next */
            sbl_buf_append(&start, q->ixlast->data, q->ixlast->len);
            if (!p->backward) {
                sbl_buf_append_byte(&start, 0);
                lo = start.data;
                lo_len = start.len;
            } else {
                hi = start.data;
                hi_len = start.len;
            }
        }
        rc = sbl_iscan_open(ctx->ss, p->ix, lo, lo_len, hi, hi_len, p->backward, &sc, err);
        sbl_buf_destroy(&start);
        if (rc != 0)
            return rc;
        for (;;) {
            const uint8_t *k, *idk;
            size_t klen, idlen;
            bool done = false, found = false;
            bson_t doc;
            if (++examined % DEADLINE_EVERY == 0 &&
                (rc = sbl_op_check_interrupt(ctx, err)) != 0)
                break;
            if ((rc = sbl_iscan_next(sc, &k, &klen, &idk, &idlen, &done, err)) != 0)
                break;
            if (done) {
                q->ival++;
                q->ixresume = false;
                break;
            }
            ctx->keys_examined++;
            sbl_buf_reset(q->ixlast);
            sbl_buf_append(q->ixlast, k, klen);
            q->ixresume = true;
            if (!first_sight(q, idk, idlen))
                continue;
            if ((rc = sbl_coll_get_by_key(ctx->ss, c, idk, idlen, &doc, &found, err)) != 0)
                break;
            if (!found) /* deleted since the entry was read */
                continue;
            ctx->docs_examined++;
            int32_t pos = -1;
            bool more = true;
            if (sbl_matcher_match(q->m, &doc, &pos)) {
                more = take_match(q, &doc, pos);
                bytes += doc.len;
            }
            bson_destroy(&doc);
            if (!more || sbl_matcher_error(NULL) != 0 || q->n >= max ||
                bytes >= CHUNK_MAX_BYTES || examined >= 16 * CHUNK_MAX) {
                stop = true;
                break;
            }
        }
        sbl_iscan_close(sc);
        if (rc != 0 || stop)
            return rc;
    }
    q->exhausted = true;
    return 0;
}

void sbl_qexec_summary(const sbl_qexec_t *q, char *buf, size_t len)
{
    if (q->ixp != NULL)
        sbl_ixplan_summary(q->ixp, buf, len);
    else if (q->range.kind == SBL_ID_POINTS)
        sbl_strcpy_n(buf, len, q->range.npoints == 1 ? "IDHACK" : "IXSCAN { _id: 1 }");
    else if (q->range.kind == SBL_ID_RANGE)
        sbl_strcpy_n(buf, len, "IXSCAN { _id: 1 }");
    else if (q->range.kind == SBL_ID_NONE)
        sbl_strcpy_n(buf, len, "EOF");
    else
        sbl_strcpy_n(buf, len, "COLLSCAN");
}

void sbl_qexec_info(const sbl_qexec_t *q, sbl_qexec_info_t *out)
{
    memset(out, 0, sizeof(*out));
    out->ixp = q->ixp;
    out->rejected = (const struct sbl_ixplan *const *)q->rejected;
    out->nrejected = q->nrejected;
    out->id_kind = (int)q->range.kind;
    out->npoints = q->range.npoints;
    out->desc = q->desc;
    out->in_memory_sort = q->sort != NULL;
    out->skip = q->skip;
    out->limit = q->limit;
    out->keys_examined = q->keys_examined;
    out->docs_examined = q->docs_examined;
    out->summary = q->summary;
    out->text = q->text != NULL;
    out->geo_index = q->geo != NULL ? sbl_geo_exec_index_name(q->geo) : NULL;
    out->geo_near = q->geo != NULL && sbl_geo_exec_is_near(q->geo);
}

/* The next results of a geo stage (a near's in distance order). */
static int refill_geo(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_coll_t *c, size_t max,
                      sbl_err_t *err)
{
    for (size_t got = 0; got < max; got++) {
        bson_t *d = NULL;
        SBL_RET(sbl_geo_exec_next(q->geo, ctx, c, q->m, q->keep_geo, &d, err));
        if (d == NULL) {
            q->exhausted = true;
            return 0;
        }
        bool more;
        if (q->own != NULL && !sbl_shard_filter_owns(q->own, d)) {
            bson_destroy(d); /* an orphan */
            continue;
        }
        if (q->to_skip > 0 || q->n < q->cap) { /* take d itself: no second copy */
            if (q->to_skip > 0) {
                q->to_skip--;
                bson_destroy(d);
                continue;
            }
            q->buf[q->n].doc = d;
            q->buf[q->n].pos = -1;
            q->buf[q->n].seq = q->seq++;
            q->n++;
            more = !(q->remaining > 0 && --q->remaining == 0);
            if (!more)
                q->exhausted = true;
        } else {
            more = take_match(q, d, -1);
            bson_destroy(d);
        }
        if (!more)
            return 0;
    }
    return 0;
}

/* The next results of a $text query, best first (without the score field
 * unless a $meta asks for it later). */
static int refill_text(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_coll_t *c, size_t max,
                       sbl_err_t *err)
{
    for (size_t got = 0; got < max;) {
        bson_t *d = NULL;
        SBL_RET(sbl_text_next(q->text, ctx, c, q->m, &q->text_rest, &d, err));
        if (d == NULL) {
            q->exhausted = true;
            return 0;
        }
        bool more;
        if (q->keep_score || q->sort != NULL) {
            more = take_match(q, d, -1);
        } else {
            bson_t stripped = BSON_INITIALIZER;
            sbl_projection_strip_meta(d, &stripped);
            more = take_match(q, &stripped, -1);
            bson_destroy(&stripped);
        }
        bson_destroy(d);
        got++;
        if (!more)
            return 0;
    }
    return 0;
}

/* Read the next chunk of the _id-ordered stream into buf. */
static int refill(sbl_qexec_t *q, sbl_opctx_t *ctx, size_t max, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e2 = {0};
    int rc;

    buf_clear(q);
    if (q->exhausted)
        return 0;
    rc = sbl_coll_open(ctx->ss, q->ns, false, &c, NULL, &e2);
    if (rc == SBL_E_NamespaceNotFound && q->tailable && q->nat_pos != 0)
        return sbl_err_set(err, SBL_E_QueryPlanKilled, "collection dropped: %s", q->ns);
    if (rc == SBL_E_NamespaceNotFound) {
        q->exhausted = true;
        return 0;
    }
    if (rc != 0) {
        *err = e2;
        return rc;
    }
    int64_t keys0 = ctx->keys_examined, docs0 = ctx->docs_examined;
    if (!q->counted) { /* one access per operation, as mongod's $indexStats counts */
        q->counted = true;
        if (q->ixp != NULL)
            sbl_index_note_access(q->ixp->ix);
        else if (q->text == NULL && q->geo == NULL &&
                 (q->range.kind == SBL_ID_POINTS || q->range.kind == SBL_ID_RANGE))
            sbl_coll_note_id_access(c);
    }
    sbl_strcpy_n(tls_summary, sizeof(tls_summary), q->summary);
    ctx->plan_summary = tls_summary;
    if (q->text != NULL) {
        rc = refill_text(q, ctx, c, max, err);
    } else if (q->geo != NULL) {
        rc = refill_geo(q, ctx, c, max, err);
    } else if (q->ixp != NULL) {
        rc = refill_ixscan(q, ctx, c, max, err);
    } else if (q->range.kind == SBL_ID_POINTS) {
        size_t before = q->next_point;
        rc = refill_points(q, ctx->ss, c, max, err);
        ctx->keys_examined += (int64_t)(q->next_point - before);
        ctx->docs_examined += (int64_t)(q->next_point - before);
    } else if (q->natural_ok && q->range.kind == SBL_ID_ANY && sbl_coll_capped(c, NULL, NULL)) {
        rc = refill_natural(q, ctx, c, max, err);
    } else {
        rc = refill_scan(q, ctx, c, max, err);
    }
    q->keys_examined += ctx->keys_examined - keys0;
    q->docs_examined += ctx->docs_examined - docs0;
    sbl_coll_release(c);
    sbl_err_t failed = {0};
    if (rc == 0 && (rc = sbl_matcher_take_error(&failed)) != 0) { /* an $expr failed: the query */
        q->exhausted = true;
        if (q->sort == NULL && q->n > 0) {
            /* after the matches before it, as mongod, which reads one document at a
             * time, meets it (a find's first batch may end before it) */
            q->failed = failed;
            return 0;
        }
        buf_clear(q);
        if (err != NULL)
            *err = failed;
    }
    return rc;
}

int sbl_qexec_get_id(sbl_opctx_t *ctx, const char *ns, const bson_value_t *id, bson_t *doc,
                     bool *foundp, bool *dupp, sbl_err_t *err)
{
    sbl_coll_t *c = NULL;
    sbl_err_t e2 = {0};
    *foundp = *dupp = false;
    int rc = sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e2);
    if (rc == SBL_E_NamespaceNotFound)
        return 0;
    if (rc != 0) {
        *err = e2;
        return rc;
    }
    if (sbl_coll_dup_ids(c)) {
        *dupp = true;
        sbl_coll_release(c);
        return 0;
    }
    ctx->plan_summary = "IDHACK";
    sbl_coll_note_id_access(c);
    rc = sbl_coll_get(ctx->ss, c, id, doc, foundp, err);
    ctx->keys_examined++;
    ctx->docs_examined++;
    sbl_coll_release(c);
    sbl_shard_filter_t *own = rc == 0 && *foundp ? own_filter(ctx, ns) : NULL;
    if (own != NULL && !sbl_shard_filter_owns(own, doc)) {
        bson_destroy(doc); /* an orphan: not there for this read */
        *foundp = false;
    }
    sbl_shard_filter_release(own);
    return rc;
}

/* qsort has no context argument: the sort in use is per thread. */
static _Thread_local const sbl_sort_t *tls_sort;

static int cmp_entries(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    int r = sbl_sort_compare(tls_sort, x->doc, y->doc);
    if (r != 0)
        return r;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void sort_and_trim(entry_t *all, size_t *np, size_t keep)
{
    if (*np > 1) /* all may be NULL when empty; qsort's pointer must not be */
        qsort(all, *np, sizeof(*all), cmp_entries);
    if (keep > 0 && *np > keep) {
        for (size_t k = keep; k < *np; k++)
            bson_destroy(all[k].doc);
        *np = keep;
    }
}

static int spill_cmp(const bson_t *a, const bson_t *b, const void *arg)
{
    return sbl_sort_compare(arg, a, b);
}

/* Move the n entries of all into a new sorter (q->spill): the sort spills. */
static int start_spill(sbl_qexec_t *q, entry_t *all, size_t *np, sbl_err_t *err)
{
    int rc = 0;
    size_t k = 0;
    q->spill = sbl_sorter_new(spill_cmp, q->sort, sbl_mem_limit(SBL_LIM_SORT), true);
    for (; k < *np && rc == 0; k++)
        rc = sbl_sorter_add(q->spill, all[k].doc, all[k].pos, err);
    for (; k < *np; k++) /* after a failed add: still ours */
        bson_destroy(all[k].doc);
    *np = 0;
    return rc;
}

/*
 * Collect every match, sort, apply skip and limit; buf then holds the
 * results.  Unlimited, past the sort limit: the matches go through the
 * external sorter (q->spill) when the disk may be used, else 292.
 */
static int run_sort(sbl_qexec_t *q, sbl_opctx_t *ctx, sbl_err_t *err)
{
    entry_t *all = NULL;
    size_t n = 0, cap = 0, bytes = 0;
    size_t keep = q->limit > 0 ? (size_t)(q->skip + q->limit) : 0;
    size_t mem_limit = sbl_mem_limit(SBL_LIM_SORT);
    bool disk = sbl_mem_disk_ok(q->disk_use == 0 ? -1 : q->disk_use > 0);
    int rc = 0;

    tls_sort = q->sort;
    for (;;) {
        if ((rc = refill(q, ctx, CHUNK_MAX, err)) != 0)
            break;
        if (q->n == 0 && q->exhausted)
            break;
        for (size_t k = 0; k < q->n; k++) {
            if (q->spill != NULL) {
                if (rc == 0)
                    rc = sbl_sorter_add(q->spill, q->buf[k].doc, q->buf[k].pos, err);
                else
                    bson_destroy(q->buf[k].doc);
                continue;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                all = realloc(all, cap * sizeof(*all));
                if (all == NULL)
                    abort();
            }
            all[n++] = q->buf[k];
            bytes += q->buf[k].doc->len + sizeof(entry_t);
        }
        q->n = q->i = 0; /* ownership moved to all (or the sorter) */
        if (rc != 0)
            break;
        if (keep > 0 && n >= 2 * keep + 1024)
            sort_and_trim(all, &n, keep);
        if (keep == 0 && q->spill == NULL && bytes > mem_limit) {
            if (!disk)
                rc = sbl_mem_error(SBL_LIM_SORT, err);
            else
                rc = start_spill(q, all, &n, err);
            bytes = 0;
        }
        if (rc == 0)
            rc = sbl_op_check_interrupt(ctx, err);
        if (rc != 0)
            break;
    }
    if (rc == 0 && keep > 0) { /* top-k: the k kept stay in memory (no spilling) */
        sort_and_trim(all, &n, keep);
        bytes = 0;
        for (size_t k = 0; k < n; k++)
            bytes += all[k].doc->len + sizeof(entry_t);
        if (bytes > mem_limit && !disk)
            rc = sbl_mem_error(SBL_LIM_SORT, err);
    }
    if (rc != 0) {
        for (size_t k = 0; k < n; k++)
            bson_destroy(all[k].doc);
        free(all);
        return rc;
    }
    if (q->spill != NULL) { /* results stream from the sorter, past skip */
        free(all);
        q->sorted = true;
        q->exhausted = true;
        for (int64_t k = 0; k < q->skip; k++) {
            bson_t *d = NULL;
            SBL_RET(sbl_sorter_next(q->spill, &d, NULL, err));
            if (d == NULL)
                break;
            bson_destroy(d);
        }
        return 0;
    }
    sort_and_trim(all, &n, keep);
    size_t skip = (size_t)q->skip < n ? (size_t)q->skip : n;
    for (size_t k = 0; k < skip; k++)
        bson_destroy(all[k].doc);
    free(q->buf);
    q->buf = all;
    q->cap = cap;
    q->i = skip;
    q->n = n;
    q->sorted = true;
    q->exhausted = true;
    return 0;
}

static int next_raw(sbl_qexec_t *q, sbl_opctx_t *ctx, bson_t *doc, int32_t *posp, bool *donep,
                    sbl_err_t *err);

int sbl_qexec_next(sbl_qexec_t *q, sbl_opctx_t *ctx, bson_t *doc, int32_t *posp, bool *donep,
                   sbl_err_t *err)
{
    if (!q->own_set) {
        q->own_set = true;
        q->own = own_filter(ctx, q->ns);
    }
    SBL_RET(next_raw(q, ctx, doc, posp, donep, err));
    if (q->text != NULL && !q->keep_score && q->sort != NULL && !*donep) {
        /* sorted with the score: the caller does not want it */
        bson_t stripped = BSON_INITIALIZER;
        sbl_projection_strip_meta(doc, &stripped);
        bson_destroy(doc);
        bson_steal(doc, &stripped);
    }
    return 0;
}

static int next_raw(sbl_qexec_t *q, sbl_opctx_t *ctx, bson_t *doc, int32_t *posp, bool *donep,
                    sbl_err_t *err)
{
    *donep = false;
    if (q->sort != NULL && !q->sorted)
        SBL_RET(run_sort(q, ctx, err));
    if (q->spill != NULL) {
        bson_t *d = NULL;
        int32_t pos = -1;
        SBL_RET(sbl_sorter_next(q->spill, &d, &pos, err));
        if (d == NULL) {
            *donep = true;
            return 0;
        }
        bson_steal(doc, d); /* d is a heap bson_t: freed by the steal */
        if (posp != NULL)
            *posp = pos;
        return 0;
    }
    bool looked_again = false;
    while (q->i >= q->n) {
        if (q->failed.code != 0) {
            int code = q->failed.code;
            if (err != NULL)
                *err = q->failed;
            sbl_err_clear(&q->failed);
            return code;
        }
        /* A tailable scan: newer documents may be there now (in a batch that has
         * some, only if a capped insert committed since: a second read for nothing) */
        if (q->exhausted && q->tailable && !looked_again && q->remaining != 0 && q->sort == NULL &&
            (ctx->nreturned == 0 || sbl_capped_generation() != q->look_gen)) {
            q->exhausted = false;
            looked_again = true;
        }
        if (q->exhausted) {
            *donep = true;
            return 0;
        }
        SBL_RET(sbl_op_check_interrupt(ctx, err));
        q->look_gen = sbl_capped_generation(); /* before: a commit after it looks again */
        SBL_RET(refill(q, ctx, q->chunk, err));
        if (q->chunk < CHUNK_MAX)
            q->chunk *= 2;
    }
    entry_t *e = &q->buf[q->i++];
    bson_steal(doc, e->doc); /* e->doc came from bson_copy: heap, freed by the steal */
    if (posp != NULL)
        *posp = e->pos;
    return 0;
}
