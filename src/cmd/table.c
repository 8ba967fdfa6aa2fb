/*
 * table.c: the command table.  Every command Sable answers is one row: its
 * name, handler, flags, help and the MongoDB action it needs when
 * authorization is on (see sbl_cmd_def_t).  Rows are sorted by name (strcmp order) so
 * lookup is a binary search; the legacy lowercase spellings drivers still
 * send (ismaster, buildinfo, findandmodify, getlasterror) are rows of their
 * own pointing at the same handler.
 */
#include "cmd/capped.h"
#include "cmd/cmd_int.h"
#include "exec/exec.h"
#include "cmd/failpoint.h"

#include <stdlib.h>
#include <string.h>

#define W SBL_CMD_WRITE
#define R SBL_CMD_READ
#define NA SBL_CMD_NO_AUTH
#define ADM SBL_CMD_ADMIN_ONLY
#define SLOW SBL_CMD_SLOW

static const sbl_cmd_def_t cmd_table[] = {
    {"_addShard", sbl_cmd_add_shard_identity, ADM,
     "internal: the router gives a shard its shardIdentity", NULL},
    {"_configsvrAddShardToZone", sbl_cmd_configsvr_add_shard_to_zone, ADM | SLOW,
     "internal: the router's addShardToZone (config servers)", NULL},
    {"_configsvrBalancerCollectionStatus", sbl_cmd_configsvr_balancer_coll_status, ADM | SLOW,
     "internal: whether the balancer would act on a collection (config servers)", NULL},
    {"_configsvrBalancerStart", sbl_cmd_configsvr_balancer_start, ADM | SLOW,
     "internal: turn the balancer on (config servers)", NULL},
    {"_configsvrBalancerStatus", sbl_cmd_configsvr_balancer_status, ADM | SLOW,
     "internal: the balancer's mode and rounds (config servers)", NULL},
    {"_configsvrBalancerStop", sbl_cmd_configsvr_balancer_stop, ADM | SLOW,
     "internal: turn the balancer off (config servers)", NULL},
    {"_configsvrClearJumboFlag", sbl_cmd_configsvr_clear_jumbo_flag, ADM | SLOW,
     "internal: the router's clearJumboFlag (config servers)", NULL},
    {"_configsvrCommitChunkMigration", sbl_cmd_configsvr_commit_migration, ADM | SLOW,
     "internal: a donor commits a migrated chunk's new owner (config servers)", NULL},
    {"_configsvrCommitChunksMerge", sbl_cmd_configsvr_commit_chunks_merge, ADM | SLOW,
     "internal: the router's mergeChunks (config servers)", NULL},
    {"_configsvrCommitMergeAllChunksOnShard", sbl_cmd_configsvr_merge_all_chunks, ADM | SLOW,
     "internal: the router's mergeAllChunksOnShard (config servers)", NULL},
    {"_configsvrEnsureChunkVersionIsGreaterThan", sbl_cmd_configsvr_ensure_chunk_version,
     ADM | SLOW, "internal: a migration's recovery bumps an aborted chunk's version (config "
     "servers)", NULL},
    {"_configsvrMoveRange", sbl_cmd_configsvr_move_range, ADM | SLOW,
     "internal: run a chunk migration (config servers)", NULL},
    {"_configsvrRemoveShardFromZone", sbl_cmd_configsvr_remove_shard_from_zone, ADM | SLOW,
     "internal: the router's removeShardFromZone (config servers)", NULL},
    {"_configsvrUpdateZoneKeyRange", sbl_cmd_configsvr_update_zone_key_range, ADM | SLOW,
     "internal: the router's updateZoneKeyRange (config servers)", NULL},
    {"_flushRoutingTableCacheUpdates", sbl_cmd_flush_routing_table, ADM | SLOW,
     "internal: re-read a collection's shard version from the config servers", NULL},
    {"_getNextSessionMods", sbl_cmd_get_next_session_mods, ADM | SLOW,
     "internal: a recipient pulls the migrating range's retryable-write history", NULL},
    {"_migrateClone", sbl_cmd_migrate_clone, ADM | SLOW,
     "internal: a recipient pulls the next batch of a migrating range", NULL},
    {"_recvChunkAbort", sbl_cmd_recv_chunk_abort, ADM | SLOW,
     "internal: a donor aborts the migration it started here", NULL},
    {"_recvChunkCommit", sbl_cmd_recv_chunk_commit, ADM | SLOW,
     "internal: a donor in its critical section has the recipient finish", NULL},
    {"_recvChunkReleaseCritSec", sbl_cmd_recv_chunk_release, ADM | SLOW,
     "internal: a donor ends the recipient's critical section after the commit", NULL},
    {"_recvChunkStart", sbl_cmd_recv_chunk_start, ADM | SLOW,
     "internal: a donor asks this shard to receive a range", NULL},
    {"_recvChunkStatus", sbl_cmd_recv_chunk_status, ADM | SLOW,
     "internal: a receiving migration's state", NULL},
    {"_shardsvrGetStatsForBalancing", sbl_cmd_shardsvr_stats_for_balancing, ADM,
     "internal: each collection's data size on this shard, for the balancer", NULL},
    {"_shardsvrMovePrimaryEnterCriticalSection", sbl_cmd_move_primary_crit_enter, ADM | SLOW,
     "internal: hold back a database's routed commands (movePrimary's donor)", NULL},
    {"_shardsvrMovePrimaryExitCriticalSection", sbl_cmd_move_primary_crit_exit, ADM | SLOW,
     "internal: end movePrimary's critical section, forgetting the database's version", NULL},
    {"_shardsvrMoveRange", sbl_cmd_shardsvr_move_range, ADM | SLOW,
     "internal: the config server has this shard donate a range", NULL},
    {"_transferMods", sbl_cmd_transfer_mods, ADM | SLOW,
     "internal: a recipient pulls a migrating range's changes", NULL},
    {"abortTransaction", sbl_cmd_abort_transaction, W | ADM,
     "abort a multi-document transaction", ""},
    {"aggregate", sbl_cmd_aggregate, R | SLOW, "run an aggregation pipeline", "find"},
    {"applyOps", sbl_cmd_apply_ops, W | ADM,
     "apply oplog-style entries (only a create with \"ui\", as mongorestore --preserveUUID "
     "sends)",
     NULL},
    {"authenticate", sbl_cmd_authenticate, NA,
     "authenticate (MONGODB-CR / X509: not offered)", NULL},
    {"buildInfo", sbl_cmd_build_info, NA, "build and version information", NULL},
    {"buildinfo", sbl_cmd_build_info, NA, "build and version information", NULL},
    {"cleanupOrphaned", sbl_cmd_cleanup_orphaned, W | ADM | SLOW,
     "wait until this shard's range deletions of a collection are done", "cleanupOrphaned"},
    {"cloneCollectionAsCapped", sbl_cmd_clone_collection_as_capped, W | SLOW,
     "copy a collection into a new capped one", NULL},
    {"collMod", sbl_cmd_coll_mod, W, "change a collection's validator or an index's options",
     "collMod"},
    {"collStats", sbl_cmd_coll_stats, R, "collection statistics", "collStats"},
    {"commitTransaction", sbl_cmd_commit_transaction, W | ADM,
     "commit a multi-document transaction", ""},
    {"compact", sbl_cmd_compact, SLOW,
     "give a collection's free file space back to the filesystem", "compact"},
    {"configureFailPoint", sbl_cmd_configure_fail_point, ADM,
     "set a fail point (test only: enableTestCommands=1)", NULL},
    {"connectionStatus", sbl_cmd_connection_status, NA,
     "authentication state of the connection", NULL},
    {"convertToCapped", sbl_cmd_convert_to_capped, W | SLOW,
     "make a collection capped (a copy renamed over it)", "convertToCapped"},
    {"coordinateCommitTransaction", sbl_cmd_coordinate_commit, W | ADM | SLOW,
     "internal: a router has this shard coordinate a transaction's two-phase commit", NULL},
    {"count", sbl_cmd_count, R | SLOW, "count matching documents", "find"},
    {"create", sbl_cmd_create, W, "create a collection", "createCollection"},
    {"createIndexes", sbl_cmd_create_indexes, W | SLOW, "create indexes", "createIndex"},
    {"createRole", sbl_cmd_create_role, W, "create a user-defined role", "createRole"},
    {"createUser", sbl_cmd_create_user, W, "create a user", "createUser"},
    {"currentOp", sbl_cmd_current_op, ADM, "operations running now", "inprog"},
    {"dbHash", sbl_cmd_db_hash, R | SLOW, "MD5 digests of a database's collections", "dbHash"},
    {"dbStats", sbl_cmd_db_stats, R, "database statistics", "dbStats"},
    {"delete", sbl_cmd_delete, W | SLOW, "delete documents", "remove"},
    {"deleteIndexes", sbl_cmd_drop_indexes, W, "drop indexes", "dropIndex"},
    {"distinct", sbl_cmd_distinct, R | SLOW, "distinct values of a field", "find"},
    {"drop", sbl_cmd_drop, W, "drop a collection", "dropCollection"},
    {"dropAllRolesFromDatabase", sbl_cmd_drop_all_roles, W,
     "drop every user-defined role of the database", "dropRole"},
    {"dropAllUsersFromDatabase", sbl_cmd_drop_all_users, W,
     "drop every user of the database", "dropUser"},
    {"dropDatabase", sbl_cmd_drop_database, W, "drop a database", "dropDatabase"},
    {"dropIndexes", sbl_cmd_drop_indexes, W, "drop indexes", "dropIndex"},
    {"dropRole", sbl_cmd_drop_role, W, "drop a user-defined role", "dropRole"},
    {"dropUser", sbl_cmd_drop_user, W, "drop a user", "dropUser"},
    {"endSessions", sbl_cmd_end_sessions, NA, "end logical sessions", NULL},
    {"explain", sbl_exec_explain, R | SLOW, "explain a query's plan and execution", "find"},
    {"find", sbl_cmd_find, R | SLOW, "query documents", "find"},
    {"findAndModify", sbl_cmd_find_and_modify, W | SLOW, "atomically modify one document", "find"},
    {"findandmodify", sbl_cmd_find_and_modify, W | SLOW, "atomically modify one document", "find"},
    {"fsync", sbl_cmd_fsync, ADM | SLOW, "flush the journal and take a checkpoint", "fsync"},
    {"fsyncUnlock", sbl_cmd_fsync_unlock, ADM, "release an fsync lock", "unlock"},
    {"getAuditConfig", sbl_cmd_get_audit_config, ADM, "the audit log's filter and settings",
     NULL},
    {"getClusterParameter", sbl_cmd_get_cluster_parameter, ADM,
     "cluster-wide parameters (changeStreamOptions)", "getClusterParameter"},
    {"getCmdLineOpts", sbl_cmd_get_cmd_line_opts, ADM,
     "the server's command-line options", "getCmdLineOpts"},
    {"getDefaultRWConcern", sbl_cmd_get_default_rw_concern, ADM,
     "the cluster-wide default read and write concerns", "getDefaultRWConcern"},
    {"getLastError", sbl_cmd_get_last_error, NA, "legacy: status of the last write", NULL},
    {"getLog", sbl_cmd_get_log, ADM, "recent log lines", "getLog"},
    {"getMore", sbl_cursor_get_more, R | SLOW | SBL_CMD_ANY_MEMBER, "next batch of a cursor", ""},
    {"getParameter", sbl_cmd_get_parameter, ADM, "server parameters", "getParameter"},
    {"getlasterror", sbl_cmd_get_last_error, NA, "legacy: status of the last write", NULL},
    {"grantPrivilegesToRole", sbl_cmd_grant_privileges_to_role, W,
     "add privileges to a role", "grantRole"},
    {"grantRolesToRole", sbl_cmd_grant_roles_to_role, W,
     "add inherited roles to a role", "grantRole"},
    {"grantRolesToUser", sbl_cmd_grant_roles_to_user, W, "grant roles to a user", "grantRole"},
    {"hello", sbl_cmd_hello, NA, "handshake: server role and limits", NULL},
    {"hostInfo", sbl_cmd_host_info, 0, "information about the host", "hostInfo"},
    {"insert", sbl_cmd_insert, W | SLOW, "insert documents", "insert"},
    {"isMaster", sbl_cmd_hello, NA, "legacy handshake", NULL},
    {"ismaster", sbl_cmd_hello, NA, "legacy handshake", NULL},
    {"killAllSessions", sbl_cmd_kill_all_sessions, 0, "kill the sessions of users (all: [])",
     "killAnySession"},
    {"killAllSessionsByPattern", sbl_cmd_kill_all_sessions_by_pattern, 0,
     "kill the sessions matching patterns (lsid, uid, users)", "killAnySession"},
    {"killCursors", sbl_cursor_kill, R | SBL_CMD_ANY_MEMBER, "kill cursors", ""},
    {"killOp", sbl_cmd_kill_op, ADM, "ask a running operation to stop", "killop"},
    {"killSessions", sbl_cmd_kill_sessions, 0, "kill logical sessions and their cursors", ""},
    {"listCollections", sbl_cmd_list_collections, R, "list collections", "listCollections"},
    {"listCommands", sbl_cmd_list_commands, NA, "list commands", NULL},
    {"listDatabases", sbl_cmd_list_databases, R | ADM, "list databases", "listDatabases"},
    {"listIndexes", sbl_cmd_list_indexes, R, "list indexes", "listIndexes"},
    {"logApplicationMessage", sbl_cmd_log_application_message, ADM,
     "write a message to the audit log", NULL},
    {"logRotate", sbl_cmd_log_rotate, ADM, "rotate the server log and the audit log",
     "logRotate"},
    {"logout", sbl_cmd_logout, NA, "end the connection's authentication", NULL},
    {"mapReduce", sbl_cmd_map_reduce, R | SLOW,
     "map-reduce in server-side JavaScript, inline or into a collection", "find"},
    {"mapreduce", sbl_cmd_map_reduce, R | SLOW,
     "map-reduce in server-side JavaScript, inline or into a collection", "find"},
    {"ping", sbl_cmd_ping, NA, "check the server answers", NULL},
    {"prepareTransaction", sbl_cmd_prepare_transaction, W | ADM,
     "internal: a two-phase commit's coordinator prepares this shard's transaction", NULL},
    {"profile", sbl_cmd_profile, 0,
     "database profiler level, slowms and sampleRate", "enableProfiler"},
    /* SLOW: on a worker; its TTL index build waits for older (prepared) transactions */
    {"refreshLogicalSessionCacheNow", sbl_cmd_refresh_logical_session_cache_now, SLOW,
     "test command: write the session cache to config.system.sessions now", ""},
    {"refreshSessions", sbl_cmd_refresh_sessions, 0, "refresh logical sessions", ""},
    {"renameCollection", sbl_cmd_rename_collection, W | ADM,
     "rename a collection", "renameCollectionSameDB"},
    {"replSetAbortPrimaryCatchUp", sbl_cmd_repl_set_abort_primary_catch_up, ADM,
     "end a newly elected primary's catch-up: take writes now", "replSetStateChange"},
    {"replSetFreeze", sbl_cmd_repl_set_freeze, ADM, "keep a secondary from standing for election",
     "replSetStateChange"},
    {"replSetGetConfig", sbl_cmd_repl_set_get_config, ADM,
     "the replica set's configuration", "replSetGetConfig"},
    {"replSetGetStatus", sbl_cmd_repl_set_get_status, ADM,
     "the replica set's members, states and optimes", "replSetGetStatus"},
    {"replSetHeartbeat", sbl_cmd_repl_set_heartbeat, ADM | NA,
     "internal: a member's heartbeat", "__system"},
    {"replSetInitiate", sbl_cmd_repl_set_initiate, ADM,
     "initiate a replica set", "replSetConfigure"},
    {"replSetMaintenance", sbl_cmd_repl_set_maintenance, ADM,
     "put a secondary in (or out of) RECOVERING for maintenance", "replSetStateChange"},
    {"replSetReconfig", sbl_cmd_repl_set_reconfig, ADM,
     "install a new version of the replica set's configuration", "replSetConfigure"},
    {"replSetRequestVotes", sbl_cmd_repl_set_request_votes, ADM | NA,
     "internal: a candidate asks for a vote", "__system"},
    {"replSetStepDown", sbl_cmd_repl_set_step_down, ADM | SLOW, "make the primary a secondary",
     "replSetStateChange"},
    {"replSetStepUp", sbl_cmd_repl_set_step_up, ADM | SLOW, "run for primary now",
     "replSetStateChange"},
    {"replSetSyncFrom", sbl_cmd_repl_set_sync_from, ADM,
     "tail this member's oplog instead of the chosen sync source", "replSetStateChange"},
    {"replSetUpdatePosition", sbl_cmd_repl_set_update_position, ADM | NA,
     "internal: a secondary reports what it applied", "__system"},
    {"revokePrivilegesFromRole", sbl_cmd_revoke_privileges_from_role, W,
     "remove privileges from a role", "revokeRole"},
    {"revokeRolesFromRole", sbl_cmd_revoke_roles_from_role, W,
     "remove inherited roles from a role", "revokeRole"},
    {"revokeRolesFromUser", sbl_cmd_revoke_roles_from_user, W,
     "revoke roles from a user", "revokeRole"},
    {"rolesInfo", sbl_cmd_roles_info, R, "describe roles", "viewRole"},
    {"saslContinue", sbl_cmd_sasl_continue, NA, "authentication: next SASL step", NULL},
    {"saslStart", sbl_cmd_sasl_start, NA, "authentication: first SASL step", NULL},
    {"serverStatus", sbl_cmd_server_status, 0, "server statistics", "serverStatus"},
    {"setAuditConfig", sbl_cmd_set_audit_config, ADM,
     "change the audit filter / auditAuthorizationSuccess at run time", NULL},
    {"setClusterParameter", sbl_cmd_set_cluster_parameter, ADM,
     "set a cluster-wide parameter (changeStreamOptions)", "setClusterParameter"},
    {"setDefaultRWConcern", sbl_cmd_set_default_rw_concern, ADM,
     "set the cluster-wide default read and write concerns", "setDefaultRWConcern"},
    {"setParameter", sbl_cmd_set_parameter, ADM, "set a server parameter at run time",
     "setParameter"},
    {"shardingState", sbl_cmd_sharding_state, ADM,
     "this shard's name, config servers and cached shard versions", "shardingState"},
    {"shutdown", sbl_cmd_shutdown_cmd, ADM, "shut the server down", "shutdown"},
    {"startSession", sbl_cmd_start_session, 0, "start a logical session", ""},
    {"top", sbl_cmd_top, ADM, "per-collection time and count of reads and writes", "top"},
    {"update", sbl_cmd_update, W | SLOW, "update documents", "update"},
    {"updateRole", sbl_cmd_update_role, W, "replace a role's privileges or roles", "grantRole"},
    {"updateUser", sbl_cmd_update_user, W, "change a user's password, roles or customData", ""},
    {"usersInfo", sbl_cmd_users_info, R, "describe users", "viewUser"},
    {"validate", sbl_cmd_validate, R | SLOW,
     "check a collection's documents and indexes", "validate"},
    {"whatsmyuri", sbl_cmd_whatsmyuri, NA, "the client's address as the server sees it", NULL},
};

#define CMD_COUNT (sizeof(cmd_table) / sizeof(cmd_table[0]))

static int cmd_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const sbl_cmd_def_t *)elem)->name);
}

const sbl_cmd_def_t *sbl_cmd_lookup(const char *name)
{
    /* This thread's last command of each first byte, checked with one strcmp
     * (a client's commands repeat; the search costs ~9 of them). */
    static _Thread_local const sbl_cmd_def_t *recent[64];
    const sbl_cmd_def_t **slot = &recent[(unsigned char)name[0] & 63];
    if (*slot != NULL && strcmp((*slot)->name, name) == 0)
        return *slot;
    const sbl_cmd_def_t *d = bsearch(name, cmd_table, CMD_COUNT, sizeof(cmd_table[0]), cmd_cmp);
    if (d != NULL)
        *slot = d;
    return d;
}

const sbl_cmd_def_t *sbl_cmd_table(size_t *countp)
{
    *countp = CMD_COUNT;
    return cmd_table;
}
