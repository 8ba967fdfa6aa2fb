/*
 * test_bal_drain.c: the balancer's draining policy (src/cmd/bal_drain.c)
 * over config.chunks documents, without a cluster: the first chunk (by min)
 * on a draining shard, not one marked jumbo, goes to the shard with the least
 * data of the collection (the fewest chunks when sizes are not given);
 * nothing moves when no chunk is on a draining shard or no shard
 * takes chunks.
 */
#include "check.h"
#include "cmd/bal_drain.h"

#include <bson/bson.h>
#include <string.h>

/* chunks [i*10, i*10+10) on shards[i] (k: the shard key). */
static void chunks_on(bson_t *arr, const char *const *shards, int n)
{
    bson_init(arr);
    for (int i = 0; i < n; i++) {
        char key[16];
        bson_t c, b;
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(arr, key, &c);
        BSON_APPEND_DOCUMENT_BEGIN(&c, "min", &b);
        BSON_APPEND_INT32(&b, "k", i * 10);
        bson_append_document_end(&c, &b);
        BSON_APPEND_DOCUMENT_BEGIN(&c, "max", &b);
        BSON_APPEND_INT32(&b, "k", i * 10 + 10);
        bson_append_document_end(&c, &b);
        BSON_APPEND_UTF8(&c, "shard", shards[i]);
        bson_append_document_end(arr, &c);
    }
}

static int min_k(const bson_t *min)
{
    bson_iter_t it;
    return bson_iter_init_find(&it, min, "k") ? bson_iter_int32(&it) : -1;
}

int main(void)
{
    char takers[3][SBL_BAL_SHARD_ID] = {"s0", "s1", "s3"};
    char draining[1][SBL_BAL_SHARD_ID] = {"s2"};
    bson_t arr, min, max;
    int to = -1;

    /* s2's first chunk (k 10) goes to s3, the taker with the fewest */
    const char *a[] = {"s0", "s2", "s1", "s2", "s0", "s1"};
    chunks_on(&arr, a, 6);
    CHECK(sbl_bal_drain_pick(&arr, takers, 3, draining, 1, NULL, &min, &max, &to));
    CHECK(min_k(&min) == 10 && min_k(&max) == 20);
    CHECK(to == 2);
    bson_destroy(&arr);

    /* with data sizes known, the taker with the least data, whatever its
     * chunk count (s3, with no chunk, holds the most: s1 takes it) */
    int64_t sizes[3] = {500, 300, 900};
    chunks_on(&arr, a, 6);
    CHECK(sbl_bal_drain_pick(&arr, takers, 3, draining, 1, sizes, &min, &max, &to));
    CHECK(min_k(&min) == 10 && to == 1);
    bson_destroy(&arr);

    /* ties: the first taker with the fewest */
    const char *b[] = {"s2", "s1", "s3"};
    chunks_on(&arr, b, 3);
    CHECK(sbl_bal_drain_pick(&arr, takers, 3, draining, 1, NULL, &min, &max, &to));
    CHECK(min_k(&min) == 0 && to == 0);
    bson_destroy(&arr);

    /* a jumbo chunk stays: the draining shard's next chunk goes (k 30) */
    bson_t j = BSON_INITIALIZER;
    bson_iter_t it;
    chunks_on(&arr, a, 6);
    bson_iter_init(&it, &arr);
    while (bson_iter_next(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t d, copy;
        bson_iter_document(&it, &len, &data);
        CHECK(bson_init_static(&d, data, len));
        bson_copy_to(&d, &copy);
        if (strcmp(bson_iter_key(&it), "1") == 0)
            BSON_APPEND_BOOL(&copy, "jumbo", true);
        BSON_APPEND_DOCUMENT(&j, bson_iter_key(&it), &copy);
        bson_destroy(&copy);
    }
    CHECK(sbl_bal_drain_pick(&j, takers, 3, draining, 1, NULL, &min, &max, &to));
    CHECK(min_k(&min) == 30 && to == 2);
    bson_destroy(&j);
    bson_destroy(&arr);

    /* nothing on the draining shard: nothing to move */
    const char *c[] = {"s0", "s1", "s1"};
    chunks_on(&arr, c, 3);
    CHECK(!sbl_bal_drain_pick(&arr, takers, 3, draining, 1, NULL, &min, &max, &to));
    /* no shard takes chunks */
    bson_destroy(&arr);
    chunks_on(&arr, b, 3);
    CHECK(!sbl_bal_drain_pick(&arr, takers, 0, draining, 1, NULL, &min, &max, &to));
    /* a shard neither taking nor draining (removed meanwhile) is ignored */
    char one[1][SBL_BAL_SHARD_ID] = {"s9"};
    CHECK(!sbl_bal_drain_pick(&arr, takers, 3, one, 1, NULL, &min, &max, &to));
    bson_destroy(&arr);
    return CHECK_DONE("test_bal_drain");
}
