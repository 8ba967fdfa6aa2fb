/*
 * rt_fam.c: findAndModify through the router.  With the shard key's
 * equality it goes to one shard; without, it tries the candidate shards
 * one after the other until one matches, so at most one document changes.
 * A statement that changes the document's shard key moves it (rt_move.c)
 * in a retryable write or transaction, and a retry of one that did is
 * answered its recorded result.
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "query/query.h"
#include "shard/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* findAndModify's reply from a move's result (rt_move_doc's), its value
 * projected by cmd's fields.  0 or the projection's error. */
static int fam_reply(const bson_t *res, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it, up;
    bson_t leo, spec, value, out = BSON_INITIALIZER;
    int rc = 0;
    bool upserted = bson_iter_init_find(&up, res, "upserted");
    BSON_APPEND_DOCUMENT_BEGIN(reply, "lastErrorObject", &leo);
    BSON_APPEND_INT32(&leo, "n", 1);
    BSON_APPEND_BOOL(&leo, "updatedExisting", !upserted);
    if (upserted)
        sbl_append_iter(&leo, "upserted", -1, &up);
    bson_append_document_end(reply, &leo);
    if (bson_iter_init_find(&it, res, "value") && sbl_iter_doc(&it, &value) &&
        bson_iter_init_find(&it, cmd, "fields") && sbl_iter_doc(&it, &spec)) {
        sbl_projection_t *p = sbl_projection_new(&spec, err);
        rc = p == NULL ? err->code : sbl_projection_apply(p, &value, -1, &out, err);
        sbl_projection_free(p);
        BSON_APPEND_DOCUMENT(reply, "value", &out);
    } else if (bson_iter_init_find(&it, res, "value")) {
        sbl_append_iter(reply, "value", -1, &it);
    }
    bson_destroy(&out);
    BSON_APPEND_DOUBLE(reply, "ok", 1.0);
    return rc;
}

/* A retried findAndModify that moved its document: the first reply into
 * reply, -1; 0 when it did not; or a transport error. */
static int fam_recorded(const bool *t, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_t res;
    bool found = false;
    int from = 0;
    while (from < RT_MAX_SHARDS - 1 && !t[from])
        from++;
    int rc = rt_move_recorded(from, 0, &res, &found, err);
    if (rc == 0 && found)
        rc = fam_reply(&res, cmd, reply, err) == 0 ? -1 : err->code;
    bson_destroy(&res);
    return rc;
}

/* findAndModify answered 283 with its images (r) by shard s: moved
 * (rt_move_doc), its reply into reply.  0 or the move's error. */
static int fam_moved(const char *db, const bson_t *cmd, const rt_coll_t *c, int s, const bson_t *r,
                     bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    bson_t res;
    bool want_new = bson_iter_init_find(&it, cmd, "new") && bson_iter_as_bool(&it);
    if (!bson_iter_init_find(&it, cmd, "findAndModify"))
        bson_iter_init_find(&it, cmd, "findandmodify");
    int rc =
        rt_move_doc(db, bson_iter_utf8(&it, NULL), cmd, c, s, 0, r, want_new ? 1 : 0, &res, err);
    if (rc == 0)
        rc = fam_reply(&res, cmd, reply, err);
    bson_destroy(&res);
    return rc;
}

int rt_find_and_modify(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    char ns[400];
    if (rt_write_ns(db, cmd, "findAndModify", ns, sizeof(ns)) == NULL &&
        rt_write_ns(db, cmd, "findandmodify", ns, sizeof(ns)) == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "findAndModify needs a collection name");
    bson_t q = BSON_INITIALIZER;
    bson_iter_t it;
    bool upsert = bson_iter_init_find(&it, cmd, "upsert") && bson_iter_as_bool(&it);
    if (bson_iter_init_find(&it, cmd, "query") && BSON_ITER_HOLDS_DOCUMENT(&it))
        sbl_iter_doc(&it, &q);
    sbl_err_t e2 = {0};
    rt_db_primary(db, true, &e2);
    int move_tries = 0;
    for (int attempt = 0; attempt <= RT_RETRIES; attempt++) {
        rt_coll_t *c =
            attempt > 0 ? rt_write_refresh(db, ns, true, err) : rt_coll_get(ns, false, err);
        if (c == NULL)
            return err->code;
        bool t[RT_MAX_SHARDS];
        int nt = rt_target_read(c, &q, t, err);
        if (nt < 0) {
            rt_coll_release(c);
            return err->code;
        }
        if (nt != 1 && upsert) {
            rt_coll_release(c);
            return sbl_err_set(err, SBL_E_ShardKeyNotFound, "Query for sharded findAndModify "
                               "must contain the shard key");
        }
        bson_t ud;
        bool key_upd = false, key_pipe = false;
        if (bson_iter_init_find(&it, cmd, "update") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            sbl_iter_doc(&it, &ud);
            int code = 0;
            const char *msg = NULL;
            key_upd = rt_changes_shard_key(c, &ud, &q);
            if (key_upd && (code = rt_key_change(c, &ud, &q, false, &msg)) != 0) {
                rt_coll_release(c);
                return sbl_err_set(err, code, "%s", msg);
            }
        } else if (bson_iter_init_find(&it, cmd, "update") && sbl_iter_array(&it, &ud)) {
            key_pipe = rt_pipeline_may_change_key(c, &ud);
        }
        /* a retryable write or a transaction may move it (rt_move.c) */
        bool may_move = (key_upd || key_pipe) && nt == 1 && rt_sess_retryable() &&
                        rt_filter_has_full_key(c, &q);
        if (may_move && !rt_sess_in_txn()) {
            int rc = fam_recorded(t, cmd, reply, err);
            if (rc != 0) {
                rt_coll_release(c);
                return rc < 0 ? 0 : rc; /* -1: answered */
            }
        }
        bool stale = false;
        int last = -1;
        for (int s = 0; s < RT_MAX_SHARDS; s++)
            if (t[s])
                last = s;
        for (int s = 0; s < RT_MAX_SHARDS && !stale; s++) {
            if (!t[s])
                continue;
            bson_t fwd = BSON_INITIALIZER, r;
            rt_copy_cmd(cmd, &fwd, NULL);
            rt_append_version(&fwd, c, s);
            int rc = rt_run(s, db, &fwd, &r, err);
            bson_destroy(&fwd);
            if (rc != 0) {
                rt_coll_release(c);
                return rc;
            }
            if (rt_stale_code(rt_reply_code(&r))) {
                stale = true;
                bson_destroy(&r);
                break;
            }
            const char *msg = NULL;
            bool wcos = (key_upd || key_pipe) && rt_reply_code(&r) == SBL_E_WouldChangeOwningShard;
            int kc = 0;
            if (wcos && may_move)
                kc = fam_moved(db, cmd, c, s, &r, reply, err);
            else if (wcos && key_pipe)
                kc = rt_key_rules(c, &q, false, &msg);
            /* again: the routing, or the document since the shard answered,
             * changed (a conflict does not count as a routing round) */
            bool conflict = kc == SBL_E_WriteConflict;
            if (conflict && !rt_move_again(&move_tries)) {
                bson_destroy(&r);
                rt_coll_release(c);
                return kc; /* err says why */
            }
            if (rt_stale_code(kc) || conflict) {
                attempt -= conflict;
                stale = true;
                bson_destroy(&r);
                break;
            }
            if (wcos && (may_move || kc != 0)) {
                bson_destroy(&r);
                rt_coll_release(c);
                return msg != NULL ? sbl_err_set(err, kc, "%s", msg) : kc;
            }
            bson_iter_t v, nv;
            bool found = bson_iter_init(&v, &r) &&
                         bson_iter_find_descendant(&v, "lastErrorObject.n", &nv) &&
                         bson_iter_as_int64(&nv) > 0;
            if (found || rt_reply_code(&r) != 0 || s == last) {
                bson_copy_to_excluding_noinit(&r, reply, "$clusterTime", "operationTime", NULL);
                bson_destroy(&r);
                rt_coll_release(c);
                return 0;
            }
            bson_destroy(&r);
        }
        rt_coll_release(c);
        if (!stale)
            break;
    }
    return sbl_err_set(err, SBL_E_StaleConfig, "routing for %s kept changing", ns);
}
