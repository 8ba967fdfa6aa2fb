/*
 * agg.h: the aggregation framework.  A pipeline (a BSON array of stages) runs
 * over a vector of documents: the leading $match/$sort/$skip/$limit are
 * planned by the query engine (src/exec), the rest run here ($group with its
 * accumulators, $bucket and $bucketAuto, $lookup, $facet, $unwind, $out and
 * $merge ...), with the memory limits and external sorter of src/exec.  Also
 * update pipelines and views (catalog entries whose reads are pipelines).
 *
 * Above it: the command handlers (aggregate, find and count on views,
 * updates with pipelines).  Below it: src/exec, src/expr (expressions and
 * accumulators), src/query, src/storage.
 */
#ifndef SBL_AGG_H
#define SBL_AGG_H

#include <stdatomic.h>
#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "exec/exec.h"

/* ---- aggregation (pipeline.c, group.c) ----------------------------------- */

/* Documents flowing between pipeline stages; each element owned (bson_new/bson_copy). */
typedef struct sbl_docvec {
    bson_t **v;
    size_t n, cap;
} sbl_docvec_t;

void sbl_docvec_push(sbl_docvec_t *dv, bson_t *doc); /* takes ownership */
void sbl_docvec_clear(sbl_docvec_t *dv);              /* frees every document and the array */

/* Where a pipeline reads other collections and writes $out / $merge when
 * that is not this server's storage: sable-router's merger (src/router,
 * rt_agg.c) reads and writes through the cluster.  NULL in sabled. */
typedef struct sbl_agg_remote {
    /* Append the documents of ns matching filter (NULL: all) to out. */
    int (*read)(void *arg, const char *ns, const bson_t *filter, sbl_docvec_t *out,
                sbl_err_t *err);
    /* Run the final $out or $merge stage (st: the stage's field) over dv. */
    int (*write)(void *arg, const bson_iter_t *st, sbl_docvec_t *dv, sbl_err_t *err);
    void *arg;
} sbl_agg_remote_t;

/* What every stage of one aggregate command shares. */
typedef struct sbl_agg_env {
    sbl_opctx_t *ctx;
    const char *db;    /* the command's database ($lookup, $out and $merge resolve names in it) */
    const bson_t *let; /* evaluated `let` variables (constants); never NULL */
    int64_t now_ms;    /* $$NOW, fixed for the whole command */
    int allow_disk;    /* allowDiskUse: -1 not given (MongoDB 7.0 default: allowed), 0, 1 */
    int depth;         /* nesting of sub-pipelines ($lookup, $facet) */
    const sbl_collation_t *coll; /* $match, $sort, $group keys compare strings by it; NULL: binary */
    const sbl_agg_remote_t *remote; /* other collections through it (the router); NULL: local */
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

/*
 * What mongos runs for $bucket and $sortByCount across shards (src/router's
 * split): the equivalent $group spec into group (initialised here; the caller
 * destroys it), to be followed by a $sort on {_id: 1} ($bucket, boundaries
 * compared under coll) or {count: -1} ($sortByCount).  $bucket's _id is a
 * $switch over [boundary, next boundary) ranges, else its default (no
 * default: $switch's 40066 at run time, as the stage's).  The stages' own
 * errors for a bad spec (40192-40202, 40148).
 */
int sbl_agg_bucket_group(const bson_t *spec, const sbl_collation_t *coll, bson_t *group,
                         sbl_err_t *err);
int sbl_agg_sort_by_count_group(const bson_value_t *expr, bson_t *group, sbl_err_t *err);

/* Copy in to out (initialised by the caller) with the dotted path set to v
 * (removed when v is NULL or EOD); missing intermediate documents are created. */
void sbl_agg_set_path(const bson_t *in, const char *path, const bson_value_t *v, bson_t *out);

/* $geoNear (geo_near.c), which must be a pipeline's first stage: the command
 * layer runs `filter` (a near query) through the executor with
 * keep_geo_distance, then hands each result to sbl_agg_geonear_finish, which
 * sets distanceField (times distanceMultiplier) and includeLocs. */
typedef struct sbl_agg_geonear {
    bson_t filter;
    char *dist_field, *locs_field;
    double mult;
} sbl_agg_geonear_t;
/* Parse spec ({near, distanceField, spherical, query, key, minDistance,
 * maxDistance, includeLocs, distanceMultiplier}); without key, ns's one geo
 * index gives the field (IndexNotFound 27 with none or several).  On success
 * the caller destroys g. */
int sbl_agg_geonear_prepare(sbl_opctx_t *ctx, const char *ns, const bson_t *spec,
                            sbl_agg_geonear_t *g, sbl_err_t *err);
/* Replace *docp (a heap document with the hidden fields) by the stage's output. */
void sbl_agg_geonear_finish(const sbl_agg_geonear_t *g, bson_t **docp);
void sbl_agg_geonear_destroy(sbl_agg_geonear_t *g);

/* QueryExceededMemoryLimitNoDiskUseAllowed (292) when bytes exceed the limit
 * of stage ("$sort": the sort limit, else the $group limit) and spilling is
 * not allowed. */
int sbl_agg_check_mem(const sbl_agg_env_t *env, size_t bytes, const char *stage, sbl_err_t *err);


/*
 * The $sort stage over dv (spec: a sort document; limit > 0: only the best
 * `limit` are kept, top-k), under env's collation; over the sort limit it
 * sorts through the disk when allowed, else fails with 292.
 */
int sbl_agg_sort(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, int64_t limit,
                 sbl_err_t *err);

/* Read ns into out (appended): a collection through the executor (filter
 * may be NULL; it is planned, so indexes serve it), or a view, whose source
 * is read and whose pipeline runs (then filter as a $match); with
 * env->remote, through its read. */
int sbl_agg_read_ns(sbl_agg_env_t *env, const char *ns, const bson_t *filter,
                    sbl_docvec_t *out, sbl_err_t *err);

/* $unionWith and $graphLookup (union_graph.c); it is the stage's value. */
int sbl_agg_union_with(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                       sbl_err_t *err);
int sbl_agg_graph_lookup(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                         sbl_err_t *err);

/* $setWindowFields (window.c, window_fn.c): the documents come out ordered by
 * partition, then sortBy, each with its output fields. */
int sbl_agg_set_window_fields(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it,
                              sbl_err_t *err);

/* $densify and $fill (densify.c); $fill runs as $setWindowFields ($locf,
 * $linearFill) then $addFields ($ifNull), as mongod rewrites it. */
int sbl_agg_densify(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_iter_t *it, sbl_err_t *err);
int sbl_agg_fill(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv, const bson_iter_t *it,
                 sbl_err_t *err);

/* $indexStats (index_stats.c), a first stage: one document per index of ns
 * with its access count (none when ns does not exist). */
int sbl_agg_index_stats(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv,
                        const bson_iter_t *it, sbl_err_t *err);

/* Stages of stages.c, agg_write.c and bucket_auto.c, dispatched by pipeline.c;
 * it is the stage's value. */
int sbl_agg_lookup(sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_t *spec, sbl_err_t *err);
/* $redact (redact.c): spec evaluated at each document level of each
 * document, with $$DESCEND, $$PRUNE and $$KEEP; a pruned top level drops the
 * document. */
int sbl_agg_redact(const sbl_agg_env_t *env, sbl_docvec_t *dv, const bson_value_t *spec,
                   sbl_err_t *err);
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
/* $listSessions: the records of config.system.sessions (ns) in dv, kept for
 * the users the stage's options name (src/sessions' uids). */
int sbl_agg_list_sessions(sbl_agg_env_t *env, const char *ns, sbl_docvec_t *dv,
                          const bson_iter_t *it, sbl_err_t *err);

/*
 * Apply an update pipeline (stages $addFields/$set/$project/$unset/$replaceRoot/
 * $replaceWith only) to doc, writing the result into out (initialised here on
 * success).  let holds the command's evaluated `let` variables (may be NULL).
 */
int sbl_agg_update_doc(sbl_opctx_t *ctx, const bson_t *pipeline, const bson_t *let,
                       const bson_t *doc, bson_t *out, sbl_err_t *err);
/* A $merge whenMatched pipeline's variables for source document src into out
 * (initialised here on success): let_spec (NULL: the default {new: src})
 * evaluated over src, new (src) added when insert (whenNotMatched "insert") and
 * let_spec has none, over the command's evaluated let cmd_let (NULL: none); env
 * gives $$NOW (NULL: none). */
int sbl_agg_merge_vars(const bson_t *cmd_let, const bson_t *let_spec, bool insert,
                       const bson_t *src, const sbl_agg_env_t *env, bson_t *out, sbl_err_t *err);
/* The $merge stage it's let (let_spec, NULL: none) checked as mongod's: none
 * without a whenMatched pipeline (51199), new only as "$$ROOT" (51273). */
int sbl_agg_merge_check_let(const bson_iter_t *it, bool pipeline, const bson_t *let_spec,
                            sbl_err_t *err);
/* Validate an update pipeline's stages (14/40324 ... as MongoDB) without running it. */
int sbl_agg_check_update_pipeline(const bson_t *pipeline, sbl_err_t *err);

/* ---- change streams (changestream.c) ------------------------------------------ */

/*
 * aggregate whose first stage is $changeStream on ns (a collection, or
 * "<db>.$cmd.aggregate" when collectionless: the database, or with
 * allChangesForCluster on admin the deployment): parse the stage and the
 * stages after it, and answer with the first batch of a tailable awaitData
 * cursor over the oplog's majority-committed entries (docs/change-streams.md).
 * 40573 on a standalone, as mongod.
 */
int sbl_agg_change_stream(sbl_opctx_t *ctx, const char *ns, bool collectionless,
                          const bson_t *pipeline, int64_t batch_size, sbl_err_t *err);
/* serverStatus metrics.changeStreams: the oplog entries change streams have
 * read, by the shared reads of their scopes and by streams reading alone. */
void sbl_agg_change_stream_metrics(bson_t *metrics);

/* ---- views (views.c) ------------------------------------------------------- */

/*
 * What must stay true: while no view exists (the usual case) the read and
 * write paths pay one relaxed atomic load (sbl_views_any).
 */

/* 1: some view may exist; 0: none; -1: not yet known. */
extern atomic_int sbl_views_state;
bool sbl_views_scan(void);

static inline bool sbl_views_any(void)
{
    int v = atomic_load_explicit(&sbl_views_state, memory_order_relaxed);
    return v >= 0 ? v != 0 : sbl_views_scan();
}

/* Record that a view now exists (create). */
void sbl_views_note_created(void);

/* Whether ns names a view (opened through ss). */
bool sbl_view_is(sbl_session_t *ss, const char *ns);

/* When ns is a view: true, its source collection in srcns (may be NULL) and
 * its pipeline copied into pipe (may be NULL; initialised here). */
bool sbl_view_get(sbl_session_t *ss, const char *ns, char *srcns, size_t len, bson_t *pipe);

/* create with viewOn: check viewOn / pipeline and fill opts {viewOn, pipeline}. */
int sbl_view_options(const bson_t *cmd, bson_t *opts, sbl_err_t *err);

/* Users may create and write only the system collections MongoDB lets them
 * (system.js, system.views, system.profile, ..., config.system.sessions):
 * InvalidNamespace (73) otherwise;
 * a view is never written: CommandNotSupportedOnView (166). */
int sbl_validate_user_write_ns(const char *ns, sbl_err_t *err);

#endif
