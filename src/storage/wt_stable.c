/*
 * wt_stable.c: replication's WiredTiger timestamps: which tables are
 * unlogged (a replica set member's replicated collections and their
 * indexes), the stable and oldest timestamps, the checkpoint's recovery
 * timestamp, and rollback_to_stable (as mongod on WiredTiger 3.x).
 *
 * What must stay true: on a member, data tables of replicated namespaces
 * (everything outside local.* and *.system.profile) are created with
 * log=(enabled=false), so a checkpoint holds them only as of the stable
 * timestamp and rollback_to_stable can undo what came after; local.*
 * (the oplog, the config, the election state) and the catalog stay
 * logged, so the oplog holds every entry after the stable point and
 * replaying it rebuilds the rest.  A standalone never sets a timestamp.
 */
#include "storage/wt_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static atomic_bool unlogged_replicated;

void sbl_storage_set_replicated(bool on)
{
    atomic_store(&unlogged_replicated, on);
}

bool sbl_storage_ns_unlogged(const char *ns)
{
    static const char profile[] = ".system.profile";
    size_t n = ns != NULL ? strlen(ns) : 0;
    if (!atomic_load(&unlogged_replicated) || ns == NULL || strncmp(ns, "local.", 6) == 0)
        return false;
    return !(n >= sizeof(profile) - 1 && strcmp(ns + n - (sizeof(profile) - 1), profile) == 0);
}

/* sabled's settings (the user's string follows them), then what stays
 * sabled's whatever the user's string says (it comes last: later keys win) */
int sbl_table_configs_build(const sbl_storage_config_t *cfg, sbl_err_t *err)
{
    static const char *const names[2] = {"wiredTigerCollectionConfigString",
                                         "wiredTigerIndexConfigString"};
    const char *extras[2] = {cfg->wt_coll_config, cfg->wt_index_config};
    for (int index = 0; index < 2; index++) {
        const char *extra = extras[index] != NULL ? extras[index] : "";
        int ret;
        if (*extra != '\0' &&
            (ret = wiredtiger_config_validate(NULL, NULL, "WT_SESSION.create", extra)) != 0)
            return sbl_err_set(err, SBL_E_BadValue, "%s '%s': %s", names[index], extra,
                               wiredtiger_strerror(ret));
        for (int unlogged = 0; unlogged < 2; unlogged++) {
            char *out = sbl_eng.table_config[index][unlogged];
            size_t cap = sizeof(sbl_eng.table_config[index][unlogged]);
            int n = snprintf(out, cap,
                             "memory_page_max=10m,split_pct=90,leaf_value_max=64MB,"
                             "checksum=on%s%s%s,type=file,key_format=u,value_format=u,"
                             "log=(enabled=%s)",
                             sbl_eng.have_snappy ? ",block_compressor=snappy" : "",
                             *extra != '\0' ? "," : "", extra, unlogged ? "false" : "true");
            if (n < 0 || (size_t)n >= cap)
                return sbl_err_set(err, SBL_E_BadValue, "%s is too long", names[index]);
        }
    }
    return 0;
}

const char *sbl_table_config_for(bool unlogged, bool index)
{
    return sbl_eng.table_config[index][unlogged];
}

int sbl_storage_set_stable(uint64_t stable, uint64_t oldest, sbl_err_t *err)
{
    char cfg[128];
    int ret;

    if (!sbl_eng.open || stable == 0)
        return 0;
    if (oldest > stable)
        oldest = stable;
    /* stable first: oldest may not pass it */
    snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64, stable);
    if ((ret = sbl_eng.conn->set_timestamp(sbl_eng.conn, cfg)) != 0)
        return sbl_wt_err(err, ret, "set stable timestamp");
    if (oldest != 0) {
        snprintf(cfg, sizeof(cfg), "oldest_timestamp=%" PRIx64, oldest);
        if ((ret = sbl_eng.conn->set_timestamp(sbl_eng.conn, cfg)) != 0)
            return sbl_wt_err(err, ret, "set oldest timestamp");
    }
    return 0;
}

static uint64_t query_ts(const char *what)
{
    char hex[32] = "", cfg[64];
    snprintf(cfg, sizeof(cfg), "get=%s", what);
    if (sbl_eng.conn == NULL || sbl_eng.conn->query_timestamp(sbl_eng.conn, hex, cfg) != 0)
        return 0;
    return strtoull(hex, NULL, 16);
}

uint64_t sbl_storage_recovery_ts(void)
{
    return query_ts("recovery");
}

uint64_t sbl_storage_last_checkpoint_ts(void)
{
    return query_ts("last_checkpoint");
}

uint64_t sbl_storage_stable_ts(void)
{
    return query_ts("stable");
}

double sbl_storage_cache_fill(void)
{
    bson_t st = BSON_INITIALIZER;
    bson_iter_t it, f;
    int64_t used = 0, max = 0;
    sbl_storage_append_stats(&st);
    if (bson_iter_init(&it, &st) &&
        bson_iter_find_descendant(&it, "cache.bytes currently in the cache", &f))
        used = bson_iter_as_int64(&f);
    if (bson_iter_init(&it, &st) && bson_iter_find_descendant(&it, "cache.maximum bytes configured", &f))
        max = bson_iter_as_int64(&f);
    bson_destroy(&st);
    return max > 0 ? (double)used / (double)max : 0.0;
}

/* The oldest time a read may ask for: WiredTiger's oldest timestamp, and
 * never below the checkpoint this process recovered from.  WiredTiger 3.2
 * keeps no history across a restart (mongod 4.2, on it, sets the oldest
 * timestamp to the recovery point at start-up for the same reason): a read
 * at an earlier time would find the checkpoint's values, not that time's. */
uint64_t sbl_storage_oldest_ts(void)
{
    uint64_t oldest = query_ts("oldest"), recovered = query_ts("recovery");
    return oldest > recovered ? oldest : recovered;
}

uint64_t sbl_storage_all_durable_ts(void)
{
    return query_ts("all_durable");
}

int sbl_storage_rollback_to_stable(uint64_t ts, sbl_err_t *err)
{
    char cfg[128];
    int ret = 0;

    if (!sbl_eng.open)
        return sbl_err_set(err, SBL_E_InternalError, "storage is not open");
    /* Stable may have to move back to ts (never past the commit point). */
    snprintf(cfg, sizeof(cfg), "stable_timestamp=%" PRIx64 ",force=true", ts);
    if ((ret = sbl_eng.conn->set_timestamp(sbl_eng.conn, cfg)) != 0)
        return sbl_wt_err(err, ret, "set stable timestamp for rollback");
    /* WiredTiger refuses while a transaction or a checkpoint runs (the
     * caller has stopped writes and refuses new reads): retry a while. */
    for (int i = 0; i < 600; i++) {
        pthread_mutex_lock(&sbl_ckpt_mutex); /* no checkpoint meanwhile */
        ret = sbl_eng.conn->rollback_to_stable(sbl_eng.conn, NULL);
        pthread_mutex_unlock(&sbl_ckpt_mutex);
        if (ret != EBUSY && ret != EINVAL)
            break;
        usleep(50 * 1000);
    }
    sbl_versioned_invalidate(); /* documents went back: versions kept elsewhere are stale */
    sbl_capped_rolled_back();   /* evicted documents may be back */
    if (ret != 0)
        return sbl_wt_err(err, ret, "rollback_to_stable");
    /* Counts kept in memory followed the undone commits: count again. */
    pthread_rwlock_wrlock(&sbl_eng.cat_lock);
    int rc = sbl_catalog_recount(err);
    pthread_rwlock_unlock(&sbl_eng.cat_lock);
    return rc;
}
