/*
 * rt_drain.c: taking a shard out of the cluster, as mongos 7.0 does.
 *
 *   removeShard  {removeShard: name}: the first call marks the shard
 *                draining in config.shards ("started"); the balancer
 *                (balancer.c with bal_drain.c's policy, on the config server
 *                primary, while it is enabled) then moves its chunks to the
 *                other shards; later calls count what is left ("ongoing");
 *                once no chunk and no database names it, the call removes
 *                its config.shards document ("completed").
 *   movePrimary  {movePrimary: db, to}: takes the database's critical
 *                section on its primary (the donor: routed commands for its
 *                unsharded collections wait, src/shard/shard_db.c), copies
 *                them (documents, indexes, options; views) to shard to,
 *                makes it the primary in config.databases with a new
 *                version, ends the critical section (the donor forgets the
 *                version: the waiting commands get StaleDbVersion and their
 *                routers retry on the new primary), then drops the old
 *                copies.
 *
 * What must stay true: a draining shard takes no new database or chunk
 * (rt_shard_takes_data); a removed shard keeps its index in the router's
 * shard list (routing tables hold indexes) and no command goes to it;
 * movePrimary changes config.databases only once every collection is copied
 * while the critical section held throughout (renewed right before the
 * commit), and drops nothing before that, so a failure leaves the old
 * primary whole and no write lands on the donor after its copy.
 */
#include "router/router_int.h"

#include "common/clock.h"
#include "doc/doc.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define COPY_BATCH_BYTES (8 * 1024 * 1024) /* one insert's documents, well under 16 MB */
#define COPY_BATCH_DOCS 1000
/* movePrimary's critical section on the donor is a lease of this length,
 * renewed after every batch copied: a router that dies mid-way holds the
 * database's routed commands back at most that long. */
#define CRIT_LEASE_MS 30000

/* ---- the config servers ---- */

/* How many documents of config.<coll> match filter; -1 with err. */
static int64_t cfg_count(const char *coll, const bson_t *filter, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, "count", coll);
    BSON_APPEND_DOCUMENT(&cmd, "query", filter);
    int rc = rt_run(-1, "config", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0)
        return -1;
    bson_iter_t it;
    int64_t n = -1;
    if (rt_reply_error(&reply, "counting config metadata", err) == 0)
        n = bson_iter_init_find(&it, &reply, "n") ? bson_iter_as_int64(&it) : 0;
    bson_destroy(&reply);
    return n;
}

/* update (u non-NULL) or delete the documents of config.<coll> matching q. */
static int cfg_change(const char *coll, const bson_t *q, const bson_t *u, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, a, s;
    BSON_APPEND_UTF8(&cmd, u != NULL ? "update" : "delete", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, u != NULL ? "updates" : "deletes", &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, "0", &s);
    BSON_APPEND_DOCUMENT(&s, "q", q);
    if (u != NULL)
        BSON_APPEND_DOCUMENT(&s, "u", u);
    else
        BSON_APPEND_INT32(&s, "limit", 0);
    bson_append_document_end(&a, &s);
    bson_append_array_end(&cmd, &a);
    int rc = rt_cfg_write(&cmd, NULL, err);
    bson_destroy(&cmd);
    return rc;
}

/* config.changelog's entry (mongod's shape) for what; best effort. */
static void changelog(const char *what, const char *ns, const bson_t *details)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    bson_oid_t oid;
    char hex[25], id[400];
    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, hex);
    snprintf(id, sizeof(id), "%s-%lld-%s", sbl_server_host(), (long long)ms, hex);
    bson_t cmd = BSON_INITIALIZER, docs, d, reply;
    BSON_APPEND_UTF8(&cmd, "insert", "changelog");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
    BSON_APPEND_DOCUMENT_BEGIN(&docs, "0", &d);
    BSON_APPEND_UTF8(&d, "_id", id);
    BSON_APPEND_UTF8(&d, "server", sbl_server_host());
    BSON_APPEND_UTF8(&d, "clientAddr", "");
    BSON_APPEND_DATE_TIME(&d, "time", ms);
    BSON_APPEND_UTF8(&d, "what", what);
    BSON_APPEND_UTF8(&d, "ns", ns);
    BSON_APPEND_DOCUMENT(&d, "details", details);
    bson_append_document_end(&docs, &d);
    bson_append_array_end(&cmd, &docs);
    sbl_err_t e = {0};
    if (rt_run(-1, "config", &cmd, &reply, &e) == 0)
        bson_destroy(&reply);
    bson_destroy(&cmd);
}

/* ---- removeShard ---- */

/* note and dbsToMove: the databases whose primary shard is name. */
static int append_dbs_to_move(bson_t *reply, const char *name, sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER, sort = BSON_INITIALIZER, arr, a;
    BSON_APPEND_UTF8(&f, "primary", name);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_init(&arr);
    int rc = rt_cfg_find_all("databases", &f, &sort, &arr, err);
    bson_destroy(&f);
    bson_destroy(&sort);
    BSON_APPEND_UTF8(reply, "note", "you need to drop or movePrimary these databases");
    BSON_APPEND_ARRAY_BEGIN(reply, "dbsToMove", &a);
    bson_iter_t it;
    int n = 0;
    if (rc == 0 && bson_iter_init(&it, &arr))
        while (bson_iter_next(&it)) {
            bson_t d;
            const char *db;
            char k[16];
            if (sbl_iter_doc(&it, &d) && (db = sbl_doc_utf8(&d, "_id")) != NULL &&
                strcmp(db, "local") != 0) {
                snprintf(k, sizeof(k), "%d", n++);
                BSON_APPEND_UTF8(&a, k, db);
            }
        }
    bson_append_array_end(reply, &a);
    bson_destroy(&arr);
    return rc;
}

/* The count of config.<coll> documents whose field names shard, with
 * jumbo: true too when jumbo. */
static int64_t count_on(const char *coll, const char *field, const char *shard, bool jumbo,
                        sbl_err_t *err)
{
    bson_t f = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, field, shard);
    if (jumbo)
        BSON_APPEND_BOOL(&f, "jumbo", true);
    int64_t n = cfg_count(coll, &f, err);
    bson_destroy(&f);
    return n;
}

int rt_cmd_remove_shard(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it) ||
        bson_iter_utf8(&it, NULL)[0] == '\0')
        return sbl_err_set(err, SBL_E_TypeMismatch, "removeShard needs the shard's name");
    char name[128];
    snprintf(name, sizeof(name), "%s", bson_iter_utf8(&it, NULL));
    bson_t f = BSON_INITIALIZER, arr, sd, det = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&f, "_id", name);
    BSON_APPEND_UTF8(&det, "shard", name);
    bson_init(&arr);
    int rc = rt_cfg_find_all("shards", &f, NULL, &arr, err);
    bool found = rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it) &&
                 sbl_iter_doc(&it, &sd);
    bool draining = found && bson_iter_init_find(&it, &sd, "draining") && bson_iter_as_bool(&it);
    bson_destroy(&arr);
    if (rc != 0)
        goto out;
    if (!found) {
        rc = sbl_err_set(err, SBL_E_ShardNotFound, "Could not drop shard '%s' because it does "
                         "not exist", name);
        goto out;
    }
    /* as mongod: some other shard must stay that is not draining */
    bson_t others = BSON_INITIALIZER, ne;
    BSON_APPEND_DOCUMENT_BEGIN(&others, "_id", &ne);
    BSON_APPEND_UTF8(&ne, "$ne", name);
    bson_append_document_end(&others, &ne);
    BSON_APPEND_DOCUMENT_BEGIN(&others, "draining", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(&others, &ne);
    int64_t nothers = cfg_count("shards", &others, err);
    bson_destroy(&others);
    if (nothers < 0) {
        rc = err->code;
        goto out;
    }
    if (nothers == 0) {
        rc = sbl_err_set(err, SBL_E_IllegalOperation, "Operation not allowed because it would "
                         "remove the last shard");
        goto out;
    }
    if (!draining) {
        bson_t u = BSON_INITIALIZER, set;
        BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
        BSON_APPEND_BOOL(&set, "draining", true);
        bson_append_document_end(&u, &set);
        changelog("removeShard.start", "", &det);
        rc = cfg_change("shards", &f, &u, err);
        bson_destroy(&u);
        if (rc != 0)
            goto out;
        sbl_err_t e = {0};
        rt_shards_reload(&e);
        BSON_APPEND_UTF8(reply, "msg", "draining started successfully");
        BSON_APPEND_UTF8(reply, "state", "started");
        BSON_APPEND_UTF8(reply, "shard", name);
        rc = append_dbs_to_move(reply, name, err);
        goto out;
    }
    int64_t chunks = count_on("chunks", "shard", name, false, err);
    int64_t dbs = chunks < 0 ? -1 : count_on("databases", "primary", name, false, err);
    int64_t jumbo = dbs < 0 ? -1 : count_on("chunks", "shard", name, true, err);
    if (jumbo < 0) {
        rc = err->code;
        goto out;
    }
    if (chunks > 0 || dbs > 0) {
        bson_t rem;
        BSON_APPEND_UTF8(reply, "msg", "draining ongoing");
        BSON_APPEND_UTF8(reply, "state", "ongoing");
        BSON_APPEND_DOCUMENT_BEGIN(reply, "remaining", &rem);
        BSON_APPEND_INT64(&rem, "chunks", chunks);
        BSON_APPEND_INT64(&rem, "dbs", dbs);
        BSON_APPEND_INT64(&rem, "jumboChunks", jumbo);
        bson_append_document_end(reply, &rem);
        rc = append_dbs_to_move(reply, name, err);
        goto out;
    }
    if ((rc = cfg_change("shards", &f, NULL, err)) != 0)
        goto out;
    changelog("removeShard", "", &det);
    sbl_err_t e = {0};
    rt_shards_reload(&e);
    BSON_APPEND_UTF8(reply, "msg", "removeshard completed successfully");
    BSON_APPEND_UTF8(reply, "state", "completed");
    BSON_APPEND_UTF8(reply, "shard", name);
out:
    bson_destroy(&f);
    bson_destroy(&det);
    return rc;
}

/* ---- movePrimary ---- */

int rt_db_crit(int s, const char *db, rt_crit_t what, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply;
    BSON_APPEND_UTF8(&cmd, what == RT_CRIT_EXIT ? "_shardsvrMovePrimaryExitCriticalSection"
                                                : "_shardsvrMovePrimaryEnterCriticalSection",
                     db);
    if (what != RT_CRIT_EXIT) {
        BSON_APPEND_INT64(&cmd, "leaseMillis", CRIT_LEASE_MS);
        BSON_APPEND_BOOL(&cmd, "renew", what == RT_CRIT_RENEW);
    }
    int rc = rt_run(s, "admin", &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) {
        rc = rt_reply_error(&reply, "movePrimary's critical section", err);
        bson_destroy(&reply);
    }
    return rc;
}

/* cmd on shard s in db; 0 with *reply (initialised either way) or the
 * transport or command error, prefixed with what. */
static int run_ok(int s, const char *db, const bson_t *cmd, bson_t *reply, const char *what,
                  sbl_err_t *err)
{
    int rc = rt_run(s, db, cmd, reply, err);
    if (rc != 0) {
        bson_init(reply);
        return rc;
    }
    rc = rt_reply_error(reply, what, err);
    bson_iter_t it, e, f;
    if (rc == 0 && bson_iter_init_find(&it, reply, "writeErrors") && bson_iter_recurse(&it, &e) &&
        bson_iter_next(&e) && bson_iter_recurse(&e, &f) && bson_iter_find(&f, "code"))
        rc = sbl_err_set(err, (int)bson_iter_as_int64(&f), "%s: a write failed", what);
    return rc;
}

/* listCollections of db on shard s into arr (its cursor's first batch:
 * collections and views, each {name, type, options}). */
static int list_colls(int s, const char *db, bson_t *arr, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, c, reply;
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &c);
    BSON_APPEND_INT32(&c, "batchSize", 100000);
    bson_append_document_end(&cmd, &c);
    int rc = run_ok(s, db, &cmd, &reply, "listCollections", err);
    bson_destroy(&cmd);
    bson_iter_t it, b;
    bson_init(arr);
    if (rc == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch", &b) && bson_iter_recurse(&b, &it))
        while (bson_iter_next(&it))
            sbl_append_iter(arr, bson_iter_key(&it), -1, &it);
    bson_destroy(&reply);
    return rc;
}

static bool in_array(const bson_t *arr, const char *name)
{
    bson_iter_t it;
    if (bson_iter_init(&it, arr))
        while (bson_iter_next(&it))
            if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), name) == 0)
                return true;
    return false;
}

/* The collections of db movePrimary moves: neither sharded nor internal
 * (system.* other than system.js), views last, as {name, type, options}. */
static int colls_to_move(int src, const char *db, bson_t *out, sbl_err_t *err)
{
    char re[200];
    snprintf(re, sizeof(re), "^%s\\.", db);
    bson_t f = BSON_INITIALIZER, sharded_docs, sharded = BSON_INITIALIZER, all;
    BSON_APPEND_REGEX(&f, "_id", re, "");
    bson_init(&sharded_docs);
    int rc = rt_cfg_find_all("collections", &f, NULL, &sharded_docs, err);
    bson_destroy(&f);
    bson_iter_t it;
    int n = 0;
    char k[16];
    if (rc == 0 && bson_iter_init(&it, &sharded_docs))
        while (bson_iter_next(&it)) {
            bson_t d;
            bson_iter_t dr;
            const char *ns;
            if (sbl_iter_doc(&it, &d) && (ns = sbl_doc_utf8(&d, "_id")) != NULL &&
                !(bson_iter_init_find(&dr, &d, "dropped") && bson_iter_as_bool(&dr))) {
                snprintf(k, sizeof(k), "%d", n++);
                BSON_APPEND_UTF8(&sharded, k, ns + strlen(db) + 1);
            }
        }
    bson_destroy(&sharded_docs);
    if (rc == 0)
        rc = list_colls(src, db, &all, err);
    else
        bson_init(&all);
    bson_init(out);
    n = 0;
    for (int views = 0; views < 2 && rc == 0; views++) {
        bson_iter_init(&it, &all);
        while (bson_iter_next(&it)) {
            bson_t d;
            const char *name, *type;
            if (!sbl_iter_doc(&it, &d) || (name = sbl_doc_utf8(&d, "name")) == NULL ||
                in_array(&sharded, name) ||
                (strncmp(name, "system.", 7) == 0 && strcmp(name, "system.js") != 0))
                continue;
            type = sbl_doc_utf8(&d, "type");
            if ((type != NULL && strcmp(type, "view") == 0) != (views == 1))
                continue;
            snprintf(k, sizeof(k), "%d", n++);
            BSON_APPEND_DOCUMENT(out, k, &d);
        }
    }
    bson_destroy(&sharded);
    bson_destroy(&all);
    return rc;
}

/* Start an insert command of documents into db.coll: *docs is its open
 * documents array. */
static void insert_begin(bson_t *ins, bson_t *docs, const char *coll)
{
    bson_reinit(ins);
    BSON_APPEND_UTF8(ins, "insert", coll);
    BSON_APPEND_BOOL(ins, "ordered", true);
    BSON_APPEND_BOOL(ins, "bypassDocumentValidation", true);
    BSON_APPEND_ARRAY_BEGIN(ins, "documents", docs);
}

/* Close *docs and send the insert to dst when it holds any document. */
static int insert_send(int dst, const char *db, bson_t *ins, bson_t *docs, int *ndocs,
                       sbl_err_t *err)
{
    bson_append_array_end(ins, docs);
    int rc = 0;
    if (*ndocs > 0) {
        bson_t reply;
        rc = run_ok(dst, db, ins, &reply, "copying documents", err);
        bson_destroy(&reply);
    }
    *ndocs = 0;
    return rc;
}

/* Every document of db.coll on src inserted into db.coll on dst, renewing
 * the donor's critical section as it goes. */
static int copy_docs(int src, int dst, const char *db, const char *coll, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply, ins = BSON_INITIALIZER, docs;
    int ndocs = 0;
    BSON_APPEND_UTF8(&cmd, "find", coll);
    int rc = run_ok(src, db, &cmd, &reply, "reading the documents to copy", err);
    bson_destroy(&cmd);
    insert_begin(&ins, &docs, coll);
    while (rc == 0) {
        bson_iter_t it, cur, b;
        int64_t id = 0;
        if (bson_iter_init_find(&it, &reply, "cursor") && bson_iter_recurse(&it, &cur))
            while (bson_iter_next(&cur)) {
                const char *k = bson_iter_key(&cur);
                if (strcmp(k, "id") == 0)
                    id = bson_iter_as_int64(&cur);
                else if ((strcmp(k, "firstBatch") == 0 || strcmp(k, "nextBatch") == 0) &&
                         bson_iter_recurse(&cur, &b))
                    while (rc == 0 && bson_iter_next(&b)) {
                        char key[16];
                        snprintf(key, sizeof(key), "%d", ndocs++);
                        sbl_append_iter(&docs, key, -1, &b);
                        if (ndocs >= COPY_BATCH_DOCS || docs.len >= COPY_BATCH_BYTES) {
                            rc = insert_send(dst, db, &ins, &docs, &ndocs, err);
                            insert_begin(&ins, &docs, coll);
                        }
                    }
            }
        bson_destroy(&reply);
        if (rc != 0 || id == 0) {
            bson_init(&reply);
            break;
        }
        if ((rc = rt_db_crit(src, db, RT_CRIT_RENEW, err)) != 0) {
            bson_init(&reply);
            break;
        }
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        rc = run_ok(src, db, &cmd, &reply, "reading the documents to copy", err);
        bson_destroy(&cmd);
    }
    bson_destroy(&reply);
    if (rc == 0)
        rc = insert_send(dst, db, &ins, &docs, &ndocs, err);
    else
        bson_append_array_end(&ins, &docs);
    bson_destroy(&ins);
    return rc;
}

/* db.coll's indexes but _id's from src created on dst. */
static int copy_indexes(int src, int dst, const char *db, const char *coll, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply, create = BSON_INITIALIZER, idx;
    BSON_APPEND_UTF8(&cmd, "listIndexes", coll);
    int rc = run_ok(src, db, &cmd, &reply, "listIndexes", err);
    bson_destroy(&cmd);
    BSON_APPEND_UTF8(&create, "createIndexes", coll);
    BSON_APPEND_ARRAY_BEGIN(&create, "indexes", &idx);
    int n = 0;
    bson_iter_t it, b;
    if (rc == 0 && bson_iter_init(&it, &reply) &&
        bson_iter_find_descendant(&it, "cursor.firstBatch", &b) && bson_iter_recurse(&b, &it))
        while (bson_iter_next(&it)) {
            bson_t spec, clean;
            const char *name;
            if (!sbl_iter_doc(&it, &spec) || (name = sbl_doc_utf8(&spec, "name")) == NULL ||
                strcmp(name, "_id_") == 0)
                continue;
            char k[16];
            snprintf(k, sizeof(k), "%d", n++);
            bson_init(&clean);
            bson_copy_to_excluding_noinit(&spec, &clean, "ns", "v", NULL);
            BSON_APPEND_DOCUMENT(&idx, k, &clean);
            bson_destroy(&clean);
        }
    bson_append_array_end(&create, &idx);
    bson_destroy(&reply);
    if (rc == 0 && n > 0) {
        rc = run_ok(dst, db, &create, &reply, "creating the indexes", err);
        bson_destroy(&reply);
    }
    bson_destroy(&create);
    return rc;
}

/* One collection or view ({name, type, options}) of db copied from src to dst. */
static int copy_coll(int src, int dst, const char *db, const bson_t *info, sbl_err_t *err)
{
    const char *name = sbl_doc_utf8(info, "name"), *type = sbl_doc_utf8(info, "type");
    bool view = type != NULL && strcmp(type, "view") == 0;
    bson_t cmd = BSON_INITIALIZER, opts, reply;
    bson_iter_t it;
    BSON_APPEND_UTF8(&cmd, "create", name);
    if (bson_iter_init_find(&it, info, "options") && sbl_iter_doc(&it, &opts))
        bson_concat(&cmd, &opts);
    int rc = run_ok(dst, db, &cmd, &reply, "creating the collection", err);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    if (rc == 0 && !view)
        rc = copy_indexes(src, dst, db, name, err);
    if (rc == 0 && !view)
        rc = copy_docs(src, dst, db, name, err);
    return rc;
}

/* Drop each collection of colls ({name ...} documents) of db on shard s;
 * best effort (cleanup). */
static void drop_all(int s, const char *db, const bson_t *colls)
{
    bson_iter_t it;
    bson_iter_init(&it, colls);
    while (bson_iter_next(&it)) {
        bson_t d, cmd = BSON_INITIALIZER, reply;
        sbl_err_t e = {0};
        if (!sbl_iter_doc(&it, &d) || sbl_doc_utf8(&d, "name") == NULL)
            continue;
        BSON_APPEND_UTF8(&cmd, "drop", sbl_doc_utf8(&d, "name"));
        if (rt_run(s, db, &cmd, &reply, &e) == 0)
            bson_destroy(&reply);
        bson_destroy(&cmd);
    }
}

/* Which collections of colls already exist on dst: NamespaceExists (mongod
 * refuses to clone over them). */
static int check_recipient(int dst, const char *db, const bson_t *colls, sbl_err_t *err)
{
    bson_t there;
    int rc = list_colls(dst, db, &there, err);
    bson_iter_t it, t;
    if (rc == 0 && bson_iter_init(&it, colls))
        while (rc == 0 && bson_iter_next(&it)) {
            bson_t d, e;
            const char *name;
            if (!sbl_iter_doc(&it, &d) || (name = sbl_doc_utf8(&d, "name")) == NULL)
                continue;
            bson_iter_init(&t, &there);
            while (rc == 0 && bson_iter_next(&t))
                if (sbl_iter_doc(&t, &e) && sbl_doc_utf8(&e, "name") != NULL &&
                    strcmp(sbl_doc_utf8(&e, "name"), name) == 0)
                    rc = sbl_err_set(err, SBL_E_NamespaceExists, "Found orphaned collection "
                                     "%s.%s on the recipient shard %s", db, name,
                                     rt_shard_id(dst));
        }
    bson_destroy(&there);
    return rc;
}

/* config.databases' entry for db: primary to, and a new version. */
static int commit_primary(const char *db, const char *to, sbl_err_t *err)
{
    bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set, inc;
    uint32_t t, i;
    sbl_clock_ts_next(&t, &i);
    BSON_APPEND_UTF8(&q, "_id", db);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_UTF8(&set, "primary", to);
    BSON_APPEND_TIMESTAMP(&set, "version.timestamp", t, i);
    bson_append_document_end(&u, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "version.lastMod", 1);
    bson_append_document_end(&u, &inc);
    int rc = cfg_change("databases", &q, &u, err);
    bson_destroy(&q);
    bson_destroy(&u);
    return rc;
}

static int move_primary(const bson_t *cmd, sbl_err_t *err)
{
    bson_iter_t it;
    const char *db = bson_iter_init(&it, cmd) && bson_iter_next(&it) && BSON_ITER_HOLDS_UTF8(&it)
                         ? bson_iter_utf8(&it, NULL)
                         : "";
    const char *to = sbl_doc_utf8(cmd, "to");
    if (db[0] == '\0' || strchr(db, '.') != NULL || strlen(db) >= 64)
        return sbl_err_set(err, SBL_E_InvalidNamespace, "invalid db name specified: %s", db);
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 || strcmp(db, "local") == 0)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Can't move primary for %s database", db);
    if (to == NULL || to[0] == '\0')
        return sbl_err_set(err, SBL_E_InvalidOptions, "you have to specify where you want to "
                           "move it");
    sbl_err_t e = {0};
    rt_shards_reload(&e);
    int dst = rt_shard_find(to);
    if (dst < 0 || rt_shard_removed(dst))
        return sbl_err_set(err, SBL_E_ShardNotFound, "Requested primary shard %s does not exist "
                           ":: caused by :: Shard %s not found", to, to);
    bson_t f = BSON_INITIALIZER, arr, d;
    BSON_APPEND_UTF8(&f, "_id", db);
    bson_init(&arr);
    int rc = rt_cfg_find_all("databases", &f, NULL, &arr, err);
    bson_destroy(&f);
    int src = -1;
    if (rc == 0 && bson_iter_init(&it, &arr) && bson_iter_next(&it) && sbl_iter_doc(&it, &d) &&
        sbl_doc_utf8(&d, "primary") != NULL)
        src = rt_shard_find(sbl_doc_utf8(&d, "primary"));
    bson_destroy(&arr);
    if (rc != 0)
        return rc;
    if (src < 0)
        return sbl_err_set(err, SBL_E_NamespaceNotFound, "Database %s not found", db);
    if (src == dst)
        return 0; /* as mongod: already there, nothing to do */
    if (!rt_shard_takes_data(dst))
        return sbl_err_set(err, SBL_E_ShardNotFound, "Requested primary shard %s is draining",
                           to);
    /* From here to the commit no routed command changes (or reads) the
     * database on the donor: what is copied is all there is. */
    if ((rc = rt_db_crit(src, db, RT_CRIT_ENTER, err)) != 0)
        return rc;
    bson_t colls, det = BSON_INITIALIZER;
    if ((rc = colls_to_move(src, db, &colls, err)) == 0)
        rc = check_recipient(dst, db, &colls, err);
    BSON_APPEND_UTF8(&det, "from", rt_shard_id(src));
    BSON_APPEND_UTF8(&det, "to", to);
    bool copying = rc == 0;
    if (copying)
        changelog("movePrimary.start", db, &det);
    bson_iter_init(&it, &colls);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t info;
        if (sbl_iter_doc(&it, &info))
            rc = copy_coll(src, dst, db, &info, err);
    }
    /* still held (not expired, no new donor primary): nothing was missed */
    if (rc == 0)
        rc = rt_db_crit(src, db, RT_CRIT_RENEW, err);
    if (rc == 0)
        rc = commit_primary(db, to, err);
    /* the donor forgets its version: the commands held back, and later ones
     * with the old version, get StaleDbVersion and go to the new primary */
    rt_db_crit(src, db, RT_CRIT_EXIT, &e);
    rt_meta_flush(); /* this database's cached primary and unsharded routing tables */
    if (rc == 0) {
        drop_all(src, db, &colls);
        changelog("movePrimary.commit", db, &det);
    } else if (copying) {
        drop_all(dst, db, &colls); /* what this attempt copied */
    }
    bson_destroy(&colls);
    bson_destroy(&det);
    return rc;
}

int rt_cmd_move_primary(const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    /* the copy is the router's own work, not a statement of the client's session */
    bool was = rt_sess_suspend(true);
    int rc = move_primary(cmd, err);
    rt_sess_suspend(!was);
    (void)reply;
    return rc;
}
