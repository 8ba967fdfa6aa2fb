/*
 * chunk_jumbo.c: the chunk size and jumbo chunks on the config server, after
 * mongod 7.0.  A collection's chunk size is config.collections'
 * maxChunkSizeBytes (configureCollectionBalancing), else config.settings'
 * {_id: "chunksize", value: <MiB>}, else 128 MiB.  Before a migration the
 * config server counts the range on the donor: more documents than 1.3 x
 * chunk size / average document size is mongod's "too big to move"; when
 * every one of them has the same shard key value no split can make the
 * range smaller, so the chunk is marked jumbo: true in config.chunks, the
 * migration is refused with ChunkTooBig (153) and the balancer leaves the
 * chunk alone from then on.  The chunk size is also the balancer's unit
 * (balancer_size.c: 3 of them apart is out of balance).
 *
 * What must stay true: only ranges of one shard key value are marked jumbo
 * (no split can divide them, so nothing clears the mark); a range that is
 * too big but holds several values moves whole when moveChunk names it
 * (mongod refuses it; Sable's balancer, like mongod's, splits off about a
 * chunk size before it moves).  One-field range keys only: the range is
 * queried by its bounds.
 */
#include "cmd/cmd_int.h"
#include "cmd/migrate_int.h"

#include "doc/doc.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_CHUNK_MB 128

/* The first document of config.<coll> matching filter into out (copied). */
static bool cfg_one(const char *coll, const bson_t *filter, bson_t *out)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    sbl_err_t e = {0};
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    bool found = false;
    bson_iter_t it, d;
    if (sbl_cmd_run_checked("config", &cmd, &reply, &e) == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) && BSON_ITER_HOLDS_DOCUMENT(&d)) {
        bson_t doc;
        if (sbl_iter_doc(&d, &doc)) {
            bson_copy_to(&doc, out);
            found = true;
        }
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return found;
}

int64_t sbl_chunk_size_bytes(const char *ns)
{
    bson_t f = BSON_INITIALIZER, d;
    bson_iter_t it;
    int64_t bytes = 0;
    BSON_APPEND_UTF8(&f, "_id", ns);
    if (cfg_one("collections", &f, &d)) {
        if (bson_iter_init_find(&it, &d, "maxChunkSizeBytes") && BSON_ITER_HOLDS_NUMBER(&it))
            bytes = bson_iter_as_int64(&it);
        bson_destroy(&d);
    }
    bson_reinit(&f);
    BSON_APPEND_UTF8(&f, "_id", "chunksize");
    if (bytes <= 0 && cfg_one("settings", &f, &d)) {
        if (bson_iter_init_find(&it, &d, "value") && BSON_ITER_HOLDS_NUMBER(&it))
            bytes = (int64_t)(bson_iter_as_double(&it) * 1024 * 1024);
        bson_destroy(&d);
    }
    bson_destroy(&f);
    return bytes > 0 ? bytes : (int64_t)DEFAULT_CHUNK_MB * 1024 * 1024;
}

bool sbl_chunk_is_jumbo(const bson_t *chunk)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, chunk, "jumbo") && bson_iter_as_bool(&it);
}

/* Run cmd in db on the donor's primary; 0 with *reply (destroy it). */
static int donor_run(const char *host, const char *db, const bson_t *cmd, bson_t *reply,
                     sbl_err_t *err)
{
    int rc = sbl_shard_remote_check(host, db, cmd, reply, err);
    if (rc != 0)
        bson_destroy(reply); /* the callers keep a reply only when it succeeded */
    return rc;
}

/* The key value of the range's first (dir 1) or last (dir -1) document by
 * field into out (copied; EOD when none). */
static int edge_value(const char *host, const char *db, const char *coll, const char *field,
                      const bson_t *q, int dir, bson_value_t *out, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, s, p, reply;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_DOCUMENT(&cmd, "filter", q);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "sort", &s);
    BSON_APPEND_INT32(&s, field, dir);
    bson_append_document_end(&cmd, &s);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "projection", &p);
    BSON_APPEND_INT32(&p, field, 1);
    bson_append_document_end(&cmd, &p);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_BOOL(&cmd, "singleBatch", true);
    out->value_type = BSON_TYPE_EOD;
    int rc = donor_run(host, db, &cmd, &reply, err);
    bson_destroy(&cmd);
    bson_iter_t it, d, v;
    if (rc == 0) {
        if (bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
            bson_iter_recurse(&d, &v)) {
            if (bson_iter_find(&v, field))
                bson_value_copy(bson_iter_value(&v), out);
            else
                out->value_type = BSON_TYPE_NULL; /* a missing key is null */
        }
        bson_destroy(&reply);
    }
    return rc;
}

/* Mark the chunk with _id id jumbo. */
static int mark_jumbo(const bson_value_t *id, sbl_err_t *err)
{
    bson_t set = BSON_INITIALIZER;
    BSON_APPEND_BOOL(&set, "jumbo", true);
    int rc = mig_chunk_set(id, &set, err);
    bson_destroy(&set);
    return rc;
}

int sbl_chunk_check_movable(const char *ns, const bson_t *key, const bson_t *chunk,
                            const char *donor_host, sbl_err_t *err)
{
    bson_iter_t k, lo, hi, id;
    bson_t min, max;
    if (!bson_iter_init(&k, key) || !bson_iter_next(&k) || BSON_ITER_HOLDS_UTF8(&k) ||
        bson_iter_next(&k) || !mig_doc_of(chunk, "min", &min) || !mig_doc_of(chunk, "max", &max) ||
        !bson_iter_init(&lo, &min) || !bson_iter_next(&lo) || !bson_iter_init(&hi, &max) ||
        !bson_iter_next(&hi) || !bson_iter_init_find(&id, chunk, "_id"))
        return 0; /* compound or hashed: not checked */
    bson_iter_init(&k, key);
    bson_iter_next(&k);
    const char *field = bson_iter_key(&k);
    char db[128];
    const char *coll;
    mig_split_ns(ns, db, sizeof(db), &coll);
    bson_t q = BSON_INITIALIZER, r, cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_DOCUMENT_BEGIN(&q, field, &r);
    sbl_append_value(&r, "$gte", 4, bson_iter_value(&lo));
    sbl_append_value(&r, "$lt", 3, bson_iter_value(&hi));
    bson_append_document_end(&q, &r);
    BSON_APPEND_UTF8(&cmd, "count", coll);
    BSON_APPEND_DOCUMENT(&cmd, "query", &q);
    int64_t n = 0, avg = 0;
    bson_iter_t it;
    int rc = donor_run(donor_host, db, &cmd, &reply, err);
    if (rc == 0) {
        if (bson_iter_init_find(&it, &reply, "n"))
            n = bson_iter_as_int64(&it);
        bson_destroy(&reply);
    }
    bson_reinit(&cmd);
    BSON_APPEND_UTF8(&cmd, "collStats", coll);
    if (rc == 0 && n > 0 && (rc = donor_run(donor_host, db, &cmd, &reply, err)) == 0) {
        if (bson_iter_init_find(&it, &reply, "avgObjSize"))
            avg = bson_iter_as_int64(&it);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    int64_t size = sbl_chunk_size_bytes(ns);
    int64_t limit = avg > 0 ? size / avg : n;
    if (limit < 1)
        limit = 1;
    limit = limit * 130 / 100; /* mongod's maxRecsWhenFull */
    if (rc == 0 && n > limit) {
        bson_value_t first = {.value_type = BSON_TYPE_EOD}, last = first;
        rc = edge_value(donor_host, db, coll, field, &q, 1, &first, err);
        if (rc == 0 && (rc = edge_value(donor_host, db, coll, field, &q, -1, &last, err)) == 0 &&
            first.value_type != BSON_TYPE_EOD && last.value_type != BSON_TYPE_EOD &&
            sbl_value_compare(&first, &last) == 0) {
            rc = mark_jumbo(bson_iter_value(&id), err);
            if (rc == 0)
                rc = sbl_err_set(err, SBL_E_ChunkTooBig, "Cannot move chunk: the maximum "
                                 "number of documents for a chunk is %lld, the maximum chunk "
                                 "size is %lld, average document size is %lld. Found %lld "
                                 "documents in chunk ns: %s, all with one shard key value: "
                                 "the chunk is marked jumbo", (long long)limit, (long long)size,
                                 (long long)avg, (long long)n, ns);
        }
        bson_value_destroy(&first);
        bson_value_destroy(&last);
    }
    bson_destroy(&q);
    return rc;
}
