/*
 * shard.h: what a shard (sabled --shardsvr) knows about the cluster: its
 * identity (the shardIdentity document addShard gives it: its name and the
 * config servers' connection string) and, per collection, its shard
 * version, read from the config servers' config.collections and
 * config.chunks.  Every command a router sends carries the version the
 * router routed with (shardVersion: {e: epoch, t: timestamp, v: major.minor});
 * a shard whose own version differs refuses it with StaleConfig (13388)
 * after refreshing once, so a router with an old routing table never reads
 * or writes through it (docs/sharding.md).
 *
 * Thread safety: every function may be called from any thread; a refresh
 * talks to the config servers and blocks the caller.
 */
#ifndef SBL_SHARD_H
#define SBL_SHARD_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"

/* Set (or replace) the shard's identity; starts the config server pool. */
int sbl_shard_set_identity(const char *name, const char *configsvr, sbl_err_t *err);
/* The shard's name, or NULL before addShard. */
const char *sbl_shard_name(void);
const char *sbl_shard_configsvr(void);

/*
 * Check the version a router sent (sv: the shardVersion document) for ns.
 * Returns 0 when it matches this shard's (same epoch and timestamp, same
 * major version), else StaleConfig with info receiving ns, vReceived,
 * vWanted and shardId.
 */
int sbl_shard_check_version(const char *ns, const bson_t *sv, bson_t *info, sbl_err_t *err);
/* Forget ns's cached version and read it again from the config servers. */
int sbl_shard_refresh(const char *ns, sbl_err_t *err);
/* shardingState's fields: enabled, configServer, shardName, versions. */
void sbl_shard_append_state(bson_t *reply);
void sbl_shard_shutdown(void);

#endif
