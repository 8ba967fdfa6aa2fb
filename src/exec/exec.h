/*
 * exec.h: the query engine.  It plans a query over a collection (the _id
 * point and range paths, secondary indexes, a collection scan), runs it
 * (filter, in-memory or external sort, skip, limit, collation), explains
 * the plan, keeps server-side cursors between batches, and holds the memory
 * limits and the external sorter that spill to <dbpath>/_tmp.
 *
 * Above it: the aggregation framework (src/agg) and the command handlers
 * (src/cmd).  Below it: src/op (the operation context), src/query (matcher,
 * projection, sort keys), src/storage.
 *
 * What must stay true: the executor never keeps a storage scan open when it
 * returns to its caller, so the caller may run transactions on the same
 * session between two calls and may resume it from another thread.
 */
#ifndef SBL_EXEC_H
#define SBL_EXEC_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "doc/doc.h"
#include "op/op.h"
#include "query/query.h"

/* ---- collation (collation.c) ---------------------------------------------- */

/*
 * The collation an operation on ns runs under: parsed from it (the command's or
 * statement's `collation` field, named field in errors) when it is not NULL, else
 * the default collation of ns (none when ns does not exist).  *outp NULL: simple.
 */
int sbl_exec_collation(sbl_opctx_t *ctx, const char *ns, const bson_iter_t *it,
                       const char *field, const sbl_collation_t **outp, sbl_err_t *err);
/* Check a create / index `collation` option and append it to opts as MongoDB
 * stores it (the full spec), nothing for {locale: "simple"}. */
int sbl_exec_collation_option(const bson_iter_t *it, bson_t *opts, sbl_err_t *err);
/* Only the collection default (create's `collation` option) of ns. */
int sbl_exec_default_collation(sbl_opctx_t *ctx, const char *ns, const sbl_collation_t **outp,
                               sbl_err_t *err);

/* ---- hints and _id points (hint.c) --------------------------------------- */

/* Take a hint (an index name or key pattern) for the executor: *out views the
 * command's value, *hasp is set; TypeMismatch when it is neither. */
int sbl_exec_get_hint(const bson_iter_t *it, bson_value_t *out, bool *hasp, sbl_err_t *err);

/* Accept a hint that names the _id index ({_id: 1|-1} or "_id_"); BadValue otherwise. */
int sbl_exec_check_hint(const bson_iter_t *it, sbl_err_t *err);

/* ---- the executor (exec.c) ---------------------------------------- */

/* The hidden fields a near query's results carry when keep_geo_distance asks
 * for them (the $geoNear stage turns them into distanceField / includeLocs):
 * the distance (meters for a GeoJSON point, radians for a legacy one on a
 * sphere, coordinate units in 2d) and the location it was measured from. */
#define SBL_GEO_DIST_FIELD "\x7fgeoNearDistance"
#define SBL_GEO_LOC_FIELD "\x7fgeoNearPoint"

typedef struct sbl_qexec_opts {
    const bson_t *filter; /* NULL or {}: everything */
    const bson_t *sort;   /* NULL or {}: _id order ({$natural: -1} reverses it) */
    int64_t skip;         /* documents to drop after sorting */
    int64_t limit;        /* 0: no limit */
    const sbl_collation_t *collation; /* how strings compare; NULL: binary */
    bool keep_text_score; /* a $text query's results keep their score field
                             (SBL_TEXT_SCORE_FIELD) for a later $meta */
    bool keep_geo_distance; /* a near query's results keep SBL_GEO_DIST_FIELD and
                               SBL_GEO_LOC_FIELD ($geoNear) */
} sbl_qexec_opts_t;

typedef struct sbl_qexec sbl_qexec_t;

/*
 * Plan a query over ns: point lookups when the filter pins _id, an _id range
 * scan when it bounds _id, a full scan otherwise; sorting by _id uses the
 * scan direction, any other sort is done in memory (keeping only skip+limit
 * documents when limited).  A collection that does not exist yields nothing.
 * Parse errors of filter/sort come back here.  *qp is owned by the caller.
 */
int sbl_qexec_new(const char *ns, const sbl_qexec_opts_t *o, sbl_qexec_t **qp, sbl_err_t *err);

/*
 * The next matching document, copied into *doc (initialised here; caller
 * destroys) with the matcher's array position in *posp (may be NULL); sets
 * *donep instead at the end.  Checks ctx's deadline.
 */
int sbl_qexec_next(sbl_qexec_t *q, sbl_opctx_t *ctx, bson_t *doc, int32_t *posp, bool *donep,
                   sbl_err_t *err);

/* As sbl_qexec_new, honouring hint (NULL: none): an index name, a key
 * pattern, or {$natural: ±1}.  BadValue (2) when it names no index. */
int sbl_qexec_new_hinted(const char *ns, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                         sbl_qexec_t **qp, sbl_err_t *err);
/* As sbl_qexec_new_hinted, with find's min/max: index keys from min
 * (inclusive) to max (exclusive) of the hinted index, in its key pattern's
 * fields (NULL: unbounded); mongod's errors 51173-51176 and 291. */
int sbl_qexec_new_min_max(const char *ns, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                          const bson_t *min, const bson_t *max, sbl_qexec_t **qp,
                          sbl_err_t *err);

/* The plan in MongoDB's summary form ("IXSCAN { a: 1 }", "COLLSCAN", "IDHACK"). */
void sbl_qexec_summary(const sbl_qexec_t *q, char *buf, size_t len);

/* What explain shows of a plan; pointers stay valid while q lives. */
struct sbl_ixplan;
typedef struct sbl_qexec_info {
    const struct sbl_ixplan *ixp;               /* NULL: the _id / collection plan */
    const struct sbl_ixplan *const *rejected;   /* other index candidates */
    size_t nrejected;
    int id_kind;        /* sbl_id_range_t kind: ANY (full scan), POINTS, RANGE, NONE */
    size_t npoints;
    bool desc;           /* _id order descending */
    bool in_memory_sort; /* a SORT stage runs */
    int64_t skip, limit;
    int64_t keys_examined, docs_examined; /* so far */
    const char *summary;
    bool text; /* a $text query: the text index's TEXT_MATCH stage */
    const char *geo_index; /* a geo stage's index name (NULL: none) */
    bool geo_near;         /* ... a GEO_NEAR stage (else a geo index scan) */
} sbl_qexec_info_t;
void sbl_qexec_info(const sbl_qexec_t *q, sbl_qexec_info_t *out);

/* Whether q's in-memory sort may spill past the sort limit: disk_use is the
 * command's allowDiskUse (sbl_spill_disk_use; 0: not given).  Before the first
 * sbl_qexec_next. */
void sbl_qexec_set_disk_use(sbl_qexec_t *q, int8_t disk_use);

/* Make q tailable: once it runs dry, each later sbl_qexec_next scans again
 * past the last natural position it read (capped collections). */
void sbl_qexec_set_tailable(sbl_qexec_t *q);
/* True when q had a limit and has produced that many documents. */
bool sbl_qexec_limit_reached(const sbl_qexec_t *q);

/* The parsed filter (for re-checking a document inside a write transaction). */
const sbl_matcher_t *sbl_qexec_matcher(const sbl_qexec_t *q);

/* When the filter pins _id to a list of values, those values (sorted); else NULL. */
const bson_value_t *sbl_qexec_points(const sbl_qexec_t *q, size_t *np);

/* The key pattern returnKey reports for q's plan (a new document the caller
 * destroys): the index's, _id's for a plan in _id order (points, a range, or
 * a requested _id sort), else {}. */
bson_t *sbl_qexec_key_pattern(const sbl_qexec_t *q, const bson_t *sort);

void sbl_qexec_free(sbl_qexec_t *q);

/* True when filter is exactly {_id: v} for a v whose encoded key equals that
 * of every value the query matches (a string, ObjectId, 32/64-bit integer or
 * date: no NaN, no type-crossing doubles or decimals); a string only under
 * the simple collation.  The result is then the document stored under v's
 * key, or nothing: no plan or matcher needed.  *idp views v inside filter. */
bool sbl_exec_filter_id_point(const bson_t *filter, bson_value_t *idp);

/* The document of ns whose _id is id, without planning (find's point-lookup
 * path): *foundp false and nothing in *doc when there is none or ns does not
 * exist; else *doc is initialised here and the caller destroys it.  Counts
 * one key and one document examined in ctx, with the plan "IDHACK".  When ns
 * may hold several documents with one _id (time-series), nothing is read and
 * *dupp is set: the caller must plan the query instead. */
int sbl_qexec_get_id(sbl_opctx_t *ctx, const char *ns, const bson_value_t *id, bson_t *doc,
                     bool *foundp, bool *dupp, sbl_err_t *err);

/* ---- explain (explain.c) ------------------------------------------------- */

/* The explain command for find, aggregate, count, distinct, update, delete
 * and findAndModify: queryPlanner and executionStats in MongoDB's shape. */
int sbl_exec_explain(sbl_opctx_t *ctx, sbl_err_t *err);

/* ---- cursors (cursor.c) ------------------------------------------------ */

/*
 * A server-side cursor produces documents one at a time.  The source keeps
 * whatever state it needs to resume in a later getMore (e.g. the last _id
 * returned), never a storage cursor across commands.
 */
typedef struct sbl_cursor_source {
    /* Produce the next document into *doc (initialised by next, owned by the caller); set
     * *donep at the end.  Returns 0 or an error code. */
    int (*next)(void *state, sbl_opctx_t *ctx, bson_t *doc, bool *donep, sbl_err_t *err);
    void (*free)(void *state);
    /* Optional (may be NULL): for a tailable cursor, true when the source's end is final
     * (its limit was reached), so the cursor closes instead of waiting for more. */
    bool (*finished)(void *state);
    /* Optional: append fields to each reply's cursor document after the batch
     * (a change stream's postBatchResumeToken); has_pending tells that the
     * last document produced was held back for the next batch. */
    void (*annotate)(void *state, bool has_pending, bson_t *cursor_doc);
    /* Optional: the counter an empty awaitData getMore of this source waits on
     * (NULL: sbl_op_generation()); a change stream's moves only when there is
     * more it may read, so a write it cannot read yet wakes none of them. */
    uint64_t (*wake_gen)(void);
    /* Optional with wake_gen: the monotonic us before which wake_gen cannot
     * move (a change stream's next sample): a parked getMore checks then. */
    int64_t (*wake_due_us)(void);
    /* Optional with wake_gen: called with the cursor idle, under the cursor
     * registry's lock (so briefly, never blocking), when wake_gen() moved to
     * gen while an empty awaitData getMore of it waits: true when a getMore
     * now would still produce nothing, having moved the source's position as
     * that getMore would have; the request then waits on without running. */
    bool (*idle)(void *state, uint64_t gen);
    /* Optional: true when the next getMore is quick enough for the network
     * loop (a change stream served from memory); called with the cursor idle. */
    bool (*quick)(void *state);
    /* Optional: append a whole batch to arr (an empty array) at once, at most
     * limit (< 0: any number) documents of at most max_bytes in all, setting
     * *countp to their number; 0 with *countp 0 leaves the batch to next(). */
    int (*batch)(void *state, sbl_opctx_t *ctx, int64_t limit, size_t max_bytes, bson_t *arr,
                 int64_t *countp, sbl_err_t *err);
    /* Optional with wake_gen: called with the cursor idle, under the cursor
     * registry's lock, with gen = wake_gen(): true when a getMore now would
     * find nothing and change nothing (it would only wait for gen to move). */
    bool (*waits)(void *state, uint64_t gen);
} sbl_cursor_source_t;

/*
 * Fill one batch from the source (at most batch_size documents, or up to
 * 16 MiB of documents; batch_size < 0 means 101 for a first batch and
 * unlimited for getMore), and append the standard reply
 *   cursor: {firstBatch|nextBatch: [...], id, ns}
 * to ctx->reply.  When the source is not exhausted (and single_batch is false)
 * the cursor is registered and its id returned in the reply; otherwise the
 * state is freed.  Takes ownership of state in every case.
 */
int sbl_cursor_first_batch(sbl_opctx_t *ctx, const char *ns, const sbl_cursor_source_t *src,
                           void *state, int64_t batch_size, bool single_batch, sbl_err_t *err);

/* The reply of a query that yields at most one document (doc, or NULL for
 * none) and so needs no cursor: cursor: {firstBatch: [doc], id: 0, ns}. */
void sbl_cursor_reply_one(sbl_opctx_t *ctx, const char *ns, const bson_t *doc);

/* Cursor flags (sbl_cursor_first_batch_flags). */
#define SBL_CURSOR_TAILABLE 0x1   /* stays open when its source runs dry (capped collections) */
#define SBL_CURSOR_AWAIT_DATA 0x2 /* an empty getMore waits up to its maxTimeMS (default 1 s) */
/* sbl_cursor_first_batch with flags: a tailable cursor is registered even when
 * its source is exhausted, and its source is asked again on each getMore. */
int sbl_cursor_first_batch_flags(sbl_opctx_t *ctx, const char *ns,
                                 const sbl_cursor_source_t *src, void *state, int64_t batch_size,
                                 bool single_batch, unsigned flags, sbl_err_t *err);

/* A source over an owned array of documents (listCollections, listIndexes, sorted results). */
void *sbl_cursor_docs_state(bson_t **docs, size_t n); /* takes ownership of docs and each doc */
/* Whether getMore command cmd is for an idle cursor whose source says its
 * next batch is quick (sbl_cursor_source_t.quick): it may run on the loop. */
bool sbl_cursor_get_more_quick(const bson_t *cmd);
/* Park getMore request ctx->cmd (on ctx->conn / ctx->req) without running
 * it, when its cursor's source says it would only wait (.waits) and the
 * command has nothing the getMore itself would check or fail on: it runs
 * when the wait ends, as a parked getMore does.  True when parked
 * (ctx->deferred set); false: run the getMore as usual. */
bool sbl_cursor_park_early(sbl_opctx_t *ctx);
extern const sbl_cursor_source_t sbl_cursor_docs_source;

/* Kill cursors idle for more than idle_ms (the reaper calls this; cursors are
 * not tied to connections: drivers may getMore from any pooled connection).
 * idle_ms < 0 kills every cursor (shutdown). */
void sbl_cursors_reap(int64_t idle_ms);
int64_t sbl_cursors_open_count(void);

/* What $currentOp shows of a cursor between its commands (idleCursors). */
typedef struct sbl_cursor_info {
    int64_t id;
    const char *ns;
    unsigned flags; /* SBL_CURSOR_* */
    bool has_lsid, in_txn;
    const uint8_t *lsid_id; /* 16 bytes, when has_lsid */
    int64_t created_ms, last_use_ms, n_docs, n_batches;
} sbl_cursor_info_t;
/* Call fn for every registered cursor no command is using, under the
 * registry's lock: fn must be quick and must not call into the registry. */
typedef void (*sbl_cursor_visit_fn)(const sbl_cursor_info_t *c, void *arg);
void sbl_cursors_foreach_idle(sbl_cursor_visit_fn fn, void *arg);
/* Kill the cursors opened in the logical session with this id (killSessions,
 * endSessions, an expired session); one serving a getMore right now goes when
 * that getMore ends.  Returns how many. */
size_t sbl_cursors_kill_session(const uint8_t lsid_id[16]);
/* As sbl_cursors_kill_session for the cursors opened inside a
 * multi-document transaction only (its commit or abort, as mongod: the
 * session's other cursors, a change stream's say, stay). */
size_t sbl_cursors_kill_txn(const uint8_t lsid_id[16]);

/* Cursor id's read timestamp (opened by a snapshot or majority read: its
 * getMore reads at the same time; *majorityp: a majority read's), and open
 * timestamp (its opening command's open_ts); 0 when it has none or does not
 * exist. */
void sbl_cursor_times(int64_t id, uint64_t *read_tsp, bool *majorityp, uint64_t *open_tsp);

/* getMore and killCursors, the commands over the registry. */
int sbl_cursor_get_more(sbl_opctx_t *ctx, sbl_err_t *err);
int sbl_cursor_kill(sbl_opctx_t *ctx, sbl_err_t *err);
/* Kill cursor id, whoever opened it (none: nothing): the server's own
 * decision, as when the connection of its exhaust stream closed. */
void sbl_cursor_drop(int64_t id);

/* ---- memory limits and spilling (spill.c) ------------------------------ */

/* The limits, each a server parameter (--setParameter at start-up, setParameter
 * at run time; 100 MB by default). */
typedef enum sbl_mem_limit {
    SBL_LIM_SORT,     /* internalQueryMaxBlockingSortMemoryUsageBytes: $sort, find's sort */
    SBL_LIM_GROUP,    /* internalDocumentSourceGroupMaxMemoryBytes: $group, $bucket ... */
    SBL_LIM_PUSH,     /* internalQueryMaxPushBytes: one $push array */
    SBL_LIM_ADDTOSET, /* internalQueryMaxAddToSetBytes: one $addToSet array */
    SBL_LIM_FACET,    /* internalQueryFacetMaxOutputDocSizeBytes: $facet's document */
    SBL_LIM_GRAPH,    /* internalDocumentSourceGraphLookupMaxMemoryBytes: $graphLookup */
    SBL_LIM_WINDOW,   /* internalDocumentSourceSetWindowFieldsMaxMemoryBytes */
    SBL_LIM_DENSIFY,  /* internalDocumentSourceDensifyMaxMemoryBytes: $densify */
    SBL_LIM_COUNT
} sbl_mem_limit_t;
size_t sbl_mem_limit(sbl_mem_limit_t which);
size_t sbl_mem_sort_limit(void); /* sbl_mem_limit(SBL_LIM_SORT) */

/* Whether an operation may spill: allow_disk is allowDiskUse (-1 not given:
 * the allowDiskUseByDefault parameter decides, true by default as in 7.0). */
bool sbl_mem_disk_ok(int allow_disk);
/* A command's allowDiskUse: 1 true, -1 false, 0 not given. */
int8_t sbl_spill_disk_use(const bson_t *cmd);

/* QueryExceededMemoryLimitNoDiskUseAllowed (292) for the limit `which`. */
int sbl_mem_error(sbl_mem_limit_t which, sbl_err_t *err);

/* Count one $group spill in serverStatus (start-up and parameters: below). */
void sbl_spill_count_group(size_t records, size_t bytes);

/*
 * The external sorter: documents added (owned by it from then on) are kept
 * in memory until their bytes pass `limit`; then they are sorted and written
 * as one run to an unlinked file under <dbpath>/_tmp.  sbl_sorter_next hands
 * back every document (the caller owns it; *docp NULL at the end) in cmp
 * order, ties in the order added, with the tag it was added with.  is_sort:
 * spills count as sort spills in serverStatus.
 */
typedef int (*sbl_sorter_cmp_fn)(const bson_t *a, const bson_t *b, const void *arg);
typedef struct sbl_sorter sbl_sorter_t;
sbl_sorter_t *sbl_sorter_new(sbl_sorter_cmp_fn cmp, const void *arg, size_t limit, bool is_sort);
int sbl_sorter_add(sbl_sorter_t *s, bson_t *doc, int32_t tag, sbl_err_t *err);
int sbl_sorter_spill(sbl_sorter_t *s, sbl_err_t *err); /* write what is buffered as a run */
size_t sbl_sorter_runs(const sbl_sorter_t *s);          /* runs written so far */
int sbl_sorter_next(sbl_sorter_t *s, bson_t **docp, int32_t *tagp, sbl_err_t *err);
void sbl_sorter_free(sbl_sorter_t *s);

/* Read the parameters given at start-up (BadValue when one is malformed) and
 * empty <dbpath>/_tmp of spill files an earlier process left. */
int sbl_spill_init(sbl_err_t *err);

/* setParameter: set `name` from it and append {was: old} to reply; returns -1
 * when name is not one of spill.c's parameters, else 0 or an error code. */
int sbl_spill_set_parameter(const char *name, const bson_iter_t *it, bson_t *reply, sbl_err_t *err);

/* getParameter: append name's current value to r; false when it is not one of them. */
bool sbl_spill_append_parameter(bson_t *r, const char *name);

/* serverStatus: append query: {group: {spills, spilledDataStorageSize,
 * spilledRecords}, sort: {spillToDisk, totalBytesSorted, totalKeysSorted}}. */
void sbl_spill_append_metrics(bson_t *metrics);

#endif
