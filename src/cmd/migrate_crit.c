/*
 * migrate_crit.c: the windows of the migrations' critical sections on this
 * shard, per namespace: from the newest oplog ts when one began
 * (mig_crit_note) to this member's cluster time when it ended
 * (mig_crit_done).  Every change a migration makes to the range here (the
 * recipient's move-in, the donor's deletion, an abort's removal) falls
 * inside, and so does the commit's validAfter on the config servers (the
 * donor asks for one after the move-in, and both shards' clocks pass it
 * before they close their windows).
 *
 * What must stay true: outside every window this shard's data of ns at a
 * time matches the chunks config.chunks' history says it owned then; inside
 * one only a read filtered by the ownership at its time answers right (the
 * routed reads are: snapshot_read.c), a read without a filter is refused
 * (SnapshotUnavailable), and so is a snapshot transaction's write inside one
 * or at a time before one (its snapshot lacks what moved in since).  Kept
 * in memory: a few windows (one migration at a time per shard; an older one
 * has left the snapshot history anyway).
 */
#include "cmd/migrate_int.h"

#include "doc/doc.h"
#include "repl/repl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* end: 0 while the critical section lasts. */
static pthread_mutex_t crit_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char ns[256];
    uint64_t ts, end;
} crits[16];
static unsigned ncrits;

void mig_crit_note(const char *ns)
{
    uint64_t ts = sbl_repl_last_op_ts();
    pthread_mutex_lock(&crit_mu);
    unsigned i = 0;
    while (i < ncrits && i < 16 && strcmp(crits[i].ns, ns) != 0)
        i++;
    if (i == ncrits || i == 16)
        i = ncrits++ % 16;
    snprintf(crits[i].ns, sizeof(crits[i].ns), "%s", ns);
    crits[i].ts = ts;
    crits[i].end = 0;
    pthread_mutex_unlock(&crit_mu);
}

void mig_crit_done(const char *ns)
{
    uint64_t end = sbl_repl_clock_now();
    pthread_mutex_lock(&crit_mu);
    for (unsigned i = 0; i < ncrits && i < 16; i++)
        if ((ns == NULL || strcmp(crits[i].ns, ns) == 0) && crits[i].end == 0)
            crits[i].end = end;
    pthread_mutex_unlock(&crit_mu);
}

int mig_crit_check_at(const char *ns, uint64_t at, bool writes, sbl_err_t *err)
{
    bool hit = false;
    uint64_t from = 0;
    pthread_mutex_lock(&crit_mu);
    for (unsigned i = 0; i < ncrits && i < 16; i++)
        if (strcmp(crits[i].ns, ns) == 0 &&
            ((crits[i].ts <= at && (crits[i].end == 0 || at <= crits[i].end)) ||
             (writes && crits[i].ts > at))) {
            hit = true;
            from = crits[i].ts;
        }
    pthread_mutex_unlock(&crit_mu);
    if (!hit)
        return 0;
    return sbl_err_set(err, SBL_E_SnapshotUnavailable, "Unable to %s %s at Timestamp(%u, %u): "
                       "a chunk migration that began at Timestamp(%u, %u) changed this shard's "
                       "data of the collection %s; please retry the operation",
                       writes ? "write" : "read", ns, (unsigned)(at >> 32), (unsigned)at,
                       (unsigned)(from >> 32), (unsigned)from,
                       writes && from > at ? "since then" : "around that time");
}

uint64_t mig_crit_ts(const char *db, const bson_t *getmore)
{
    const char *coll = sbl_doc_utf8(getmore, "collection");
    char ns[256];
    if (coll == NULL)
        return 0;
    snprintf(ns, sizeof(ns), "%s.%s", db, coll);
    uint64_t ts = 0;
    pthread_mutex_lock(&crit_mu);
    for (unsigned i = 0; i < ncrits && i < 16; i++)
        if (strcmp(crits[i].ns, ns) == 0)
            ts = crits[i].ts;
    pthread_mutex_unlock(&crit_mu);
    return ts;
}
