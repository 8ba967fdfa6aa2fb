/*
 * auth_ctime.c: signing and checking $clusterTime with the keys of
 * admin.system.keys (mongod's TimeProofService and LogicalTimeValidator):
 * one cache of keys per process, filled by its owner (repl_keys.c on a
 * member, the router from its config servers and shards).
 *
 * What must stay true: a hash is compared in constant time; a key is used
 * only while its expiresAt is after the time it signs or checks.
 */
#include "auth/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/clock.h"

#define MAX_KEYS 256
#define RANGE_MASK 0xFFFFull
#define RELOAD_MIN_MS 500

static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;
static sbl_ctime_key_t keys[MAX_KEYS];
static int nkeys;
static atomic_llong last_reload_ms;

static void proof(const uint8_t *key, uint64_t ts, uint8_t out[SBL_CTIME_KEY_LEN])
{
    uint64_t t = ts | RANGE_MASK;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(t >> (8 * i));
    unsigned int n = SBL_CTIME_KEY_LEN;
    HMAC(EVP_sha1(), key, SBL_CTIME_KEY_LEN, le, sizeof(le), out, &n);
}

bool sbl_ctime_key_parse(const bson_t *doc, sbl_ctime_key_t *k)
{
    bson_iter_t it;
    const uint8_t *bin = NULL;
    uint32_t len = 0, t = 0, i = 0;
    bson_subtype_t sub;
    if (!bson_iter_init_find(&it, doc, "purpose") || !BSON_ITER_HOLDS_UTF8(&it) ||
        strcmp(bson_iter_utf8(&it, NULL), "HMAC") != 0 ||
        !bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_NUMBER(&it))
        return false;
    k->id = bson_iter_as_int64(&it);
    if (!bson_iter_init_find(&it, doc, "key") || !BSON_ITER_HOLDS_BINARY(&it))
        return false;
    bson_iter_binary(&it, &sub, &len, &bin);
    if (len != SBL_CTIME_KEY_LEN || !bson_iter_init_find(&it, doc, "expiresAt") ||
        !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return false;
    bson_iter_timestamp(&it, &t, &i);
    memcpy(k->key, bin, SBL_CTIME_KEY_LEN);
    k->expires = ((uint64_t)t << 32) | i;
    return true;
}

void sbl_ctime_keys_set(const sbl_ctime_key_t *in, int n)
{
    if (n > MAX_KEYS)
        n = MAX_KEYS;
    pthread_mutex_lock(&keys_lock);
    memcpy(keys, in, (size_t)n * sizeof(keys[0]));
    OPENSSL_cleanse(keys + n, (size_t)(nkeys > n ? nkeys - n : 0) * sizeof(keys[0]));
    nkeys = n;
    pthread_mutex_unlock(&keys_lock);
}

int sbl_ctime_keys_valid(uint64_t ts, uint64_t *newest)
{
    int n = 0;
    *newest = 0;
    pthread_mutex_lock(&keys_lock);
    for (int i = 0; i < nkeys; i++)
        if (keys[i].expires > ts) {
            n++;
            if (keys[i].expires > *newest)
                *newest = keys[i].expires;
        }
    pthread_mutex_unlock(&keys_lock);
    return n;
}

bool sbl_ctime_sign(uint64_t ts, uint8_t hash[SBL_CTIME_KEY_LEN], int64_t *key_id)
{
    uint8_t key[SBL_CTIME_KEY_LEN];
    int best = -1;
    pthread_mutex_lock(&keys_lock);
    for (int i = 0; i < nkeys; i++)
        if (keys[i].expires > ts && (best < 0 || keys[i].expires < keys[best].expires))
            best = i;
    if (best >= 0) {
        memcpy(key, keys[best].key, sizeof(key));
        *key_id = keys[best].id;
    }
    pthread_mutex_unlock(&keys_lock);
    if (best < 0)
        return false;
    proof(key, ts, hash);
    OPENSSL_cleanse(key, sizeof(key));
    return true;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The document is encoded here and appended once: it goes on every reply
 * of a replica set member, and libbson's nested appends cost several times
 * more than its 88 bytes.  Its layout: {clusterTime: Timestamp,
 * signature: {hash: BinData(0, 20 bytes), keyId: NumberLong}}. */
void sbl_ctime_append(bson_t *r, uint64_t ts, const uint8_t hash[SBL_CTIME_KEY_LEN],
                      int64_t key_id)
{
    enum { SIG_LEN = 4 + 11 + SBL_CTIME_KEY_LEN + 15 + 1, LEN = 4 + 21 + 11 + SIG_LEN + 1 };
    uint8_t b[LEN], *p = b;
    bson_t ct;
    put_le(p, LEN, 4);
    p += 4;
    memcpy(p, "\x11" "clusterTime", 13); /* a timestamp: increment, then seconds */
    put_le(p + 13, ts, 8);
    p += 21;
    memcpy(p, "\x03" "signature", 11);
    p += 11;
    put_le(p, SIG_LEN, 4);
    memcpy(p + 4, "\x05" "hash", 6); /* binary: length, subtype 0, bytes */
    put_le(p + 10, SBL_CTIME_KEY_LEN, 4);
    p[14] = BSON_SUBTYPE_BINARY;
    memcpy(p + 15, hash, SBL_CTIME_KEY_LEN);
    p += 15 + SBL_CTIME_KEY_LEN;
    memcpy(p, "\x12" "keyId", 7);
    put_le(p + 7, (uint64_t)key_id, 8);
    p[15] = 0; /* signature's end */
    p[16] = 0; /* the document's */
    if (bson_init_static(&ct, b, LEN))
        bson_append_document(r, "$clusterTime", 12, &ct);
}

bool sbl_ctime_parse(const bson_iter_t *ct, uint64_t *ts, const uint8_t **hash, int64_t *key_id)
{
    bson_iter_t f, sig;
    uint32_t t, i, len = 0;
    *hash = NULL;
    *key_id = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(ct) || !bson_iter_recurse(ct, &f) ||
        !bson_iter_find(&f, "clusterTime") || !BSON_ITER_HOLDS_TIMESTAMP(&f))
        return false;
    bson_iter_timestamp(&f, &t, &i);
    *ts = ((uint64_t)t << 32) | i;
    if (!bson_iter_recurse(ct, &f) || !bson_iter_find(&f, "signature") ||
        !BSON_ITER_HOLDS_DOCUMENT(&f) || !bson_iter_recurse(&f, &sig))
        return true;
    const uint8_t *h = NULL;
    bool has_id = false;
    while (bson_iter_next(&sig)) {
        const char *k = bson_iter_key(&sig);
        if (strcmp(k, "hash") == 0 && BSON_ITER_HOLDS_BINARY(&sig)) {
            bson_subtype_t sub;
            bson_iter_binary(&sig, &sub, &len, &h);
        } else if (strcmp(k, "keyId") == 0 && BSON_ITER_HOLDS_NUMBER(&sig)) {
            *key_id = bson_iter_as_int64(&sig);
            has_id = true;
        }
    }
    if (h != NULL && len == SBL_CTIME_KEY_LEN && has_id)
        *hash = h;
    return true;
}

/* Whether some cached key keyId valid at ts signs ts as hash (several sets
 * may hold keys with the same id: the router's cache holds them all). */
static bool matches(int64_t key_id, uint64_t ts, const uint8_t *hash, bool *known)
{
    sbl_ctime_key_t cand[8];
    int n = 0;
    pthread_mutex_lock(&keys_lock);
    for (int i = 0; i < nkeys && n < 8; i++)
        if (keys[i].id == key_id && keys[i].expires > ts)
            cand[n++] = keys[i];
    pthread_mutex_unlock(&keys_lock);
    *known = n > 0;
    bool ok = false;
    for (int i = 0; i < n && !ok; i++) {
        uint8_t mine[SBL_CTIME_KEY_LEN];
        proof(cand[i].key, ts, mine);
        ok = CRYPTO_memcmp(mine, hash, SBL_CTIME_KEY_LEN) == 0;
    }
    OPENSSL_cleanse(cand, sizeof(cand));
    return ok;
}

int sbl_ctime_check(const bson_iter_t *ct, uint64_t last_valid, void (*reload)(void),
                    sbl_err_t *err)
{
    uint64_t ts;
    const uint8_t *hash;
    int64_t key_id;
    if (!sbl_ctime_parse(ct, &ts, &hash, &key_id) || ts <= last_valid)
        return 0;
    if (hash == NULL)
        return sbl_err_set(err, SBL_E_NoSuchKey, "Missing expected field \"signature\"");
    bool known;
    bool ok = matches(key_id, ts, hash, &known);
    if (!known && reload != NULL &&
        sbl_now_ms() - atomic_load(&last_reload_ms) >= RELOAD_MIN_MS) {
        atomic_store(&last_reload_ms, sbl_now_ms());
        reload(); /* a key written since the cache was filled */
        ok = matches(key_id, ts, hash, &known);
    }
    if (!known)
        return sbl_err_set(err, SBL_E_KeyNotFound, "No keys found for HMAC that is valid for "
                           "time: { ts: Timestamp(%u, %u) } with id: %lld",
                           (unsigned)(ts >> 32), (unsigned)ts, (long long)key_id);
    if (!ok)
        return sbl_err_set(err, SBL_E_TimeProofMismatch, "Proof does not match the cluster time");
    return 0;
}
