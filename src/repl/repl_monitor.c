/*
 * repl_monitor.c: what monitoring reads of replication: serverStatus's
 * repl (the member's hello view), opcountersRepl (entries applied here, by
 * type, as mongod counts them), electionMetrics and metrics.repl (apply,
 * network: what the fetcher waited for and applied), and per-member state and
 * lag for the Prometheus endpoint and the monitoring page.
 *
 * What must stay true: counters only grow; lag is measured against the
 * newest optime this member knows (its own when primary).
 */
#include "repl/repl_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"

#define rs sbl_rs

enum { OPR_INSERT, OPR_QUERY, OPR_UPDATE, OPR_DELETE, OPR_GETMORE, OPR_COMMAND, OPR_N };
static _Atomic int64_t opr[OPR_N];
static _Atomic int64_t applied_ops, applied_batches, apply_us;
/* metrics.repl.network, mongod's fields */
static _Atomic int64_t net_bytes, net_ops, net_getmores, net_getmore_us, net_empty, net_readers,
                       net_positions;

void sbl_rs_count_applied_op(const bson_t *e)
{
    bson_iter_t it;
    const char *op = sbl_doc_find_top(e, "op", &it) && BSON_ITER_HOLDS_UTF8(&it)
                         ? bson_iter_utf8(&it, NULL) : "";
    int k = op[0] == 'i' ? OPR_INSERT : op[0] == 'u' ? OPR_UPDATE : op[0] == 'd' ? OPR_DELETE
          : op[0] == 'c' ? OPR_COMMAND : -1;
    if (k >= 0)
        atomic_fetch_add(&opr[k], 1);
    atomic_fetch_add(&applied_ops, 1);
}

int64_t sbl_rs_applied_ops(void)
{
    return atomic_load(&applied_ops);
}

void sbl_rs_count_batch(void)
{
    atomic_fetch_add(&applied_batches, 1);
}

void sbl_rs_count_fetch(bool getmore, int64_t docs, int64_t bytes, int64_t us)
{
    atomic_fetch_add(&net_bytes, bytes);
    atomic_fetch_add(&net_ops, docs);
    if (!getmore)
        return;
    atomic_fetch_add(&net_getmores, 1);
    atomic_fetch_add(&net_getmore_us, us);
    if (docs == 0)
        atomic_fetch_add(&net_empty, 1);
}

void sbl_rs_count_reader(void)
{
    atomic_fetch_add(&net_readers, 1);
}

void sbl_rs_count_update_position(void)
{
    atomic_fetch_add(&net_positions, 1);
}

void sbl_rs_count_apply_us(int64_t us)
{
    atomic_fetch_add(&apply_us, us);
}

/* electionMetrics: elections called and won per reason (mongod's counters;
 * both step-up reasons count as stepUpCmd), catch-ups by outcome. */
enum { EL_STEP_UP, EL_PRIORITY, EL_CATCHUP, EL_TIMEOUT, EL_FREEZE, EL_N };
static const char *const el_names[EL_N] = {"stepUpCmd", "priorityTakeover", "catchUpTakeover",
                                           "electionTimeout", "freezeTimeout"};
static _Atomic int64_t el_called[EL_N], el_won[EL_N];
static _Atomic int64_t catchups, catchup_by[SBL_CATCHUP_N], catchup_ops, higher_term_downs;

void sbl_rs_count_election(const char *reason, bool won)
{
    int k = strncmp(reason, "stepUpRequest", 13) == 0 ? EL_STEP_UP
          : strcmp(reason, "priorityTakeover") == 0 ? EL_PRIORITY
          : strcmp(reason, "catchupTakeover") == 0 ? EL_CATCHUP
          : strcmp(reason, "electionTimeout") == 0 ? EL_TIMEOUT
          : strcmp(reason, "singleNodePromptElection") == 0 ? EL_FREEZE : -1;
    if (k >= 0)
        atomic_fetch_add(won ? &el_won[k] : &el_called[k], 1);
}

void sbl_rs_count_catchup(int outcome, int64_t ops)
{
    if (outcome < 0 || outcome >= SBL_CATCHUP_N)
        return;
    atomic_fetch_add(&catchup_by[outcome], 1);
    if (outcome != SBL_CATCHUP_ALREADY && outcome != SBL_CATCHUP_SKIPPED) {
        atomic_fetch_add(&catchups, 1);
        atomic_fetch_add(&catchup_ops, ops);
    }
}

void sbl_rs_count_higher_term_step_down(void)
{
    atomic_fetch_add(&higher_term_downs, 1);
}

static void append_election_metrics(bson_t *r)
{
    static const char *const outcome[SBL_CATCHUP_N] = {
        "numCatchUpsSucceeded", "numCatchUpsAlreadyCaughtUp", "numCatchUpsSkipped",
        "numCatchUpsTimedOut", "numCatchUpsFailedWithError", "numCatchUpsFailedWithNewTerm",
        "numCatchUpsFailedWithReplSetAbortPrimaryCatchUpCmd"};
    bson_t d, c;
    BSON_APPEND_DOCUMENT_BEGIN(r, "electionMetrics", &d);
    for (int i = 0; i < EL_N; i++) {
        BSON_APPEND_DOCUMENT_BEGIN(&d, el_names[i], &c);
        BSON_APPEND_INT64(&c, "called", atomic_load(&el_called[i]));
        BSON_APPEND_INT64(&c, "successful", atomic_load(&el_won[i]));
        bson_append_document_end(&d, &c);
    }
    BSON_APPEND_INT64(&d, "numStepDownsCausedByHigherTerm", atomic_load(&higher_term_downs));
    int64_t n = atomic_load(&catchups);
    BSON_APPEND_INT64(&d, "numCatchUps", n);
    for (int i = 0; i < SBL_CATCHUP_N; i++)
        BSON_APPEND_INT64(&d, outcome[i], atomic_load(&catchup_by[i]));
    BSON_APPEND_DOUBLE(&d, "averageCatchUpOps", n > 0 ? (double)atomic_load(&catchup_ops) / n : 0);
    bson_append_document_end(r, &d);
}

void sbl_repl_append_server_status(bson_t *r)
{
    bson_t d;
    if (atomic_load(&rs.state) == SBL_RS_STANDALONE)
        return;
    int st = atomic_load(&rs.state);
    BSON_APPEND_DOCUMENT_BEGIN(r, "repl", &d);
    sbl_repl_append_hello(&d);
    BSON_APPEND_BOOL(&d, "isWritablePrimary", st == SBL_RS_PRIMARY);
    BSON_APPEND_INT32(&d, "rbid", 1);
    bson_append_document_end(r, &d);

    BSON_APPEND_DOCUMENT_BEGIN(r, "opcountersRepl", &d);
    static const char *const names[OPR_N] = {"insert", "query", "update", "delete", "getmore",
                                             "command"};
    for (int i = 0; i < OPR_N; i++)
        BSON_APPEND_INT64(&d, names[i], atomic_load(&opr[i]));
    bson_append_document_end(r, &d);
    append_election_metrics(r);
}

void sbl_repl_append_metrics(bson_t *metrics)
{
    bson_t d, a, b, s;
    if (atomic_load(&rs.state) == SBL_RS_STANDALONE)
        return;
    BSON_APPEND_DOCUMENT_BEGIN(metrics, "repl", &d);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "apply", &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, "batches", &b);
    BSON_APPEND_INT64(&b, "num", atomic_load(&applied_batches));
    BSON_APPEND_INT64(&b, "totalMillis", atomic_load(&apply_us) / 1000);
    bson_append_document_end(&a, &b);
    BSON_APPEND_INT64(&a, "ops", atomic_load(&applied_ops));
    bson_append_document_end(&d, &a);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "network", &a);
    BSON_APPEND_INT64(&a, "bytes", atomic_load(&net_bytes));
    BSON_APPEND_DOCUMENT_BEGIN(&a, "getmores", &b);
    BSON_APPEND_INT64(&b, "num", atomic_load(&net_getmores));
    BSON_APPEND_INT64(&b, "totalMillis", atomic_load(&net_getmore_us) / 1000);
    BSON_APPEND_INT64(&b, "numEmptyBatches", atomic_load(&net_empty));
    bson_append_document_end(&a, &b);
    BSON_APPEND_INT64(&a, "ops", atomic_load(&net_ops));
    BSON_APPEND_INT64(&a, "readersCreated", atomic_load(&net_readers));
    BSON_APPEND_DOCUMENT_BEGIN(&a, "replSetUpdatePosition", &b);
    BSON_APPEND_INT64(&b, "num", atomic_load(&net_positions));
    bson_append_document_end(&a, &b);
    bson_append_document_end(&d, &a);
    pthread_mutex_lock(&rs.lock);
    BSON_APPEND_DOCUMENT_BEGIN(&d, "syncSource", &s);
    BSON_APPEND_UTF8(&s, "host", rs.sync_source);
    bson_append_document_end(&d, &s);
    pthread_mutex_unlock(&rs.lock);
    bson_append_document_end(metrics, &d);
}

int sbl_repl_members_info(sbl_repl_member_info_t *out, int cap)
{
    int n = 0;
    if (atomic_load(&rs.state) == SBL_RS_STANDALONE)
        return 0;
    pthread_mutex_lock(&rs.lock);
    if (rs.config == NULL || rs.self < 0) {
        pthread_mutex_unlock(&rs.lock);
        return 0;
    }
    /* the newest optime known: the primary's, else the furthest member's */
    sbl_optime_t me = sbl_rs_my_applied(), top = me;
    int64_t top_wall = sbl_oplog_last_wall_ms(), my_wall = top_wall;
    for (int i = 0; i < rs.cfg.n; i++)
        if (i != rs.self && rs.peer[i].up && sbl_optime_cmp(rs.peer[i].applied, top) > 0) {
            top = rs.peer[i].applied;
            top_wall = rs.peer[i].applied_wall;
        }
    for (int i = 0; i < rs.cfg.n && n < cap; i++, n++) {
        const sbl_rs_peer_t *p = &rs.peer[i];
        bool self = i == rs.self;
        sbl_repl_member_info_t *m = &out[n];
        snprintf(m->name, sizeof(m->name), "%.*s", (int)sizeof(m->name) - 1, rs.cfg.m[i].host);
        m->state = self ? atomic_load(&rs.state) : (p->up ? p->state : SBL_RS_DOWN);
        sbl_optime_t o = self ? me : p->applied;
        int64_t wall = self ? my_wall : p->applied_wall;
        if (!self && !p->up) {
            m->lag_ms = -1;
        } else if (sbl_optime_cmp(o, top) >= 0) {
            m->lag_ms = 0;
        } else if (wall > 0 && top_wall > 0) {
            m->lag_ms = top_wall > wall ? top_wall - wall : 0;
        } else {
            int64_t s = (int64_t)SBL_TS_SECS(top.ts) - (int64_t)SBL_TS_SECS(o.ts);
            m->lag_ms = s > 0 ? s * 1000 : 0;
        }
    }
    pthread_mutex_unlock(&rs.lock);
    return n;
}
