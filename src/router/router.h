/*
 * router.h: sable-router, the cluster's query router (MongoDB's mongos).
 * It speaks the wire protocol to clients through src/net, keeps a cache of
 * the cluster's metadata (shards, databases, sharded collections and their
 * chunks, read from the config servers' `config` database), sends each
 * operation to the shards that own the data through per-shard connection
 * pools, and merges what they answer (docs/sharding.md).
 *
 * What must stay true: every command a client sends gets exactly one reply;
 * a shard that refuses the router's routing version (StaleConfig) makes the
 * router refresh that collection from the config servers and retry, so a
 * stale cache never places or reads a document on the wrong shard.
 */
#ifndef SBL_ROUTER_H
#define SBL_ROUTER_H

#include "common/errors.h"
#include "net/net.h"

/* Connect to the config servers ("cfgRS/host:port,..."), make sure
 * config.version exists, load the shard list.  Returns 0 or an error. */
int sbl_router_init(const char *configdb, sbl_err_t *err);
void sbl_router_shutdown(void);

/* The network layer's request function for the router. */
void sbl_router_dispatch(sbl_conn_t *conn, sbl_request_t *req);

/* For --metricsPort: start the thread that polls every shard's members once
 * a second (sbl_router_shutdown stops it), and the figures the monitoring
 * page reads (connections, network, shards; static, never freed). */
int sbl_router_watch_start(sbl_err_t *err);
const struct sbl_metrics_sources *sbl_router_metrics_sources(void);

#endif
