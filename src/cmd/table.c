/*
 * table.c: the command table.  Every command Sable answers is one row: its
 * name, handler, flags and help.  Rows are sorted by name (strcmp order) so
 * lookup is a binary search; the legacy lowercase spellings drivers still
 * send (ismaster, buildinfo, findandmodify, getlasterror) are rows of their
 * own pointing at the same handler.
 */
#include "cmd/cmd_int.h"

#include <stdlib.h>
#include <string.h>

#define W SBL_CMD_WRITE
#define R SBL_CMD_READ
#define NA SBL_CMD_NO_AUTH
#define ADM SBL_CMD_ADMIN_ONLY
#define SLOW SBL_CMD_SLOW

static const sbl_cmd_def_t cmd_table[] = {
    {"aggregate", sbl_cmd_aggregate, R | SLOW, "run an aggregation pipeline"},
    {"buildInfo", sbl_cmd_build_info, NA, "build and version information"},
    {"buildinfo", sbl_cmd_build_info, NA, "build and version information"},
    {"collStats", sbl_cmd_coll_stats, R, "collection statistics"},
    {"connectionStatus", sbl_cmd_connection_status, NA, "authentication state of the connection"},
    {"count", sbl_cmd_count, R | SLOW, "count matching documents"},
    {"create", sbl_cmd_create, W, "create a collection"},
    {"createIndexes", sbl_cmd_create_indexes, W, "create indexes"},
    {"currentOp", sbl_cmd_current_op, ADM, "operations running now"},
    {"dbStats", sbl_cmd_db_stats, R, "database statistics"},
    {"delete", sbl_cmd_delete, W | SLOW, "delete documents"},
    {"deleteIndexes", sbl_cmd_drop_indexes, W, "drop indexes"},
    {"distinct", sbl_cmd_distinct, R | SLOW, "distinct values of a field"},
    {"drop", sbl_cmd_drop, W, "drop a collection"},
    {"dropDatabase", sbl_cmd_drop_database, W, "drop a database"},
    {"dropIndexes", sbl_cmd_drop_indexes, W, "drop indexes"},
    {"endSessions", sbl_cmd_end_sessions, NA, "end logical sessions"},
    {"find", sbl_cmd_find, R | SLOW, "query documents"},
    {"findAndModify", sbl_cmd_find_and_modify, W | SLOW, "atomically modify one document"},
    {"findandmodify", sbl_cmd_find_and_modify, W | SLOW, "atomically modify one document"},
    {"fsync", sbl_cmd_fsync, ADM, "flush the journal and take a checkpoint"},
    {"getCmdLineOpts", sbl_cmd_get_cmd_line_opts, ADM, "the server's command-line options"},
    {"getLastError", sbl_cmd_get_last_error, NA, "legacy: status of the last write"},
    {"getLog", sbl_cmd_get_log, ADM, "recent log lines"},
    {"getMore", sbl_cmd_get_more, R | SLOW, "next batch of a cursor"},
    {"getParameter", sbl_cmd_get_parameter, ADM, "server parameters"},
    {"getlasterror", sbl_cmd_get_last_error, NA, "legacy: status of the last write"},
    {"hello", sbl_cmd_hello, NA, "handshake: server role and limits"},
    {"hostInfo", sbl_cmd_host_info, 0, "information about the host"},
    {"insert", sbl_cmd_insert, W | SLOW, "insert documents"},
    {"isMaster", sbl_cmd_hello, NA, "legacy handshake"},
    {"ismaster", sbl_cmd_hello, NA, "legacy handshake"},
    {"killAllSessions", sbl_cmd_end_sessions, 0, "kill all logical sessions"},
    {"killCursors", sbl_cmd_kill_cursors, R, "kill cursors"},
    {"killOp", sbl_cmd_kill_op, ADM, "ask a running operation to stop"},
    {"killSessions", sbl_cmd_end_sessions, 0, "kill logical sessions"},
    {"listCollections", sbl_cmd_list_collections, R, "list collections"},
    {"listCommands", sbl_cmd_list_commands, NA, "list commands"},
    {"listDatabases", sbl_cmd_list_databases, R | ADM, "list databases"},
    {"listIndexes", sbl_cmd_list_indexes, R, "list indexes"},
    {"ping", sbl_cmd_ping, NA, "check the server answers"},
    {"profile", sbl_cmd_profile, 0, "database profiler level, slowms and sampleRate"},
    {"refreshSessions", sbl_cmd_end_sessions, 0, "refresh logical sessions"},
    {"renameCollection", sbl_cmd_rename_collection, W | ADM, "rename a collection"},
    {"serverStatus", sbl_cmd_server_status, 0, "server statistics"},
    {"shutdown", sbl_cmd_shutdown_cmd, ADM, "shut the server down"},
    {"startSession", sbl_cmd_start_session, 0, "start a logical session"},
    {"top", sbl_cmd_top, ADM, "per-collection time and count of reads and writes"},
    {"update", sbl_cmd_update, W | SLOW, "update documents"},
    {"validate", sbl_cmd_validate, R | SLOW, "check a collection's documents and indexes"},
    {"whatsmyuri", sbl_cmd_whatsmyuri, NA, "the client's address as the server sees it"},
};

#define CMD_COUNT (sizeof(cmd_table) / sizeof(cmd_table[0]))

static int cmd_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const sbl_cmd_def_t *)elem)->name);
}

const sbl_cmd_def_t *sbl_cmd_lookup(const char *name)
{
    return bsearch(name, cmd_table, CMD_COUNT, sizeof(cmd_table[0]), cmd_cmp);
}

const sbl_cmd_def_t *sbl_cmd_table(size_t *countp)
{
    *countp = CMD_COUNT;
    return cmd_table;
}
