/*
 * routed.c: a router's command on a shard, as the dispatcher sees it.  The
 * router's shardVersion and databaseVersion are taken out of the command
 * (handlers do not know them); before the handler runs, the command counts
 * itself into its namespace's migration gate and, with databaseVersion, its
 * database's movePrimary gate (src/shard), and its versions are checked
 * (StaleConfig, StaleDbVersion send the router to refresh); after the
 * handler it leaves the gates it entered.
 *
 * What must stay true: sbl_routed_exit follows every sbl_routed_enter, and
 * leaves exactly the gates enter recorded (gate_ns, gate_db), so a
 * critical section never waits for a command that is gone.
 */
#include "cmd/cmd_int.h"

#include "doc/doc.h"
#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>

/* field of *cmd as a new document (NULL when absent), removed from *cmd. */
static bson_t *take(bson_t *cmd, const char *field)
{
    bson_iter_t it;
    if (!sbl_doc_find_top(cmd, field, &it) || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return NULL;
    uint32_t len;
    const uint8_t *data;
    bson_iter_document(&it, &len, &data);
    bson_t *d = bson_new_from_data(data, len);
    bson_t stripped = BSON_INITIALIZER;
    bson_copy_to_excluding_noinit(cmd, &stripped, field, NULL);
    bson_destroy(cmd);
    bson_steal(cmd, &stripped);
    return d;
}

void sbl_routed_take(sbl_routed_t *r, bson_t *cmd)
{
    static int role = -1;
    if (role < 0)
        role = sbl_server_options()->cluster_role;
    if (role != SBL_ROLE_SHARDSVR)
        return;
    r->shard_version = take(cmd, "shardVersion");
    r->db_version = take(cmd, "databaseVersion");
}

bool sbl_routed_any(const sbl_routed_t *r)
{
    return r->shard_version != NULL || r->db_version != NULL;
}

bool sbl_routed_sharded(const sbl_routed_t *r)
{
    bson_iter_t it;
    if (r->shard_version == NULL || !bson_iter_init_find(&it, r->shard_version, "e") ||
        !BSON_ITER_HOLDS_OID(&it))
        return false;
    static const bson_oid_t zero;
    return !bson_oid_equal(bson_iter_oid(&it), &zero);
}

bool sbl_routed_may_wait(const sbl_routed_t *r)
{
    return (r->shard_version != NULL &&
            (sbl_shard_migration_active() || !sbl_shard_metadata_known())) ||
           (r->db_version != NULL && sbl_shard_db_crit_active());
}

/* The commands a shard filters by ownership: the reads whose results drop
 * orphans (mongod's shard filtering: find, aggregate, count, distinct) and
 * the writes that skip them (mongod's update and delete stages skip a
 * document the shard does not own when the operation is versioned: update,
 * delete, findAndModify, single-document or multi). */
static bool filtered(const char *name)
{
    static const char *const names[] = {"find",   "aggregate", "count",         "distinct",
                                        "update", "delete",    "findAndModify", "findandmodify",
                                        NULL};
    for (int i = 0; names[i] != NULL; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

int sbl_routed_enter(sbl_routed_t *r, sbl_opctx_t *ctx, sbl_err_t *err)
{
    /* A member that has not taken in its shardIdentity yet (replicated, or elected before
     * its recovery thread read it) knows no versions to check against: it reads the
     * document now, and without one refuses, as mongod does, rather than serve a routed
     * command unchecked (a write could land in a range this shard gave away). */
    if (sbl_server_options()->cluster_role == SBL_ROLE_SHARDSVR && sbl_shard_name() == NULL) {
        sbl_cmd_shard_identity_load();
        if (sbl_shard_name() == NULL)
            return sbl_err_set(err, SBL_E_ShardingStateNotInitialized, "Cannot accept sharding "
                               "commands if sharding state has not been initialized with a "
                               "shardIdentity document");
    }
    if (r->shard_version != NULL) {
        char ns[sizeof(r->gate_ns)];
        bson_iter_t it;
        const char *coll = bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) &&
                                   BSON_ITER_HOLDS_UTF8(&it)
                               ? bson_iter_utf8(&it, NULL)
                               : "";
        snprintf(ns, sizeof(ns), "%s.%s", ctx->db, coll);
        SBL_RET(sbl_shard_op_enter(ns, 0, err));
        memcpy(r->gate_ns, ns, sizeof(ns));
        if (sbl_routed_sharded(r)) { /* after the gate; a migration's getMores: snapshot_read.c */
            ctx->open_ts = sbl_repl_last_op_ts();
            sbl_repl_note_history_read(); /* its getMores may read at open_ts */
        }
        SBL_RET(sbl_shard_check_version(ns, r->shard_version, ctx->reply, err));
        if (sbl_routed_sharded(r) && filtered(ctx->name))
            ctx->shard_filter = sbl_shard_filter_get(ns);
    }
    if (r->db_version != NULL && !sbl_routed_sharded(r)) {
        SBL_RET(sbl_shard_db_enter(ctx->db, r->db_version, ctx->reply, err));
        snprintf(r->gate_db, sizeof(r->gate_db), "%s", ctx->db);
    }
    return 0;
}

void sbl_routed_exit(sbl_routed_t *r)
{
    if (r->gate_ns[0] != '\0')
        sbl_shard_op_exit(r->gate_ns);
    if (r->gate_db[0] != '\0')
        sbl_shard_db_exit(r->gate_db);
    r->gate_ns[0] = r->gate_db[0] = '\0';
}

void sbl_routed_free(sbl_routed_t *r)
{
    if (r->shard_version != NULL)
        bson_destroy(r->shard_version);
    if (r->db_version != NULL)
        bson_destroy(r->db_version);
    r->shard_version = r->db_version = NULL;
}
