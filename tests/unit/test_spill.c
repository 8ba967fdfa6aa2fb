/*
 * test_spill.c: the external sorter of src/exec/spill.c on its own.  What the
 * stages that spill rely on: every document comes back exactly once, in
 * comparator order, equal keys in the order they were added (stable across
 * runs), with the tag it was added with, however many runs were written;
 * and nothing is left in the spill directory afterwards.
 */
#include "check.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

static int cmp_k(const bson_t *a, const bson_t *b, const void *arg)
{
    bson_iter_t x, y;
    (void)arg;
    bson_iter_init_find(&x, a, "k");
    bson_iter_init_find(&y, b, "k");
    int32_t p = bson_iter_int32(&x), q = bson_iter_int32(&y);
    return p < q ? -1 : p > q;
}

/* Sort n documents {k: random % keys, i: position} with the given memory limit. */
static void run(size_t n, int32_t keys, size_t limit, bool expect_runs)
{
    sbl_err_t err = {0};
    sbl_sorter_t *s = sbl_sorter_new(cmp_k, NULL, limit, true);
    for (size_t i = 0; i < n; i++) {
        bson_t *d = bson_new();
        BSON_APPEND_INT32(d, "k", (int32_t)(random() % keys));
        BSON_APPEND_INT64(d, "i", (int64_t)i);
        CHECK(sbl_sorter_add(s, d, (int32_t)(i * 3), &err) == 0);
    }
    CHECK_MSG((sbl_sorter_runs(s) > 0) == expect_runs, "%zu runs", sbl_sorter_runs(s));
    size_t got = 0;
    int32_t last_k = -1;
    int64_t last_i = -1;
    bool ordered = true, tags = true;
    for (;;) {
        bson_t *d = NULL;
        int32_t tag = -1;
        CHECK(sbl_sorter_next(s, &d, &tag, &err) == 0);
        if (d == NULL)
            break;
        bson_iter_t k, i;
        bson_iter_init_find(&k, d, "k");
        bson_iter_init_find(&i, d, "i");
        int32_t kv = bson_iter_int32(&k);
        int64_t iv = bson_iter_int64(&i);
        if (kv < last_k || (kv == last_k && iv <= last_i))
            ordered = false;
        if (tag != (int32_t)(iv * 3))
            tags = false;
        last_k = kv;
        last_i = iv;
        got++;
        bson_destroy(d);
    }
    CHECK_MSG(got == n, "%zu of %zu documents", got, n);
    CHECK(ordered);
    CHECK(tags);
    sbl_sorter_free(s);
}

/* A sorter dropped half-way frees what it still holds (ASan checks the leaks). */
static void abandon(void)
{
    sbl_err_t err = {0};
    sbl_sorter_t *s = sbl_sorter_new(cmp_k, NULL, 2000, true);
    for (int i = 0; i < 500; i++) {
        bson_t *d = bson_new();
        BSON_APPEND_INT32(d, "k", i % 7);
        CHECK(sbl_sorter_add(s, d, 0, &err) == 0);
    }
    bson_t *d = NULL;
    CHECK(sbl_sorter_next(s, &d, NULL, &err) == 0 && d != NULL);
    bson_destroy(d);
    sbl_sorter_free(s);
}

static size_t dir_entries(const char *path)
{
    DIR *dir = opendir(path);
    size_t n = 0;
    struct dirent *e;
    if (dir == NULL)
        return 0;
    while ((e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strncmp(e->d_name, "spill-", 6) == 0)
            n++;
    closedir(dir);
    return n;
}

int main(void)
{
    srandom(42);
    run(0, 5, 1000, false);
    run(1, 5, 1000, false);
    run(100, 5, 1 << 20, false);       /* fits: one in-memory sort */
    run(5000, 13, 4096, true);         /* many runs, many ties */
    run(3000, 1, 1, true);             /* one document per run, all equal */
    run(20000, 1000000, 64 * 1024, true);
    abandon();
    /* without a server the spill directory is /tmp/_tmp; files are unlinked at creation */
    CHECK(dir_entries("/tmp/_tmp") == 0);
    CHECK(sbl_mem_limit(SBL_LIM_SORT) == 100 * 1024 * 1024);
    CHECK(sbl_mem_disk_ok(-1) && sbl_mem_disk_ok(1) && !sbl_mem_disk_ok(0));
    return CHECK_DONE("test_spill");
}
