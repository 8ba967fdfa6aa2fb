/*
 * rt_fastw.c: an insert, update or delete that goes to one shard, sent from
 * the client connection's loop thread over rt_fast.c's connections, as a
 * one-shard find is.  One client thread of YCSB's workload A (reads and
 * updates by _id) waits for every round trip: on the worker pool each write
 * also paid a worker's wake-up and the hand-back of its reply.
 *
 * Taken: what rt_fast_admit lets through (no transaction or retryable
 * write, the client's privileges already resolved), a cached routing
 * table, an update or delete whose statements all target one shard and
 * change no shard key (rt_write_one_shard: the worker path's own test for
 * sending the command whole), an insert whose documents all belong to one
 * shard (none with an array in its shard key: the router refuses those).
 * The command goes out as the worker path sends it (rt_copy_cmd, so its
 * writeConcern too, then the shard's version), and the reply comes back
 * shaped as that path shapes it.
 *
 * What must stay true: a write reaches a shard at most once.  Everything
 * that could send it to the worker path is decided before a byte goes out;
 * after that only an answer that says the shard did not run it (stale
 * routing, not primary) hands it to a worker (rt_fast.c).
 */
#include "router/router_int.h"

#include "doc/doc.h"
#include "net/net.h"
#include "shard/shard.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* How many entries cmd's array arr has: -1 when it is missing or one is no
 * document (the worker path answers that). */
static int entries(const bson_t *cmd, const char *arr)
{
    bson_iter_t it, a;
    int n = 0;
    if (!bson_iter_init_find(&it, cmd, arr) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &a))
        return -1;
    while (bson_iter_next(&a)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&a))
            return -1;
        n++;
    }
    return n;
}

/* The one shard owning every document of insert cmd by c; -1 when they
 * belong to several, or one's shard key holds an array (rt_insert's 61). */
static int insert_target(const rt_coll_t *c, const bson_t *cmd)
{
    bson_iter_t it, a;
    if (!c->sharded)
        return c->primary;
    if (!bson_iter_init_find(&it, cmd, "documents") || !bson_iter_recurse(&it, &a))
        return -1;
    int s = -1;
    while (bson_iter_next(&a)) {
        bson_t d;
        bson_value_t vals[SBL_SHARD_KEY_MAX];
        sbl_err_t err = {0};
        if (!sbl_iter_doc(&a, &d) ||
            (sbl_shard_key_values(c->key, c->hashed_pos, &d, 0, vals) & SBL_SHARD_KEY_ARRAY))
            return -1;
        int ds = rt_target_doc(c, &d, &err);
        if (ds < 0 || (s >= 0 && ds != s))
            return -1;
        s = ds;
    }
    return s;
}

bool rt_fast_write(sbl_conn_t *conn, sbl_request_t *req)
{
    static const struct {
        const char *name, *arr;
    } verbs[] = {{"insert", "documents"}, {"update", "updates"}, {"delete", "deletes"}};
    const bson_t *cmd = &req->cmd;
    const char *db = req->db[0] ? req->db : "admin";
    int64_t t0 = mono_us();
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it))
        return false;
    int v = 0;
    while (v < 3 && strcmp(bson_iter_key(&it), verbs[v].name) != 0)
        v++;
    /* admin, config and local: the config servers' or no shard's */
    if (v == 3 || strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 ||
        strcmp(db, "local") == 0 || entries(cmd, verbs[v].arr) < 1 ||
        !rt_fast_admit(conn, verbs[v].name, db, cmd))
        return false;
    char ns[400];
    snprintf(ns, sizeof(ns), "%s.%s", db, bson_iter_utf8(&it, NULL));
    rt_coll_t *c = rt_coll_cached(ns);
    if (c == NULL)
        return false;
    int s = v == 0 ? insert_target(c, cmd) : rt_write_one_shard(c, cmd, v == 1);
    bool took = false;
    if (s >= 0) {
        bson_t fwd = BSON_INITIALIZER;
        rt_copy_cmd(cmd, &fwd, NULL);
        rt_append_version(&fwd, c, s);
        rt_fast_kind_t kind = v == 0 && c->sharded ? RT_FAST_INSERT_SPLIT : RT_FAST_WRITE;
        took = rt_fast_send(conn, req, verbs[v].name, kind, t0, db, s, &fwd);
        bson_destroy(&fwd);
    }
    rt_coll_release(c);
    return took;
}
