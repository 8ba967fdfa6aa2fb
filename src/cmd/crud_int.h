/*
 * crud_int.h: private to the CRUD command files of src/cmd (crud_read.c,
 * crud_write.c, crud_fam.c, crud_valid.c, crud_util.c, and the handlers
 * that write documents): write errors in the reply, the write path's
 * retrying single-document changes and upserts, and collection validators.
 * The query engine and the aggregation framework they call are src/exec
 * and src/agg.
 */
#ifndef SBL_CRUD_INT_H
#define SBL_CRUD_INT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agg/agg.h"
#include "cmd/cmd_int.h"
#include "exec/exec.h"

/* Append {index, code, errmsg, <info fields>} as element *countp of arr. */
void sbl_crud_add_write_error(bson_t *arr, uint32_t *countp, int64_t index, const sbl_err_t *e,
                              const bson_t *info);

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
int sbl_crud_modify_one(sbl_opctx_t *ctx, sbl_coll_t *c, const bson_value_t *id,
                        const bson_t *cand, const sbl_matcher_t *m, const sbl_crud_update_t *u,
                        bool *matchedp, bool *changedp, bson_t *old_out, bson_t *new_out,
                        bson_t *err_info, sbl_err_t *err);
/* The next candidate of a write's plan (sbl_qexec_next): it waits in place
 * for a prepared transaction's write it meets (prepare_wait.c); a wait that
 * gave up answers its reason (50 maxTimeMS, 11601, 290, 11600). */
int sbl_crud_read_candidate(sbl_opctx_t *ctx, sbl_qexec_t *q, bson_t *doc, bool *donep,
                            sbl_err_t *err);
/* The current version of the document a change reads (by id, or like cand
 * where _ids repeat): sbl_coll_get's answer.  Inside a multi-document
 * transaction a prepared transaction's write of it is waited out in place,
 * with the outcomes of sbl_crud_read_candidate; outside one WriteConflict
 * comes back and the caller's retry loop waits (prepare_wait.c). */
int sbl_crud_read_current(sbl_opctx_t *ctx, sbl_coll_t *c, const bson_value_t *id,
                          const bson_t *cand, bson_t *doc, bool *foundp, sbl_err_t *err);

/*
 * Insert the document an upsert produces: seed from filter's equalities,
 * apply u as an insert, put _id first (generated when missing), insert in
 * its own transaction (creating the collection).  new_out (may be NULL)
 * receives a copy of the inserted document, id_out (may be NULL) a copy of
 * its _id.  Sets ctx->wrote.
 */
int sbl_crud_upsert(sbl_opctx_t *ctx, const char *ns, const bson_t *filter,
                    const sbl_crud_update_t *u, bson_t *new_out, bson_value_t *id_out,
                    bson_t *err_info, sbl_err_t *err);

#endif
