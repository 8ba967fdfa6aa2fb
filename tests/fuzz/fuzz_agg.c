/*
 * fuzz_agg: the aggregate command end to end.  The input is a document
 * whose values become the pipeline's stages; it runs through sbl_cmd_run()
 * ({aggregate: "c", pipeline, cursor: {}}) against a small collection in a
 * temporary dbpath opened once per process.  The command must answer with a
 * reply carrying ok (0 with a code, or 1), never crash.  Stages that write
 * ($out, $merge) are dropped so the collection stays the same.
 */
#include "cmd/cmd.h"
#include "fuzz_common.h"
#include "storage/storage.h"

#include <unistd.h>

static char dir[] = "/tmp/fuzz_agg_XXXXXX";

static void cleanup(void)
{
    char cmd[64];
    sbl_session_release_thread();
    sbl_storage_close();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_agg: could not remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    sbl_err_t err = {0};
    if (mkdtemp(dir) == NULL)
        abort();
    sbl_storage_config_t cfg = {.dbpath = dir, .cache_size_gb = 0.1, .syncdelay_s = 0};
    if (sbl_storage_open(&cfg, &err) != 0) {
        fprintf(stderr, "fuzz_agg: storage open: %s\n", err.msg);
        abort();
    }
    atexit(cleanup);
    const char *json =
        "{\"insert\": \"c\", \"documents\": ["
        "{\"_id\": 1, \"a\": 1, \"b\": \"x\", \"t\": [1, 2, 3], \"s\": {\"x\": 1}},"
        "{\"_id\": 2, \"a\": 2.5, \"b\": \"y\", \"t\": [], \"s\": {\"x\": [1, {\"y\": 2}]}},"
        "{\"_id\": 3, \"a\": null, \"b\": \"x\"},"
        "{\"_id\": \"four\", \"a\": -3, \"t\": [[1], {\"a\": 1}], \"d\": {\"$date\": 0}},"
        "{\"_id\": 5, \"a\": {\"$numberDecimal\": \"1.5\"}, \"b\": null, \"s\": \"str\"}]}";
    bson_error_t berr;
    bson_t *ins = bson_new_from_json((const uint8_t *)json, -1, &berr);
    if (ins == NULL)
        abort();
    bson_t reply;
    bson_init(&reply);
    sbl_cmd_run("fz", ins, &reply);
    bson_destroy(&reply);
    bson_destroy(ins);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data;
    size_t n = size;
    bson_t stages, cmd, arr, reply;
    bson_iter_t it;
    uint32_t i = 0;

    if (!fuzz_next_doc(&p, &n, &stages))
        return 0;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "aggregate", "c");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &arr);
    bson_iter_init(&it, &stages);
    while (bson_iter_next(&it) && i < 16) {
        bson_iter_t st;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &st) && bson_iter_next(&st) &&
            (strcmp(bson_iter_key(&st), "$out") == 0 || strcmp(bson_iter_key(&st), "$merge") == 0))
            continue;
        char key[16];
        const char *k;
        bson_uint32_to_string(i++, &k, key, sizeof(key));
        bson_append_iter(&arr, k, -1, &it);
    }
    bson_append_array_end(&cmd, &arr);
    bson_t cur;
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cur);
    BSON_APPEND_INT32(&cur, "batchSize", 1000);
    bson_append_document_end(&cmd, &cur);
    bson_init(&reply);
    sbl_cmd_run("fz", &cmd, &reply);
    FUZZ_ASSERT(bson_iter_init_find(&it, &reply, "ok"));
    /* A pipeline that produced more than a batch leaves a cursor: kill it. */
    if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t id;
        if (bson_iter_recurse(&it, &id) && bson_iter_find(&id, "id") && bson_iter_as_int64(&id)) {
            bson_t kc = BSON_INITIALIZER, ids, kr;
            BSON_APPEND_UTF8(&kc, "killCursors", "c");
            BSON_APPEND_ARRAY_BEGIN(&kc, "cursors", &ids);
            BSON_APPEND_INT64(&ids, "0", bson_iter_as_int64(&id));
            bson_append_array_end(&kc, &ids);
            bson_init(&kr);
            sbl_cmd_run("fz", &kc, &kr);
            bson_destroy(&kr);
            bson_destroy(&kc);
        }
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return 0;
}
