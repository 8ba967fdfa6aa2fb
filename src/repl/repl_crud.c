/*
 * repl_crud.c: a grouped document entry (repl_apply.c) applied straight
 * through storage, without building a command and running it: an `i` or
 * `u` entry (the whole new document) replaces the document of its _id or
 * inserts it, a `u` entry logged as its diff (o: {$v: 2, diff}, o2: {_id})
 * has the diff applied to the document of o2's _id (none: nothing to
 * change, a replayed entry's), a `d` entry deletes the document of its
 * _id, each with sbl_write, whose observer writes the entry in our oplog,
 * as the command would (repl_oplog.c).  This is what the upserting replacement by _id and
 * the delete by _id of repl_sync.c's entry_command do, less the command
 * layer's parsing, replies and document validation (mongod does not
 * validate documents on secondaries either).
 *
 * A transaction's operations (an applyOps entry's, repl_sync.c) go the same
 * way, in the transaction that applies the whole entry.
 *
 * What must stay true: anything this path does not handle exactly as the
 * command would (a document whose first field is not _id, a delete by more
 * than _id, a collection that is missing, capped or time-series) goes to
 * the command (SBL_RS_NOT_DIRECT), and a failure fails the caller's
 * transaction (the group then runs again one entry at a time).
 */
#include "repl/repl_int.h"

#include <string.h>

#include "doc/doc.h"

/* Apply e (an entry, or an operation of a transaction's entry when
 * !own_entry) straight through storage; see sbl_rs_apply_direct and
 * sbl_rs_apply_txn_op. */
static int apply_direct(const bson_t *e, sbl_coll_t *given, bool own_entry, sbl_err_t *err)
{
    bson_iter_t it;
    const char *op = NULL, *ns = NULL;
    bson_t o;
    bool have_o = false;
    if (!bson_iter_init(&it, e))
        return SBL_RS_NOT_DIRECT;
    while ((op == NULL || ns == NULL || !have_o) && bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "op") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            op = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "ns") == 0 && BSON_ITER_HOLDS_UTF8(&it))
            ns = bson_iter_utf8(&it, NULL);
        else if (strcmp(k, "o") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it))
            have_o = sbl_iter_doc(&it, &o);
    }
    if (op == NULL || ns == NULL || !have_o || op[1] != '\0' ||
        (op[0] != 'i' && op[0] != 'u' && op[0] != 'd'))
        return SBL_RS_NOT_DIRECT;
    bson_t o2, vdiff;
    bool v2 = op[0] == 'u' && sbl_repl_entry_diff(&o, &vdiff);
    if (v2) { /* the document's _id is o2's */
        bson_iter_t f;
        if (!bson_iter_init_find(&f, e, "o2") || !BSON_ITER_HOLDS_DOCUMENT(&f) ||
            !sbl_iter_doc(&f, &o2) || !bson_iter_init(&it, &o2) || !bson_iter_next(&it) ||
            strcmp(bson_iter_key(&it), "_id") != 0)
            return SBL_RS_NOT_DIRECT;
    } else if (!bson_iter_init(&it, &o) || !bson_iter_next(&it) ||
               strcmp(bson_iter_key(&it), "_id") != 0) {
        /* _id first (the stored form); a delete's o is {_id} alone */
        return SBL_RS_NOT_DIRECT;
    }
    bson_value_t id;
    sbl_iter_value(&it, &id);
    if (op[0] == 'd' && bson_iter_next(&it))
        return SBL_RS_NOT_DIRECT;

    sbl_session_t *s = sbl_session_get();
    sbl_coll_t *c = NULL;
    sbl_err_t oerr;
    sbl_err_clear(&oerr);
    if (s == NULL)
        return SBL_RS_NOT_DIRECT;
    if (given != NULL)
        c = given; /* the caller's reference */
    else if (sbl_coll_open(s, ns, false, &c, NULL, &oerr) != 0)
        return SBL_RS_NOT_DIRECT;
    if (sbl_coll_capped(c, NULL, NULL) || sbl_coll_dup_ids(c)) {
        if (given == NULL)
            sbl_coll_release(c);
        return SBL_RS_NOT_DIRECT;
    }
    bson_t old;
    bool found = false;
    int rc;
    if (own_entry) {
        sbl_repl_applying = e;
        sbl_repl_applied_written = false;
    }
    /* An insert with no secondary index is tried as it is (the document is
     * new but when the entry is applied again): its only duplicate is the
     * _id, refused before anything is written, and then it goes on as the
     * upsert below.  One search of the table instead of two. */
    if (own_entry && op[0] == 'i' && sbl_index_count(c) == 0) {
        if ((rc = sbl_write(s, c, SBL_WRITE_INSERT, NULL, &o, NULL, err)) != SBL_E_DuplicateKey)
            goto done;
        sbl_err_clear(err);
    }
    if ((rc = sbl_coll_get(s, c, &id, &old, &found, own_entry ? err : &oerr)) != 0) {
        if (own_entry)
            sbl_repl_applying = NULL;
        if (given == NULL)
            sbl_coll_release(c);
        return own_entry ? rc : SBL_RS_NOT_DIRECT;
    }
    /* the new document: o, or the diff applied to the one the member has */
    bson_t post = BSON_INITIALIZER;
    const bson_t *doc = &o;
    if (v2 && found) {
        rc = sbl_repl_diff_apply(&old, &vdiff, &post, err);
        doc = &post;
    }
    if (rc != 0 || (v2 && !found)) {
        /* a diff that is none, or of a document the member lacks: nothing */
    } else if (op[0] == 'd') {
        if (found)
            rc = sbl_write(s, c, SBL_WRITE_DELETE, &old, NULL, NULL, err);
    } else if (!found) {
        rc = sbl_write(s, c, SBL_WRITE_INSERT, NULL, doc, NULL, err);
    } else if (old.len != doc->len ||
               memcmp(bson_get_data(&old), bson_get_data(doc), doc->len) != 0) {
        rc = sbl_write(s, c, SBL_WRITE_UPDATE, &old, doc, NULL, err);
    }
    bson_destroy(&post);
    if (found)
        bson_destroy(&old);
done:
    if (own_entry) {
        if (rc == 0 && !sbl_repl_applied_written) /* no change (replayed): the entry alone */
            rc = sbl_oplog_append_raw(s, e, err);
        sbl_repl_applying = NULL;
    }
    if (given == NULL)
        sbl_coll_release(c);
    return rc;
}

int sbl_rs_apply_direct(const bson_t *e, sbl_err_t *err)
{
    return apply_direct(e, NULL, true, err);
}

int sbl_rs_apply_direct_in(const bson_t *e, sbl_coll_t *c, sbl_err_t *err)
{
    return apply_direct(e, c, true, err);
}

int sbl_rs_apply_txn_op(const bson_t *op, sbl_err_t *err)
{
    return apply_direct(op, NULL, false, err);
}
