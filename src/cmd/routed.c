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

#include "repl/repl.h"
#include "server/server.h"
#include "shard/shard.h"

#include <string.h>

/* The command's shardVersion and databaseVersion, when each one's first
 * occurrence is a document: copied out, and every element of that name cut
 * from *cmd in one pass over its bytes (a versioned command's elements are
 * copied once, not once per field and through bson_append_iter: this was a
 * routed find's largest cost over a direct one, ~14,000 instructions of
 * ~40,000, bench in docs/sharding.md "The router's cost"). */
void sbl_routed_take(sbl_routed_t *r, bson_t *cmd)
{
    static const char *const names[2] = {"shardVersion", "databaseVersion"};
    static int role = -1;
    if (role < 0)
        role = sbl_server_options()->cluster_role;
    if (role != SBL_ROLE_SHARDSVR)
        return;
    bson_t **out[2] = {&r->shard_version, &r->db_version};
    bool seen[2] = {false, false}, cut[2] = {false, false};
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd))
        return;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        for (int f = 0; f < 2; f++) {
            if (seen[f] || strcmp(key, names[f]) != 0)
                continue;
            seen[f] = true;
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                uint32_t len;
                const uint8_t *data;
                bson_iter_document(&it, &len, &data);
                *out[f] = bson_new_from_data(data, len);
                cut[f] = *out[f] != NULL;
            }
        }
    }
    if (!cut[0] && !cut[1])
        return;
    const uint8_t *raw = bson_get_data(cmd);
    uint8_t *buf = bson_malloc(cmd->len);
    uint32_t n = 4;
    bson_iter_init(&it, cmd);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if ((cut[0] && strcmp(key, names[0]) == 0) || (cut[1] && strcmp(key, names[1]) == 0))
            continue;
        memcpy(buf + n, raw + it.off, it.next_off - it.off);
        n += it.next_off - it.off;
    }
    buf[n++] = 0;
    uint32_t le = BSON_UINT32_TO_LE(n);
    memcpy(buf, &le, 4);
    bson_t *stripped = bson_new_from_data(buf, n);
    bson_free(buf);
    if (stripped == NULL)
        return; /* not reached: the bytes are the command's own elements */
    bson_destroy(cmd);
    bson_steal(cmd, stripped);
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

/* s copied into dst of cap bytes, cut as snprintf would; returns its length. */
static size_t put(char *dst, size_t cap, const char *s)
{
    size_t n = strnlen(s, cap - 1);
    memcpy(dst, s, n);
    dst[n] = '\0';
    return n;
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
    bool sharded = sbl_routed_sharded(r);
    if (r->shard_version != NULL) {
        char ns[sizeof(r->gate_ns)];
        bson_iter_t it;
        const char *coll = bson_iter_init(&it, ctx->cmd) && bson_iter_next(&it) &&
                                   BSON_ITER_HOLDS_UTF8(&it)
                               ? bson_iter_utf8(&it, NULL)
                               : "";
        size_t n = put(ns, sizeof(ns), ctx->db); /* "db.coll", cut as snprintf would */
        if (n + 1 < sizeof(ns)) {
            ns[n] = '.';
            n += 1 + put(ns + n + 1, sizeof(ns) - n - 1, coll);
        }
        SBL_RET(sbl_shard_op_enter(ns, 0, err));
        memcpy(r->gate_ns, ns, n + 1);
        if (sharded) { /* after the gate; a migration's getMores: snapshot_read.c */
            ctx->open_ts = sbl_repl_last_op_ts();
            sbl_repl_note_history_read(); /* its getMores may read at open_ts */
        }
        /* the filter of the version checked (a step-up may clear the cache after) */
        sbl_shard_filter_t **fp = sharded && filtered(ctx->name) ? &ctx->shard_filter : NULL;
        SBL_RET(sbl_shard_check_version(ns, r->shard_version, ctx->reply, fp, err));
    }
    if (r->db_version != NULL && !sharded) {
        SBL_RET(sbl_shard_db_enter(ctx->db, r->db_version, ctx->reply, err));
        put(r->gate_db, sizeof(r->gate_db), ctx->db);
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
