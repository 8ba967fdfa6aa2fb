/*
 * crud_int.h: private to the CRUD command files of src/cmd (cursor.c,
 * crud_util.c, query_exec.c, crud_read.c, crud_write.c, crud_fam.c, agg*.c):
 * argument checking in MongoDB's words, document preparation for writes,
 * and the shared "plan and iterate matching documents" executor.
 *
 * What must stay true: the executor never keeps a storage scan open when it
 * returns to its caller, so the caller may run transactions on the same
 * session between two calls and may resume it from another thread.
 */
#ifndef SBL_CRUD_INT_H
#define SBL_CRUD_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmd/cmd_int.h"
#include "query/query.h"

#define SBL_NS_MAX 256
#define SBL_BSON_MAX_SIZE (16 * 1024 * 1024)

/* MongoDB codes that errors.h does not name. */
#define SBL_E_UnknownField 40415
#define SBL_E_UnrecognizedStage 40324
#define SBL_E_MissingField 40414

/* ---- argument checking (crud_util.c) ------------------------------------ */


/*
 * Refuse unknown top-level fields of cmd: every field must be in known
 * (NULL-terminated; the command name itself included) or be generic
 * ($-prefixed, lsid, writeConcern, comment, maxTimeMS ...).  Error 40415
 * "BSON field '<req>.<field>' is an unknown field."
 */
int sbl_crud_check_fields(const bson_t *cmd, const char *req, const char *const *known,
                          sbl_err_t *err);

/* TypeMismatch 14: "BSON field '<field>' is the wrong type '<t>', expected type '<expected>'". */
int sbl_crud_type_error(sbl_err_t *err, const char *field, const bson_iter_t *it,
                        const char *expected);

/* Take a hint (an index name or key pattern) for the executor: *out views the
 * command's value, *hasp is set; TypeMismatch when it is neither. */
int sbl_crud_get_hint(const bson_iter_t *it, bson_value_t *out, bool *hasp, sbl_err_t *err);

/* Accept a hint that names the _id index ({_id: 1|-1} or "_id_"); BadValue otherwise. */
int sbl_crud_check_hint(const bson_iter_t *it, sbl_err_t *err);

/* Sleep a little before retrying after WriteConflict (attempt counts from 0). */
void sbl_crud_backoff(int attempt);
#define SBL_WRITE_RETRIES 500

/*
 * Prepare a client document for storage into out (initialised here): _id
 * first (an ObjectId generated when missing), size <= 16 MiB, a valid _id
 * (InvalidIdField 53; an embedded _id may not start with a '$' field).
 * Other top-level '$'-prefixed names are data, as in MongoDB 5.0+ (update
 * replacements reject them in src/update).  On error out is left
 * uninitialised.
 */
int sbl_crud_prepare_doc(const bson_t *in, bson_t *out, sbl_err_t *err);

/* Append {index, code, errmsg, <info fields>} as element *countp of arr. */
void sbl_crud_add_write_error(bson_t *arr, uint32_t *countp, int64_t index, const sbl_err_t *e,
                              const bson_t *info);

/* Array key for index i (valid until the next call with the same buf). */
const char *sbl_crud_key(uint32_t i, char buf[16]);

/* ---- collation (crud_coll.c) ---------------------------------------------- */

/*
 * The collation an operation on ns runs under: parsed from it (the command's or
 * statement's `collation` field, named field in errors) when it is not NULL, else
 * the default collation of ns (none when ns does not exist).  *outp NULL: simple.
 */
int sbl_crud_collation(sbl_cmd_ctx_t *ctx, const char *ns, const bson_iter_t *it,
                       const char *field, const sbl_collation_t **outp, sbl_err_t *err);
/* Check a create / index `collation` option and append it to opts as MongoDB
 * stores it (the full spec), nothing for {locale: "simple"}. */
int sbl_crud_collation_option(const bson_iter_t *it, bson_t *opts, sbl_err_t *err);
/* Only the collection default (create's `collation` option) of ns. */
int sbl_crud_default_collation(sbl_cmd_ctx_t *ctx, const char *ns, const sbl_collation_t **outp,
                               sbl_err_t *err);

/* ---- the executor (query_exec.c) ---------------------------------------- */

typedef struct sbl_qexec_opts {
    const bson_t *filter; /* NULL or {}: everything */
    const bson_t *sort;   /* NULL or {}: _id order ({$natural: -1} reverses it) */
    int64_t skip;         /* documents to drop after sorting */
    int64_t limit;        /* 0: no limit */
    const sbl_collation_t *collation; /* how strings compare; NULL: binary */
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
int sbl_qexec_next(sbl_qexec_t *q, sbl_cmd_ctx_t *ctx, bson_t *doc, int32_t *posp, bool *donep,
                   sbl_err_t *err);

/* As sbl_qexec_new, honouring hint (NULL: none): an index name, a key
 * pattern, or {$natural: ±1}.  BadValue (2) when it names no index. */
int sbl_qexec_new_hinted(const char *ns, const sbl_qexec_opts_t *o, const bson_value_t *hint,
                         sbl_qexec_t **qp, sbl_err_t *err);

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
} sbl_qexec_info_t;
void sbl_qexec_info(const sbl_qexec_t *q, sbl_qexec_info_t *out);

/* Whether q's in-memory sort may spill past the sort limit: disk_use is the
 * command's allowDiskUse (sbl_crud_disk_use; 0: not given).  Before the first
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

void sbl_qexec_free(sbl_qexec_t *q);

/* True when filter is exactly {_id: v} for a v whose encoded key equals that
 * of every value the query matches (a string, ObjectId, 32/64-bit integer or
 * date: no NaN, no type-crossing doubles or decimals); a string only under
 * the simple collation.  The result is then the document stored under v's
 * key, or nothing: no plan or matcher needed.  *idp views v inside filter. */
bool sbl_crud_filter_id_point(const bson_t *filter, bson_value_t *idp);

/* The document of ns whose _id is id, without planning (find's point-lookup
 * path): *foundp false and nothing in *doc when there is none or ns does not
 * exist; else *doc is initialised here and the caller destroys it.  Counts
 * one key and one document examined in ctx, with the plan "IDHACK".  When ns
 * may hold several documents with one _id (time-series), nothing is read and
 * *dupp is set: the caller must plan the query instead. */
int sbl_qexec_get_id(sbl_cmd_ctx_t *ctx, const char *ns, const bson_value_t *id, bson_t *doc,
                     bool *foundp, bool *dupp, sbl_err_t *err);

/* ---- the write path (crud_write.c) --------------------------------------- */

#define SBL_E_UpdatedDocTooLarge 17419

struct sbl_update;

/* An update as the write path applies it: an operator or replacement update,
 * or an update pipeline (with the command's evaluated `let` variables). */
typedef struct sbl_crud_update {
    const struct sbl_update *op; /* NULL when pipeline is set */
    const bson_t *pipeline;      /* BSON array of stages, or NULL */
    const bson_t *let;           /* may be NULL */
    bool bypass_validation;      /* bypassDocumentValidation */
} sbl_crud_update_t;

/* ---- validators (crud_valid.c) -------------------------------------------- */

/* Check create/collMod options' validator, validationLevel and validationAction. */
int sbl_crud_check_validator(const bson_t *options, sbl_err_t *err);

/*
 * Check new_doc against c's validator (old_doc: the document before an update,
 * NULL for inserts).  Returns 0 when valid, bypassed, off, warn-only, or when
 * moderate and old_doc was already invalid; else 121 with errInfo appended to
 * err_info (may be NULL).
 */
int sbl_crud_validate(sbl_coll_t *c, const bson_t *old_doc, const bson_t *new_doc, bool bypass,
                      bson_t *err_info, sbl_err_t *err);

/*
 * Change one document by _id in its own transaction, retrying WriteConflict:
 * read it, re-check it against m (NULL: no check), then apply u, or delete it
 * when u is NULL.  cand (may be NULL) is the document the caller's query read:
 * in a collection with several documents per _id (time-series) the one
 * changed is the one with cand's bytes (none if it changed meanwhile).
 * *matchedp tells whether it existed and matched, *changedp whether anything
 * was written.  old_out / new_out (may be NULL) receive
 * copies of the document before and after (initialised only when matched).
 * err_info (may be NULL) receives keyPattern/keyValue on DuplicateKey.
 * Sets ctx->wrote on commit.
 */
int sbl_crud_modify_one(sbl_cmd_ctx_t *ctx, sbl_coll_t *c, const bson_value_t *id,
                        const bson_t *cand, const sbl_matcher_t *m, const sbl_crud_update_t *u,
                        bool *matchedp, bool *changedp, bson_t *old_out, bson_t *new_out,
                        bson_t *err_info, sbl_err_t *err);

/*
 * Insert the document an upsert produces: seed from filter's equalities,
 * apply u as an insert, put _id first (generated when missing), insert in
 * its own transaction (creating the collection).  new_out (may be NULL)
 * receives a copy of the inserted document, id_out (may be NULL) a copy of
 * its _id.  Sets ctx->wrote.
 */
int sbl_crud_upsert(sbl_cmd_ctx_t *ctx, const char *ns, const bson_t *filter,
                    const sbl_crud_update_t *u, bson_t *new_out, bson_value_t *id_out,
                    bson_t *err_info, sbl_err_t *err);

/* ---- aggregation (agg.c, agg_group.c) ----------------------------------- */

/* Documents flowing between pipeline stages; each element owned (bson_new/bson_copy). */
typedef struct sbl_docvec {
    bson_t **v;
    size_t n, cap;
} sbl_docvec_t;

void sbl_docvec_push(sbl_docvec_t *dv, bson_t *doc); /* takes ownership */
void sbl_docvec_clear(sbl_docvec_t *dv);              /* frees every document and the array */

/* What every stage of one aggregate command shares. */
typedef struct sbl_agg_env {
    sbl_cmd_ctx_t *ctx;
    const char *db;    /* the command's database ($lookup, $out and $merge resolve names in it) */
    const bson_t *let; /* evaluated `let` variables (constants); never NULL */
    int64_t now_ms;    /* $$NOW, fixed for the whole command */
    int allow_disk;    /* allowDiskUse: -1 not given (MongoDB 7.0 default: allowed), 0, 1 */
    int depth;         /* nesting of sub-pipelines ($lookup, $facet) */
    const sbl_collation_t *coll; /* $match, $sort, $group keys compare strings by it; NULL: binary */
} sbl_agg_env_t;

/*
 * Run the stages of pipeline (a BSON array of one-field stage documents) over
 * dv, starting at stage index `first`, for collection ns.  dv is replaced by
 * the output; on error dv is left holding valid (partial) documents.
 */
int sbl_agg_run(sbl_agg_env_t *env, const char *ns, const bson_t *pipeline, size_t first,
                sbl_docvec_t *dv, sbl_err_t *err);

struct sbl_expr;
/* Evaluate a parsed expression with doc as $$ROOT and env's variables ($$NOW, let). */
int sbl_agg_eval(const sbl_agg_env_t *env, const struct sbl_expr *e, const bson_t *doc,
                 bson_value_t *out, sbl_err_t *err);

/* Check a pipeline's shape (array of one-field documents) and count its stages. */
int sbl_agg_check_pipeline(const bson_t *pipeline, size_t *np, sbl_err_t *err);

/*
 * The $group stage: replace dv with one document per group.  When ids is not
 * NULL it gives each input document's group key (spec's _id is then ignored;
 * $bucket uses this).  Fails with 292 when the groups outgrow the memory limit
 * and allowDiskUse is false.
 */
int sbl_agg_group(sbl_docvec_t *dv, const bson_t *spec, const sbl_agg_env_t *env,
                  const bson_value_t *ids, sbl_err_t *err);

/* Copy in to out (initialised by the caller) with the dotted path set to v
 * (removed when v is NULL or EOD); missing intermediate documents are created. */
void sbl_agg_set_path(const bson_t *in, const char *path, const bson_value_t *v, bson_t *out);

/* ---- memory limits and spilling (agg_spill.c) ------------------------------ */

/* The limits, each a server parameter (--setParameter at start-up, setParameter
 * at run time; 100 MB by default). */
typedef enum sbl_agg_limit {
    SBL_LIM_SORT,     /* internalQueryMaxBlockingSortMemoryUsageBytes: $sort, find's sort */
    SBL_LIM_GROUP,    /* internalDocumentSourceGroupMaxMemoryBytes: $group, $bucket ... */
    SBL_LIM_PUSH,     /* internalQueryMaxPushBytes: one $push array */
    SBL_LIM_ADDTOSET, /* internalQueryMaxAddToSetBytes: one $addToSet array */
    SBL_LIM_FACET     /* internalQueryFacetMaxOutputDocSizeBytes: $facet's document */
} sbl_agg_limit_t;
size_t sbl_agg_limit(sbl_agg_limit_t which);
size_t sbl_agg_mem_limit(void); /* sbl_agg_limit(SBL_LIM_SORT) */

/* Whether an operation may spill: allow_disk is allowDiskUse (-1 not given:
 * the allowDiskUseByDefault parameter decides, true by default as in 7.0). */
bool sbl_agg_disk_ok(int allow_disk);
/* A command's allowDiskUse: 1 true, -1 false, 0 not given. */
int8_t sbl_crud_disk_use(const bson_t *cmd);

/* QueryExceededMemoryLimitNoDiskUseAllowed (292) when bytes exceed the limit
 * of stage ("$sort": the sort limit, else the $group limit) and spilling is
 * not allowed; sbl_agg_mem_error sets that error unconditionally. */
int sbl_agg_check_mem(const sbl_agg_env_t *env, size_t bytes, const char *stage, sbl_err_t *err);
int sbl_agg_mem_error(sbl_agg_limit_t which, sbl_err_t *err);

/* Count one $group spill in serverStatus (start-up and parameters: spill.h). */
void sbl_agg_count_group_spill(size_t records, size_t bytes);

/*
 * The external sorter: documents added (owned by it from then on) are kept
 * in memory until their bytes pass `limit`; then they are sorted and written
 * as one run to an unlinked file under <dbpath>/_tmp.  sbl_sorter_next hands
 * back every document (the caller owns it; *docp NULL at the end) in cmp
 * order, ties in the order added, with the tag it was added with.  is_sort:
 * spills count as sort spills in serverStatus.
 */
typedef int (*sbl_agg_cmp_fn)(const bson_t *a, const bson_t *b, const void *arg);
typedef struct sbl_sorter sbl_sorter_t;
sbl_sorter_t *sbl_sorter_new(sbl_agg_cmp_fn cmp, const void *arg, size_t limit, bool is_sort);
int sbl_sorter_add(sbl_sorter_t *s, bson_t *doc, int32_t tag, sbl_err_t *err);
int sbl_sorter_spill(sbl_sorter_t *s, sbl_err_t *err); /* write what is buffered as a run */
size_t sbl_sorter_runs(const sbl_sorter_t *s);          /* runs written so far */
int sbl_sorter_next(sbl_sorter_t *s, bson_t **docp, int32_t *tagp, sbl_err_t *err);
void sbl_sorter_free(sbl_sorter_t *s);

/*
 * The $sort stage over dv (spec: a sort document; limit > 0: only the best
 * `limit` are kept, top-k), under env's collation; over the sort limit it
 * sorts through the disk when allowed, else fails with 292.
 */
int sbl_agg_sort(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, int64_t limit,
                 sbl_err_t *err);

/* Stages of agg_stages.c, dispatched by agg.c; it is the stage's value. */
int sbl_agg_lookup(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err);
int sbl_agg_facet(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv, const bson_t *spec,
                  sbl_err_t *err);
int sbl_agg_bucket(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err);
int sbl_agg_bucket_auto(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec,
                        sbl_err_t *err);
int sbl_agg_sort_by_count(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_value_t *expr,
                          sbl_err_t *err);
int sbl_agg_sample(sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err);
int sbl_agg_out(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err);
int sbl_agg_merge(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err);
int sbl_agg_documents(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                      sbl_err_t *err);
int sbl_agg_list_local_sessions(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                                sbl_err_t *err);

/*
 * Apply an update pipeline (stages $addFields/$set/$project/$unset/$replaceRoot/
 * $replaceWith only) to doc, writing the result into out (initialised here on
 * success).  let holds the command's evaluated `let` variables (may be NULL).
 */
int sbl_agg_update_doc(sbl_cmd_ctx_t *ctx, const bson_t *pipeline, const bson_t *let,
                       const bson_t *doc, bson_t *out, sbl_err_t *err);
/* Validate an update pipeline's stages (14/40324 ... as MongoDB) without running it. */
int sbl_agg_check_update_pipeline(const bson_t *pipeline, sbl_err_t *err);

#endif
