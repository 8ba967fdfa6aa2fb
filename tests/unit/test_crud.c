/*
 * test_crud.c: drives the CRUD command handlers (insert, find, getMore,
 * killCursors, update, delete, findAndModify, count, distinct, aggregate)
 * through a command context built here, against a real storage engine in a
 * temporary directory.  What users rely on: results, counts, cursor
 * batching and MongoDB's error codes.
 */
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd_int.h"
#include "exec/exec.h"
#include "storage/storage.h"

static bson_t reply;
static sbl_err_t err;

/* Run handler fn on the command given as (relaxed extended) JSON against db "test". */
static int run(sbl_cmd_fn fn, const char *json)
{
    bson_error_t be;
    bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &be);
    if (cmd == NULL) {
        fprintf(stderr, "bad test JSON: %s: %s\n", json, be.message);
        exit(2);
    }
    sbl_client_t client = {0};
    sbl_opctx_t ctx = {0};
    ctx.client = &client;
    ctx.cmd = cmd;
    ctx.db = "test";
    ctx.ss = sbl_session_get();
    bson_reinit(&reply);
    ctx.reply = &reply;
    sbl_err_clear(&err);
    int rc = fn(&ctx, &err);
    bson_destroy(cmd);
    return rc;
}

static int64_t get_int(const char *path)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, &reply) || !bson_iter_find_descendant(&it, path, &it))
        return -999999;
    return bson_iter_as_int64(&it);
}

static bool has(const char *path)
{
    bson_iter_t it;
    return bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, path, &it);
}

/* Number of elements of the array at path. */
static int64_t array_len(const char *path)
{
    bson_iter_t it, sub;
    int64_t n = 0;
    if (!bson_iter_init(&it, &reply) || !bson_iter_find_descendant(&it, path, &it) ||
        !BSON_ITER_HOLDS_ARRAY(&it))
        return -1;
    bson_iter_recurse(&it, &sub);
    while (bson_iter_next(&sub))
        n++;
    return n;
}

static void dump(void)
{
    char *s = bson_as_relaxed_extended_json(&reply, NULL);
    fprintf(stderr, "reply: %s\n", s);
    bson_free(s);
}

static void test_insert(void)
{
    char buf[64];
    bson_string_t *s = bson_string_new("{\"insert\": \"c\", \"documents\": [");
    for (int i = 0; i < 300; i++) {
        snprintf(buf, sizeof(buf), "%s{\"_id\": %d, \"a\": %d, \"t\": [%d, %d]}", i ? "," : "", i,
                 i % 10, i % 3, 7);
        bson_string_append(s, buf);
    }
    bson_string_append(s, "]}");
    CHECK(run(sbl_cmd_insert, s->str) == 0);
    CHECK(get_int("n") == 300);
    CHECK(!has("writeErrors"));
    bson_string_free(s, true);

    CHECK(run(sbl_cmd_insert, "{\"insert\": \"c\", \"ordered\": false, \"documents\": "
                              "[{\"_id\": 1}, {\"_id\": 1000, \"a\": 99}, {\"_id\": [1]}]}") == 0);
    CHECK(get_int("n") == 1);
    CHECK(array_len("writeErrors") == 2);
    CHECK(get_int("writeErrors.0.code") == 11000);
    CHECK(get_int("writeErrors.0.index") == 0);
    CHECK(get_int("writeErrors.1.code") == 53);
    CHECK(get_int("writeErrors.1.index") == 2);

    CHECK(run(sbl_cmd_insert, "{\"insert\": \"c\", \"documents\": [{\"_id\": 1}, {\"_id\": 2000}]}") == 0);
    CHECK(get_int("n") == 0); /* ordered: stops at the first error */

    /* A generated _id goes first. */
    CHECK(run(sbl_cmd_insert, "{\"insert\": \"gen\", \"documents\": [{\"x\": 1, \"_id\": 5}, {\"y\": 2}]}") == 0);
    CHECK(get_int("n") == 2);
    CHECK(run(sbl_cmd_find, "{\"find\": \"gen\", \"sort\": {\"_id\": 1}}") == 0);
    bson_iter_t it;
    CHECK(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.1", &it));
    bson_iter_t d;
    bson_iter_recurse(&it, &d);
    CHECK(bson_iter_next(&d) && strcmp(bson_iter_key(&d), "_id") == 0 && BSON_ITER_HOLDS_OID(&d));

    CHECK(run(sbl_cmd_insert, "{\"insert\": \"c\", \"documents\": []}") == SBL_E_InvalidLength);
    CHECK(run(sbl_cmd_insert, "{\"insert\": \"c\", \"documents\": [{}], \"foo\": 1}") == 40415);
    CHECK(strcmp(err.msg, "BSON field 'insert.foo' is an unknown field.") == 0);
}

static void test_find(void)
{
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\"}") == 0);
    CHECK(array_len("cursor.firstBatch") == 101);
    int64_t id = get_int("cursor.id");
    CHECK(id > 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "{\"getMore\": {\"$numberLong\": \"%lld\"}, \"collection\": \"c\", \"batchSize\": 100}",
             (long long)id);
    CHECK(run(sbl_cursor_get_more, cmd) == 0);
    CHECK(array_len("cursor.nextBatch") == 100);
    CHECK(get_int("cursor.id") == id);
    CHECK(get_int("cursor.nextBatch.0._id") == 101);
    snprintf(cmd, sizeof(cmd), "{\"getMore\": {\"$numberLong\": \"%lld\"}, \"collection\": \"d\"}",
             (long long)id);
    CHECK(run(sbl_cursor_get_more, cmd) == SBL_E_Unauthorized);
    snprintf(cmd, sizeof(cmd), "{\"getMore\": {\"$numberLong\": \"%lld\"}, \"collection\": \"c\"}",
             (long long)id);
    CHECK(run(sbl_cursor_get_more, cmd) == 0);
    CHECK(array_len("cursor.nextBatch") == 100); /* 300 + _id 1000 */
    CHECK(get_int("cursor.nextBatch.99._id") == 1000);
    CHECK(get_int("cursor.id") == 0);
    CHECK(run(sbl_cursor_get_more, cmd) == SBL_E_CursorNotFound);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"_id\": 5}, \"projection\": "
                            "{\"a\": 1}, \"limit\": 1}") == 0);
    CHECK(array_len("cursor.firstBatch") == 1);
    CHECK(get_int("cursor.firstBatch.0.a") == 5);
    CHECK(!has("cursor.firstBatch.0.t"));
    CHECK(get_int("cursor.id") == 0);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"_id\": {\"$lt\": 100}}, \"sort\": "
                            "{\"a\": -1, \"_id\": 1}, \"skip\": 2, \"limit\": 3}") == 0);
    CHECK(array_len("cursor.firstBatch") == 3);
    CHECK(get_int("cursor.firstBatch.0._id") == 29);
    CHECK(get_int("cursor.firstBatch.2._id") == 49);
    CHECK(get_int("cursor.id") == 0);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"_id\": {\"$gte\": 290}}, \"sort\": "
                            "{\"_id\": 1}, \"limit\": 5}") == 0);
    CHECK(array_len("cursor.firstBatch") == 5);
    CHECK(get_int("cursor.firstBatch.0._id") == 290);
    CHECK(get_int("cursor.firstBatch.4._id") == 294);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"sort\": {\"_id\": -1}, \"limit\": 2}") == 0);
    CHECK(get_int("cursor.firstBatch.0._id") == 1000);
    CHECK(get_int("cursor.firstBatch.1._id") == 299);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"a\": 3, \"_id\": {\"$gt\": 200}}, "
                            "\"batchSize\": 2}") == 0);
    CHECK(array_len("cursor.firstBatch") == 2);
    CHECK(get_int("cursor.firstBatch.0._id") == 203);
    id = get_int("cursor.id");
    snprintf(cmd, sizeof(cmd), "{\"getMore\": {\"$numberLong\": \"%lld\"}, \"collection\": \"c\"}",
             (long long)id);
    CHECK(run(sbl_cursor_get_more, cmd) == 0);
    CHECK(array_len("cursor.nextBatch") == 8);
    CHECK(get_int("cursor.nextBatch.0._id") == 223);

    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"batchSize\": 0}") == 0);
    CHECK(array_len("cursor.firstBatch") == 0);
    id = get_int("cursor.id");
    CHECK(id > 0);
    snprintf(cmd, sizeof(cmd), "{\"killCursors\": \"c\", \"cursors\": [{\"$numberLong\": \"%lld\"}, "
                               "{\"$numberLong\": \"12345\"}]}",
             (long long)id);
    CHECK(run(sbl_cursor_kill, cmd) == 0);
    CHECK(get_int("cursorsKilled.0") == id);
    CHECK(get_int("cursorsNotFound.0") == 12345);

    CHECK(run(sbl_cmd_find, "{\"find\": \"nosuch\"}") == 0);
    CHECK(array_len("cursor.firstBatch") == 0 && get_int("cursor.id") == 0);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": \"x\"}") == SBL_E_TypeMismatch);
    CHECK(strcmp(err.msg, "BSON field 'FindCommandRequest.filter' is the wrong type 'string', "
                          "expected type 'object'") == 0);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"foo\": 1}") == 40415);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"hint\": {\"a\": 1}}") == SBL_E_BadValue);
    /* The find command refuses a negative limit (drivers send limit + singleBatch). */
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"limit\": -3}") == 51024);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"hint\": \"_id_\", \"limit\": 3, "
                            "\"singleBatch\": true}") == 0);
    CHECK(array_len("cursor.firstBatch") == 3 && get_int("cursor.id") == 0);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"$foo\": 1}}") == SBL_E_BadValue);
}

static void test_update(void)
{
    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 5}, \"u\": "
                              "{\"$set\": {\"b\": 1}}}]}") == 0);
    CHECK(get_int("n") == 1 && get_int("nModified") == 1);
    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 5}, \"u\": "
                              "{\"$set\": {\"b\": 1}}}]}") == 0);
    CHECK(get_int("n") == 1 && get_int("nModified") == 0);

    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"a\": 3}, \"u\": "
                              "{\"$inc\": {\"a\": 100}}, \"multi\": true}]}") == 0);
    CHECK(get_int("n") == 30 && get_int("nModified") == 30);
    CHECK(run(sbl_cmd_count, "{\"count\": \"c\", \"query\": {\"a\": 103}}") == 0);
    CHECK(get_int("n") == 30);

    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 5000}, \"u\": "
                              "{\"$set\": {\"x\": 1}}, \"upsert\": true}]}") == 0);
    CHECK(get_int("n") == 1 && get_int("nModified") == 0);
    CHECK(get_int("upserted.0._id") == 5000 && get_int("upserted.0.index") == 0);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"_id\": 5000}}") == 0);
    CHECK(get_int("cursor.firstBatch.0.x") == 1);

    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"a\": 4}, \"u\": "
                              "{\"z\": 1}, \"multi\": true}]}") == 0);
    CHECK(get_int("writeErrors.0.code") == SBL_E_FailedToParse);

    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"_id\": 6}, \"u\": "
                              "{\"z\": 1}}]}") == 0);
    CHECK(get_int("nModified") == 1);
    CHECK(run(sbl_cmd_find, "{\"find\": \"c\", \"filter\": {\"_id\": 6}}") == 0);
    CHECK(get_int("cursor.firstBatch.0.z") == 1 && !has("cursor.firstBatch.0.a"));

    CHECK(run(sbl_cmd_update, "{\"update\": \"c\", \"updates\": [{\"q\": {\"a\": 2}, \"u\": "
                              "{\"$inc\": {\"n\": 1}}}]}") == 0);
    CHECK(get_int("n") == 1);
}

static void test_delete_count_distinct(void)
{
    CHECK(run(sbl_cmd_count, "{\"count\": \"c\"}") == 0);
    CHECK(get_int("n") == 302);
    CHECK(run(sbl_cmd_count, "{\"count\": \"c\", \"skip\": 300}") == 0);
    CHECK(get_int("n") == 2);
    CHECK(run(sbl_cmd_delete, "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"a\": 1}, \"limit\": 0}]}") == 0);
    CHECK(get_int("n") == 30);
    CHECK(run(sbl_cmd_delete, "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"a\": 2}, \"limit\": 1}]}") == 0);
    CHECK(get_int("n") == 1);
    CHECK(run(sbl_cmd_delete, "{\"delete\": \"c\", \"deletes\": [{\"q\": {\"_id\": 5000}, \"limit\": 1}]}") == 0);
    CHECK(get_int("n") == 1);
    CHECK(run(sbl_cmd_count, "{\"count\": \"c\", \"query\": {\"a\": {\"$lte\": 2}}}") == 0);
    CHECK(get_int("n") == 30 + 29); /* thirty a:0, twenty-nine a:2 */
    CHECK(run(sbl_cmd_delete, "{\"delete\": \"c\", \"deletes\": [{\"q\": {}, \"limit\": 3}]}") == SBL_E_FailedToParse);

    CHECK(run(sbl_cmd_distinct, "{\"distinct\": \"c\", \"key\": \"t\"}") == 0);
    CHECK(array_len("values") == 4); /* 0, 1, 2, 7 */
    CHECK(run(sbl_cmd_distinct, "{\"distinct\": \"c\", \"key\": \"a\", \"query\": {\"_id\": {\"$lt\": 20}}}") == 0);
    CHECK(array_len("values") == 9);
}

static void test_find_and_modify(void)
{
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"query\": {\"a\": 0}, \"sort\": "
                                       "{\"_id\": -1}, \"update\": {\"$set\": {\"f\": 1}}, \"new\": true}") == 0);
    CHECK(get_int("value._id") == 290 && get_int("value.f") == 1);
    CHECK(get_int("lastErrorObject.n") == 1);
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"query\": {\"_id\": 290}, "
                                       "\"update\": {\"$set\": {\"f\": 2}}, \"fields\": {\"f\": 1}}") == 0);
    CHECK(get_int("value.f") == 1 && !has("value.a"));
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"query\": {\"_id\": 290}, "
                                       "\"remove\": true}") == 0);
    CHECK(get_int("value.f") == 2);
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"query\": {\"_id\": 290}, "
                                       "\"remove\": true}") == 0);
    CHECK(get_int("lastErrorObject.n") == 0 && has("value"));
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"query\": {\"_id\": 7777}, "
                                       "\"update\": {\"$set\": {\"u\": 1}}, \"upsert\": true, \"new\": true}") == 0);
    CHECK(get_int("lastErrorObject.upserted") == 7777 && get_int("value.u") == 1);
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\", \"remove\": true, \"update\": {}}") == SBL_E_FailedToParse);
    CHECK(run(sbl_cmd_find_and_modify, "{\"findAndModify\": \"c\"}") == SBL_E_FailedToParse);
}

static void test_aggregate(void)
{
    CHECK(run(sbl_cmd_insert, "{\"insert\": \"ag\", \"documents\": ["
                              "{\"_id\": 1, \"k\": \"x\", \"v\": 1, \"arr\": [1, 2]},"
                              "{\"_id\": 2, \"k\": \"x\", \"v\": 2.5, \"arr\": []},"
                              "{\"_id\": 3, \"k\": \"y\", \"v\": 4, \"s\": {\"t\": 9}},"
                              "{\"_id\": 4, \"k\": \"y\"}]}") == 0);
    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": ["
                                 "{\"$match\": {\"_id\": {\"$gte\": 1}}},"
                                 "{\"$group\": {\"_id\": \"$k\", \"n\": {\"$sum\": 1}, "
                                 "\"t\": {\"$sum\": \"$v\"}, \"mx\": {\"$max\": \"$v\"}, "
                                 "\"a\": {\"$avg\": \"$v\"}, \"ids\": {\"$push\": \"$_id\"}}},"
                                 "{\"$sort\": {\"_id\": 1}}], \"cursor\": {}}") == 0);
    CHECK(array_len("cursor.firstBatch") == 2);
    CHECK(get_int("cursor.firstBatch.0.n") == 2);
    CHECK(get_int("cursor.firstBatch.1.t") == 4);
    CHECK(get_int("cursor.firstBatch.1.mx") == 4);
    CHECK(array_len("cursor.firstBatch.0.ids") == 2);
    CHECK(get_int("cursor.id") == 0);

    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": ["
                                 "{\"$unwind\": {\"path\": \"$arr\", \"preserveNullAndEmptyArrays\": true}},"
                                 "{\"$project\": {\"_id\": 0, \"arr\": 1, \"kk\": \"$k\", \"lit\": \"hi\", \"st\": \"$s.t\"}},"
                                 "{\"$skip\": 1}, {\"$limit\": 3}], \"cursor\": {\"batchSize\": 2}}") == 0);
    CHECK(array_len("cursor.firstBatch") == 2);
    CHECK(get_int("cursor.firstBatch.0.arr") == 2);
    CHECK(!has("cursor.firstBatch.0._id"));
    CHECK(has("cursor.firstBatch.1.kk") && has("cursor.firstBatch.1.lit"));
    CHECK(get_int("cursor.id") > 0);

    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": ["
                                 "{\"$addFields\": {\"w\": \"$v\", \"s.u\": 1}}, {\"$unset\": \"arr\"},"
                                 "{\"$match\": {\"_id\": 3}}, {\"$replaceWith\": \"$s\"}], \"cursor\": {}}") == 0);
    CHECK(get_int("cursor.firstBatch.0.t") == 9 && get_int("cursor.firstBatch.0.u") == 1);

    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": ["
                                 "{\"$match\": {\"k\": \"y\"}}, {\"$count\": \"c\"}], \"cursor\": {}}") == 0);
    CHECK(get_int("cursor.firstBatch.0.c") == 2);
    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": ["
                                 "{\"$collStats\": {\"count\": {}}}], \"cursor\": {}}") == 0);
    CHECK(get_int("cursor.firstBatch.0.count") == 4);
    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": "
                                 "[{\"$sort\": {\"v\": -1}}, {\"$limit\": 1}], \"cursor\": {}}") == 0);
    CHECK(get_int("cursor.firstBatch.0._id") == 3);
    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": [{\"$foo\": {}}], "
                                 "\"cursor\": {}}") == 40324);
    CHECK(strcmp(err.msg, "Unrecognized pipeline stage name: '$foo'") == 0);
    CHECK(run(sbl_cmd_aggregate, "{\"aggregate\": \"ag\", \"pipeline\": []}") == SBL_E_FailedToParse);
}

int main(void)
{
    char dir[] = "/tmp/test_crud_XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 2;
    sbl_storage_config_t cfg = {.dbpath = dir, .cache_size_gb = 0.25};
    sbl_err_t e = {0};
    if (sbl_storage_open(&cfg, &e) != 0) {
        fprintf(stderr, "storage open: %s\n", e.msg);
        return 2;
    }
    bson_init(&reply);
    test_insert();
    test_find();
    test_update();
    test_delete_count_distinct();
    test_find_and_modify();
    test_aggregate();
    if (check_failed)
        dump();
    bson_destroy(&reply);
    sbl_session_release_thread();
    sbl_storage_close();
    char rm[128];
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    if (system(rm) != 0)
        return 2;
    return CHECK_DONE("test_crud");
}
