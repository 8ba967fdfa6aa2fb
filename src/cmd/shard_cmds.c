/*
 * shard_cmds.c: the commands a shard (sabled --shardsvr) answers for the
 * cluster: _addShard (the router hands the shard its shardIdentity: its
 * name and the config servers' connection string; kept in
 * admin.system.version as mongod keeps it, and read back at start-up),
 * _flushRoutingTableCacheUpdates (re-read a collection's shard version
 * now), _shardsvrGetStatsForBalancing (each collection's data size here,
 * which the balancer compares across shards),
 * _shardsvrMovePrimaryEnterCriticalSection / ExitCriticalSection
 * (movePrimary's and dropDatabase's hold on a database, src/shard/shard_db.c)
 * and shardingState.  The version check itself is the dispatcher's
 * (dispatch.c and routed.c: a command carrying shardVersion or
 * databaseVersion is checked before its handler runs; src/shard has the
 * rules).  Also sbl_cmd_run_checked, how the sharding code (migrations,
 * the balancer, the transaction coordinator) runs a command on this member
 * and takes its error.
 */
#include "cmd/cmd_int.h"
#include "common/clock.h"
#include "doc/doc.h"

#include "server/server.h"
#include "shard/shard.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool is_shardsvr(void)
{
    return sbl_server_options()->cluster_role == SBL_ROLE_SHARDSVR;
}

int sbl_cmd_add_shard_identity(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (!is_shardsvr())
        return sbl_err_set(err, SBL_E_IllegalOperation, "Cannot accept sharding commands if not "
                           "started with --shardsvr");
    bson_iter_t it;
    bson_t si;
    if (!bson_iter_init_find(&it, ctx->cmd, "shardIdentity") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return sbl_err_set(err, SBL_E_BadValue, "_addShard needs a shardIdentity document");
    {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&si, data, len);
    }
    const char *name = sbl_doc_utf8(&si, "shardName");
    const char *cfg = sbl_doc_utf8(&si, "configsvrConnectionString");
    if (name == NULL || cfg == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "shardIdentity needs shardName and "
                           "configsvrConnectionString");
    const char *have = sbl_shard_name();
    if (have != NULL && strcmp(have, name) != 0)
        return sbl_err_set(err, SBL_E_IllegalOperation, "this shard is already %s", have);
    /* Persist it where mongod does, then take it in. */
    bson_t up = BSON_INITIALIZER, ups, u, q, doc, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&up, "update", "system.version");
    BSON_APPEND_ARRAY_BEGIN(&up, "updates", &ups);
    BSON_APPEND_DOCUMENT_BEGIN(&ups, "0", &u);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "q", &q);
    BSON_APPEND_UTF8(&q, "_id", "shardIdentity");
    bson_append_document_end(&u, &q);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &doc);
    BSON_APPEND_UTF8(&doc, "_id", "shardIdentity");
    BSON_APPEND_UTF8(&doc, "shardName", name);
    BSON_APPEND_UTF8(&doc, "configsvrConnectionString", cfg);
    bson_append_document_end(&u, &doc);
    BSON_APPEND_BOOL(&u, "upsert", true);
    bson_append_document_end(&ups, &u);
    bson_append_array_end(&up, &ups);
    sbl_cmd_run("admin", &up, &reply);
    bson_destroy(&up);
    int rc = 0;
    if (!bson_iter_init_find(&it, &reply, "ok") || bson_iter_as_double(&it) != 1.0 ||
        bson_iter_init_find(&it, &reply, "writeErrors"))
        rc = sbl_err_set(err, SBL_E_InternalError, "could not store the shardIdentity document");
    bson_destroy(&reply);
    if (rc != 0)
        return rc;
    return sbl_shard_set_identity(name, cfg, err);
}

int sbl_cmd_flush_routing_table(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (!is_shardsvr())
        return sbl_err_set(err, SBL_E_IllegalOperation, "Cannot accept sharding commands if not "
                           "started with --shardsvr");
    const char *ns = sbl_doc_utf8(ctx->cmd, "_flushRoutingTableCacheUpdates");
    if (ns == NULL)
        return sbl_err_set(err, SBL_E_BadValue, "_flushRoutingTableCacheUpdates needs a "
                           "namespace");
    return sbl_shard_refresh(ns, err);
}

/* The database a movePrimary critical-section command names. */
static int crit_db(sbl_opctx_t *ctx, const char *name, const char **dbp, sbl_err_t *err)
{
    if (!is_shardsvr())
        return sbl_err_set(err, SBL_E_IllegalOperation, "Cannot accept sharding commands if not "
                           "started with --shardsvr");
    *dbp = sbl_doc_utf8(ctx->cmd, name);
    if (*dbp == NULL || **dbp == '\0')
        return sbl_err_set(err, SBL_E_BadValue, "%s needs a database name", name);
    return 0;
}

/* The transactions that wrote a collection of db and have not ended, once
 * its critical section holds: the idle ones are aborted (a commit arriving
 * later would put its writes on the donor after the copy), the others
 * (running a statement, prepared) waited for, at most 5 s (ExceededTimeLimit). */
static int end_db_txns(const char *db, sbl_err_t *err)
{
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER; /* sbl_cmd_run appends to it */
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_BOOL(&cmd, "nameOnly", true);
    bson_t c;
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &c);
    BSON_APPEND_INT32(&c, "batchSize", 100000);
    bson_append_document_end(&cmd, &c);
    sbl_cmd_run(db, &cmd, &reply);
    bson_destroy(&cmd);
    int64_t until = sbl_now_ms() + 5000;
    int left;
    do {
        left = 0;
        bson_iter_t it, b;
        if (bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch", &b) && bson_iter_recurse(&b, &it))
            while (bson_iter_next(&it)) {
                bson_t d;
                const char *name;
                char ns[400];
                if (sbl_iter_doc(&it, &d) && (name = sbl_doc_utf8(&d, "name")) != NULL) {
                    snprintf(ns, sizeof(ns), "%s.%s", db, name);
                    left += sbl_cmd_mtxn_end_writers(ns);
                }
            }
        if (left > 0)
            usleep(5 * 1000);
    } while (left > 0 && sbl_now_ms() < until);
    bson_destroy(&reply);
    if (left > 0)
        return sbl_err_set(err, SBL_E_ExceededTimeLimit, "%d transaction(s) that wrote database "
                           "%s did not end within 5 s of movePrimary's critical section", left,
                           db);
    return 0;
}

int sbl_cmd_move_primary_crit_enter(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *db;
    SBL_RET(crit_db(ctx, "_shardsvrMovePrimaryEnterCriticalSection", &db, err));
    bson_iter_t it;
    int64_t lease = 30000;
    if (bson_iter_init_find(&it, ctx->cmd, "leaseMillis") && BSON_ITER_HOLDS_NUMBER(&it))
        lease = bson_iter_as_int64(&it);
    if (lease < 1 || lease > 600000)
        return sbl_err_set(err, SBL_E_BadValue, "leaseMillis must be between 1 and 600000");
    bool renew = bson_iter_init_find(&it, ctx->cmd, "renew") && bson_iter_as_bool(&it);
    SBL_RET(sbl_shard_db_crit_enter(db, lease, renew, err));
    if (!renew && end_db_txns(db, err) != 0) {
        sbl_shard_db_crit_exit(db);
        return err->code;
    }
    return 0;
}

int sbl_cmd_move_primary_crit_exit(sbl_opctx_t *ctx, sbl_err_t *err)
{
    const char *db;
    SBL_RET(crit_db(ctx, "_shardsvrMovePrimaryExitCriticalSection", &db, err));
    sbl_shard_db_crit_exit(db);
    return 0;
}

int sbl_cmd_sharding_state(sbl_opctx_t *ctx, sbl_err_t *err)
{
    sbl_shard_append_state(ctx->reply);
    return 0;
}

/* The data size of ns on this shard (0 when it is not here, or is here with
 * another UUID than uuid, when given). */
static int64_t coll_data_size(sbl_opctx_t *ctx, const char *ns, const bson_value_t *uuid)
{
    sbl_coll_t *c;
    sbl_coll_stats_t st;
    sbl_err_t e = {0};
    int64_t size = 0;
    if (sbl_coll_open(ctx->ss, ns, false, &c, NULL, &e) != 0)
        return 0;
    if ((uuid == NULL || (uuid->value.v_binary.data_len == 16 &&
                          memcmp(uuid->value.v_binary.data, sbl_coll_uuid(c), 16) == 0)) &&
        sbl_coll_stats(ctx->ss, c, &st, &e) == 0)
        size = st.data_size;
    sbl_coll_release(c);
    /* the orphans a range deleter task is to delete are not the shard's
     * data: without this the balancer would move chunk after chunk off a
     * donor whose size does not drop before the deletion */
    int64_t orphans = size > 0 && st.count > 0 ? sbl_cmd_rangedel_orphans(ns) : 0;
    if (orphans > 0)
        size = orphans >= st.count ? 0 : size - orphans * (size / st.count);
    return size;
}

int sbl_cmd_shardsvr_stats_for_balancing(sbl_opctx_t *ctx, sbl_err_t *err)
{
    if (!is_shardsvr())
        return sbl_err_set(err, SBL_E_IllegalOperation, "_shardsvrGetStatsForBalancing can only "
                           "be run on shard servers");
    bson_iter_t it, list;
    int64_t scale = 1024 * 1024; /* mongod's default: MiB */
    if (bson_iter_init_find(&it, ctx->cmd, "scaleFactor")) {
        if (!BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_int64(&it) <= 0)
            return sbl_err_set(err, SBL_E_BadValue, "scaleFactor must be a positive integer");
        scale = bson_iter_as_int64(&it);
    }
    if (!bson_iter_init_find(&it, ctx->cmd, "collections") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &list))
        return sbl_err_set(err, SBL_E_TypeMismatch, "BSON field "
                           "'_shardsvrGetStatsForBalancing.collections' is missing or not an "
                           "array");
    bson_t stats, one;
    BSON_APPEND_ARRAY_BEGIN(ctx->reply, "stats", &stats);
    for (int i = 0; bson_iter_next(&list); i++) {
        /* {ns, UUID} (7.0), or the namespace alone (as 6.0 sent it) */
        const char *ns = BSON_ITER_HOLDS_UTF8(&list) ? bson_iter_utf8(&list, NULL) : NULL;
        const bson_value_t *uuid = NULL;
        bson_t d;
        bson_iter_t u;
        if (ns == NULL && sbl_iter_doc(&list, &d)) {
            ns = sbl_doc_utf8(&d, "ns");
            if (bson_iter_init_find(&u, &d, "UUID") && BSON_ITER_HOLDS_BINARY(&u))
                uuid = bson_iter_value(&u);
        }
        if (ns == NULL) {
            bson_append_array_end(ctx->reply, &stats);
            return sbl_err_set(err, SBL_E_TypeMismatch, "each of "
                               "_shardsvrGetStatsForBalancing's collections is {ns, UUID} or "
                               "a namespace");
        }
        char key[16];
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&stats, key, &one);
        BSON_APPEND_UTF8(&one, "namespace", ns);
        BSON_APPEND_INT64(&one, "collSize", coll_data_size(ctx, ns, uuid) / scale);
        bson_append_document_end(&stats, &one);
    }
    bson_append_array_end(ctx->reply, &stats);
    return 0;
}

void sbl_cmd_sharding_start(void)
{
    sbl_cmd_balancer_start_thread(); /* config servers only */
    sbl_cmd_shard_identity_load();
}

/* The shardIdentity document this member holds (replicated from the primary
 * that heard addShard), taken in unless it already was: at start-up, by the
 * recovery thread after an election, and by a shard command that needs it
 * first.  One at a time, so the identity is set once. */
void sbl_cmd_shard_identity_load(void)
{
    static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
    if (!is_shardsvr() || sbl_shard_name() != NULL)
        return;
    pthread_mutex_lock(&load_mu);
    if (sbl_shard_name() != NULL) {
        pthread_mutex_unlock(&load_mu);
        return;
    }
    bson_t find = BSON_INITIALIZER, f, reply = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&find, "find", "system.version");
    BSON_APPEND_DOCUMENT_BEGIN(&find, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", "shardIdentity");
    bson_append_document_end(&find, &f);
    sbl_cmd_run("admin", &find, &reply);
    bson_iter_t it, d;
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &d) &&
        BSON_ITER_HOLDS_DOCUMENT(&d)) {
        uint32_t len;
        const uint8_t *data;
        bson_t si;
        bson_iter_document(&d, &len, &data);
        bson_init_static(&si, data, len);
        const char *name = sbl_doc_utf8(&si, "shardName");
        const char *cfg = sbl_doc_utf8(&si, "configsvrConnectionString");
        sbl_err_t e = {0};
        if (name != NULL && cfg != NULL)
            sbl_shard_set_identity(name, cfg, &e);
    }
    bson_destroy(&find);
    bson_destroy(&reply);
    pthread_mutex_unlock(&load_mu);
}

int sbl_cmd_run_checked(const char *db, const bson_t *cmd, bson_t *reply, sbl_err_t *err)
{
    bson_init(reply);
    sbl_cmd_run(db, cmd, reply);
    bson_iter_t it, e, f;
    if (bson_iter_init_find(&it, reply, "ok") && bson_iter_as_double(&it) == 1.0) {
        if (bson_iter_init_find(&it, reply, "writeErrors") && bson_iter_recurse(&it, &e) &&
            bson_iter_next(&e) && bson_iter_recurse(&e, &f) && bson_iter_find(&f, "code"))
            return sbl_err_set(err, (int)bson_iter_as_int64(&f), "local write failed");
        return 0;
    }
    int code = bson_iter_init_find(&it, reply, "code") ? (int)bson_iter_as_int64(&it)
                                                       : SBL_E_InternalError;
    const char *m = sbl_doc_utf8(reply, "errmsg");
    return sbl_err_set(err, code, "%s", m ? m : "local command failed");
}
