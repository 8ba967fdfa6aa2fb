/*
 * test_bal_size.c: the balancer's data-size rule (src/cmd/bal_size.c)
 * without a cluster: a migration is due from the shard with the most data to
 * the one with the least once they differ by 3 chunk sizes, not below;
 * chunk counts play no part; only the shards allowed (a zone's, not
 * draining) are compared; a whole chunk moves only when that narrows the gap.
 */
#include "check.h"
#include "cmd/bal_size.h"

#include <stddef.h>

#define MIB ((int64_t)1024 * 1024)

int main(void)
{
    int from = -1, to = -1;

    /* 10 MiB against 3 MiB with a 1 MiB chunk size: 7 >= 3, due */
    int64_t a[] = {10 * MIB, 3 * MIB};
    CHECK(sbl_bal_size_pick(a, NULL, 2, MIB, &from, &to));
    CHECK(from == 0 && to == 1);

    /* exactly 3 chunk sizes apart is due; one byte less is balanced */
    int64_t b[] = {MIB, 4 * MIB};
    CHECK(sbl_bal_size_pick(b, NULL, 2, MIB, &from, &to));
    CHECK(from == 1 && to == 0);
    int64_t c[] = {MIB + 1, 4 * MIB};
    from = to = -1;
    CHECK(!sbl_bal_size_pick(c, NULL, 2, MIB, &from, &to));
    CHECK(from == -1 && to == -1); /* untouched */

    /* the default 128 MiB chunk size: 300 MiB apart is balanced, 384 is not */
    int64_t d[] = {300 * MIB, 0, 150 * MIB};
    CHECK(!sbl_bal_size_pick(d, NULL, 3, 128 * MIB, &from, &to));
    d[0] = 384 * MIB;
    CHECK(sbl_bal_size_pick(d, NULL, 3, 128 * MIB, &from, &to));
    CHECK(from == 0 && to == 1);

    /* three shards: most and least, ties to the first */
    int64_t e[] = {2 * MIB, 9 * MIB, 2 * MIB, 9 * MIB};
    CHECK(sbl_bal_size_pick(e, NULL, 4, MIB, &from, &to));
    CHECK(from == 1 && to == 0);

    /* only the shards allowed: shard 0 (emptiest) is outside the zone */
    bool may[] = {false, true, true, true};
    int64_t f[] = {0, 9 * MIB, 7 * MIB, 8 * MIB};
    CHECK(!sbl_bal_size_pick(f, may, 4, MIB, &from, &to));
    f[2] = 5 * MIB;
    CHECK(sbl_bal_size_pick(f, may, 4, MIB, &from, &to));
    CHECK(from == 1 && to == 2);

    /* one shard, or none, allowed: nothing to balance */
    bool one[] = {false, true, false, false};
    CHECK(!sbl_bal_size_pick(f, one, 4, MIB, &from, &to));
    CHECK(!sbl_bal_size_pick(f, NULL, 0, MIB, &from, &to));
    CHECK(!sbl_bal_size_pick(f, NULL, 1, MIB, &from, &to));

    /* all empty: balanced whatever the chunk size */
    int64_t g[] = {0, 0};
    CHECK(!sbl_bal_size_pick(g, NULL, 2, 0, &from, &to));

    /* a whole chunk moves only when it narrows the gap */
    CHECK(sbl_bal_size_narrows(10 * MIB, 0, 4 * MIB));
    CHECK(sbl_bal_size_narrows(10 * MIB, 0, 10 * MIB - 1));
    CHECK(!sbl_bal_size_narrows(10 * MIB, 0, 10 * MIB)); /* would swap them */
    CHECK(!sbl_bal_size_narrows(10 * MIB, 5 * MIB, 6 * MIB));
    CHECK(!sbl_bal_size_narrows(10 * MIB, 0, 0)); /* moves nothing */
    return CHECK_DONE("test_bal_size");
}
