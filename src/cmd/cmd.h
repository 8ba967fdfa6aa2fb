/*
 * cmd.h: the command layer's public face.  The network layer hands every
 * request to sbl_cmd_dispatch(); everything else about commands is private
 * to src/cmd (see cmd_int.h).
 */
#ifndef SBL_CMD_H
#define SBL_CMD_H

#include "net/net.h"
#include "wire/wire.h"

/* Start background work of the command layer (cursor reaper). Returns 0 or an error code. */
int sbl_cmd_init(sbl_err_t *err);
void sbl_cmd_shutdown(void);
/* A shard (--shardsvr) reads back its shardIdentity (after storage is open). */
void sbl_cmd_sharding_start(void);
/* A shard member takes in the shardIdentity document it holds, if not yet done. */
void sbl_cmd_shard_identity_load(void);
/* A shard recovers what chunk migrations left (config.migrationCoordinators,
 * config.rangeDeletions): after the oplog replay, before the network; the
 * collections concerned stay in their critical section until settled. */
void sbl_cmd_mig_recovery_start(void);

/* The network layer's request function: runs the command (on this thread or
 * a worker) and eventually calls sbl_conn_reply(conn, req, reply). */
void sbl_cmd_dispatch(sbl_conn_t *conn, sbl_request_t *req);
/* Connection open/close hooks (per-connection client state, cursors owned by it). */
void sbl_cmd_conn_open(sbl_conn_t *conn);
void sbl_cmd_conn_close(sbl_conn_t *conn);

/*
 * Run one command document synchronously on the calling thread with no
 * connection (for tests and internal use).  reply is initialised by the
 * caller and receives the full reply including ok / errmsg / code.
 */
void sbl_cmd_run(const char *db, const bson_t *cmd, bson_t *reply);
/* Abort every open multi-document transaction no command is running in (the
 * applier's sbl_repl_set_txn_aborter: mongod aborts them at step-down); a
 * prepared one stays, its outcome comes through the oplog.  rollback: the
 * prepared ones too (the rollback prepares them again from their prepare
 * entries), and every transaction a command runs in is asked to stop its
 * waits and aborted once the command ended (waiting up to 10 s, then
 * logged), so none holds a WiredTiger transaction at rollback_to_stable. */
void sbl_cmd_mtxn_abort_all(bool rollback);
/* Replication's side of prepared transactions (sbl_repl_prepared_fn): a
 * secondary or a restart's replay prepares, commits or aborts them. */
int sbl_cmd_mtxn_apply_prepared(const bson_t *e, int kind, uint64_t ts, uint64_t durable_ts,
                                uint64_t *prepare_tsp, sbl_err_t *err);

/* What the metrics endpoint reads from the server (connections, network,
 * cache, command names); see sbl_metrics_sources_t in metrics/metrics.h. */
struct sbl_metrics_sources;
const struct sbl_metrics_sources *sbl_cmd_metrics_sources(void);

#endif
