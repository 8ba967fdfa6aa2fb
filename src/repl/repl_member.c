/*
 * repl_member.c: an operator's overrides on one member, as mongod's:
 * replSetSyncFrom (tail this member instead of the one the member would
 * choose, while it is reachable and holds data) and replSetMaintenance (a
 * secondary says RECOVERING while any maintenance request is open: clients
 * and drivers leave it alone, it stands for no election, and it goes on
 * applying the oplog).
 *
 * What must stay true: maintenance requests are counted (each "true" needs
 * its "false"); a primary never enters maintenance; the requested sync
 * source is only a preference: choose_source_locked (repl_sync.c) falls
 * back to its own choice while the requested member cannot serve.
 */
#include "repl/repl_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"

#define rs sbl_rs
#define BEHIND_WARN_S 10 /* mongod warns of a sync source this far behind us */

int sbl_rs_lock_initiated(sbl_err_t *err)
{
    if (!sbl_repl_enabled())
        return sbl_err_set(err, SBL_E_NoReplicationEnabled, "not running with --replSet");
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL || rs.self < 0) {
        pthread_mutex_unlock(&rs.lock);
        return sbl_err_set(err, SBL_E_NotYetInitialized, "no replset config has been received");
    }
    return 0;
}

bool sbl_rs_syncing_state_locked(int st)
{
    return st == SBL_RS_SECONDARY || st == SBL_RS_STARTUP2 ||
           (st == SBL_RS_RECOVERING && rs.maintenance > 0 && !rs.sync_halted);
}

int sbl_rs_requested_source_locked(void)
{
    if (rs.sync_from[0] == '\0')
        return -1;
    for (int i = 0; i < rs.cfg.n; i++)
        if (i != rs.self && strcasecmp(rs.cfg.m[i].host, rs.sync_from) == 0 && rs.peer[i].up &&
            (rs.peer[i].state == SBL_RS_PRIMARY || rs.peer[i].state == SBL_RS_SECONDARY))
            return i;
    return -1;
}

static int check_sync_from_locked(const char *host, int *tp, sbl_err_t *err)
{
    int st = atomic_load(&rs.state), t = -1;
    if (rs.cfg.m[rs.self].arbiter)
        return sbl_err_set(err, SBL_E_NotSecondary, "arbiters don't sync");
    if (st == SBL_RS_PRIMARY)
        return sbl_err_set(err, SBL_E_NotSecondary, "primaries don't sync");
    for (int i = 0; i < rs.cfg.n && t < 0; i++)
        if (strcasecmp(rs.cfg.m[i].host, host) == 0)
            t = i;
    if (t < 0)
        return sbl_err_set(err, SBL_E_NodeNotFound, "Could not find member \"%s\" in replica set",
                           host);
    if (t == rs.self)
        return sbl_err_set(err, SBL_E_InvalidOptions, "I cannot sync from myself");
    if (rs.cfg.m[t].arbiter)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Cannot sync from \"%s\" because it is an "
                           "arbiter", host);
    if (rs.cfg.m[rs.self].votes > 0 && rs.cfg.m[t].votes == 0)
        return sbl_err_set(err, SBL_E_InvalidOptions, "Cannot sync from \"%s\" because it is not "
                           "a voter", host);
    if (!rs.peer[t].up)
        return sbl_err_set(err, SBL_E_HostUnreachable, "I cannot reach the requested member: %s",
                           host);
    *tp = t;
    return 0;
}

int sbl_repl_sync_from(const char *host, bson_t *r, sbl_err_t *err)
{
    int t = -1;
    SBL_RET(sbl_rs_lock_initiated(err));
    int rc = check_sync_from_locked(host, &t, err);
    if (rc == 0) {
        BSON_APPEND_UTF8(r, "syncFromRequested", rs.cfg.m[t].host);
        if (rs.sync_source[0] != '\0')
            BSON_APPEND_UTF8(r, "prevSyncTarget", rs.sync_source);
        int64_t behind = (int64_t)SBL_TS_SECS(sbl_rs_my_applied().ts) -
                         (int64_t)SBL_TS_SECS(rs.peer[t].applied.ts);
        if (behind > BEHIND_WARN_S) {
            char w[512];
            snprintf(w, sizeof(w), "requested member \"%s\" is more than %d seconds behind us",
                     rs.cfg.m[t].host, BEHIND_WARN_S);
            BSON_APPEND_UTF8(r, "warning", w);
        }
        snprintf(rs.sync_from, sizeof(rs.sync_from), "%s", rs.cfg.m[t].host);
        sbl_rs_broadcast_locked(); /* the applier looks at its source again */
    }
    pthread_mutex_unlock(&rs.lock);
    return rc;
}

int sbl_repl_maintenance(bool on, sbl_err_t *err)
{
    SBL_RET(sbl_rs_lock_initiated(err));
    int st = atomic_load(&rs.state), rc = 0;
    if (st == SBL_RS_PRIMARY)
        rc = sbl_err_set(err, SBL_E_NotSecondary, "primaries can't modify maintenance mode");
    else if (rs.cfg.m[rs.self].arbiter)
        rc = sbl_err_set(err, SBL_E_NotSecondary, "arbiters can't modify maintenance mode");
    else if (st != SBL_RS_SECONDARY && st != SBL_RS_RECOVERING)
        rc = sbl_err_set(err, SBL_E_NotSecondary, "can't modify maintenance mode while in %s",
                         sbl_rs_state_str(st));
    else if (!on && rs.maintenance == 0)
        rc = sbl_err_set(err, SBL_E_OperationFailed, "already out of maintenance mode");
    if (rc == 0 && on) {
        rs.maintenance++;
        sbl_rs_set_state_locked(SBL_RS_RECOVERING);
    } else if (rc == 0 && --rs.maintenance == 0 && st == SBL_RS_RECOVERING && !rs.sync_halted) {
        sbl_rs_set_state_locked(SBL_RS_SECONDARY);
        sbl_rs_reset_election_timer_locked(sbl_now_ms());
    }
    pthread_mutex_unlock(&rs.lock);
    if (rc == 0)
        sbl_rs_hb_kick(); /* the others learn the state now */
    return rc;
}
