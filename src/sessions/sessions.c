/*
 * sessions.c: the logical session catalog: a hash table of sessions keyed
 * by (id, uid), in stripes with a mutex each, so the touch every command
 * makes takes one uncontended lock.  Ended sessions wait in a small list
 * until the command layer removes their records from config.system.sessions.
 *
 * What must stay true: the catalog holds each (id, uid) at most once; the
 * ended list is bounded (older entries are dropped: their records then
 * expire through the TTL index instead).
 */
#include "sessions/sessions.h"

#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSTRIPES 16
#define NBUCKETS 256 /* per stripe */
#define ENDED_MAX 4096

typedef struct entry {
    sbl_lsess_info_t info;
    struct entry *next;
    sbl_lsess_state_t *state; /* kept by sbl_lsess_checkin_state, or NULL */
} entry_t;

typedef struct stripe {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a session of this stripe was checked in */
    entry_t *buckets[NBUCKETS];
    size_t n;
} stripe_t;

static stripe_t stripes[NSTRIPES];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t ended_mu = PTHREAD_MUTEX_INITIALIZER;
static sbl_lsid_t ended[ENDED_MAX];
static size_t nended;

static void init_stripes(void)
{
    for (int i = 0; i < NSTRIPES; i++) {
        pthread_mutex_init(&stripes[i].mu, NULL);
        pthread_cond_init(&stripes[i].cv, NULL);
    }
}

/* The id is a random UUID: its bytes are a good hash already. */
static uint64_t hash_of(const sbl_lsid_t *l)
{
    uint64_t h;
    memcpy(&h, l->id, sizeof(h));
    return h ^ ((uint64_t)l->uid[0] << 8 | l->uid[1]);
}

static stripe_t *stripe_of(const sbl_lsid_t *l, entry_t ***bucketp)
{
    pthread_once(&init_once, init_stripes);
    uint64_t h = hash_of(l);
    stripe_t *s = &stripes[h % NSTRIPES];
    *bucketp = &s->buckets[(h / NSTRIPES) % NBUCKETS];
    return s;
}

static bool same(const sbl_lsid_t *a, const sbl_lsid_t *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

void sbl_lsid_uid(const char *user, const char *db, uint8_t uid[32])
{
    char name[320] = "";
    if (user != NULL && user[0] != '\0')
        snprintf(name, sizeof(name), "%s@%s", user, db != NULL ? db : "");
    SHA256((const unsigned char *)name, strlen(name), uid);
}

int sbl_lsid_parse(const bson_iter_t *it, const char *field, const uint8_t owner_uid[32],
                   bool any_uid, sbl_lsid_t *out, sbl_err_t *err)
{
    bson_iter_t f;
    bool has_id = false;

    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &f))
        return sbl_err_set(err, SBL_E_TypeMismatch,
                           "BSON field '%s' is the wrong type '%s', expected type 'object'",
                           field, bson_iter_type(it) == BSON_TYPE_ARRAY ? "array" : "scalar");
    memcpy(out->uid, owner_uid, sizeof(out->uid));
    /* What drivers send, {id: UUID} and nothing else, read in place (every
     * command of a session: libbson's walk cost ~350 instructions). */
    uint32_t dlen;
    const uint8_t *d;
    bson_iter_document(it, &dlen, &d);
    if (dlen == 30 && d[4] == BSON_TYPE_BINARY && memcmp(d + 5, "id\0\x10\0\0\0\x04", 8) == 0 &&
        d[29] == 0) {
        memcpy(out->id, d + 13, 16);
        return 0;
    }
    while (bson_iter_next(&f)) {
        const char *k = bson_iter_key(&f);
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        if (strcmp(k, "id") == 0) {
            if (!BSON_ITER_HOLDS_BINARY(&f))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "BSON field '%s.id' is the wrong type, expected type 'binData'",
                                   field);
            bson_iter_binary(&f, &st, &len, &data);
            if (st != BSON_SUBTYPE_UUID || len != 16)
                return sbl_err_set(err, SBL_E_BadValue,
                                   "BSON field '%s.id' must be a UUID (binData subtype 4, 16 bytes)",
                                   field);
            memcpy(out->id, data, 16);
            has_id = true;
        } else if (strcmp(k, "uid") == 0) {
            if (!BSON_ITER_HOLDS_BINARY(&f))
                return sbl_err_set(err, SBL_E_TypeMismatch,
                                   "BSON field '%s.uid' is the wrong type, expected type 'binData'",
                                   field);
            bson_iter_binary(&f, &st, &len, &data);
            if (len != 32 || (!any_uid && memcmp(data, owner_uid, 32) != 0))
                return sbl_err_set(err, SBL_E_Unauthorized,
                                   "Unauthorized to use a session belonging to another user");
            memcpy(out->uid, data, 32);
        } else {
            return sbl_err_set(err, 40415, "BSON field '%s.%s' is an unknown field.", field, k);
        }
    }
    if (!has_id)
        return sbl_err_set(err, 40414, "BSON field '%s.id' is missing but a required field",
                           field);
    return 0;
}

void sbl_lsid_append(bson_t *doc, const char *key, const sbl_lsid_t *l)
{
    bson_t sub;
    bson_append_document_begin(doc, key, -1, &sub);
    BSON_APPEND_BINARY(&sub, "id", BSON_SUBTYPE_UUID, l->id, 16);
    BSON_APPEND_BINARY(&sub, "uid", BSON_SUBTYPE_BINARY, l->uid, 32);
    bson_append_document_end(doc, &sub);
}

/* The session's entry, added when new (stripe locked); NULL when out of memory. */
static entry_t *find_or_add(stripe_t *s, entry_t **bucket, const sbl_lsid_t *l, const char *user)
{
    entry_t *e;
    for (e = *bucket; e != NULL; e = e->next)
        if (same(&e->info.lsid, l))
            return e;
    if ((e = calloc(1, sizeof(*e))) != NULL) {
        e->info.lsid = *l;
        e->info.txn_number = -1;
        snprintf(e->info.user, sizeof(e->info.user), "%s", user != NULL ? user : "");
        e->next = *bucket;
        *bucket = e;
        s->n++;
    }
    return e;
}

void sbl_lsess_touch(const sbl_lsid_t *l, const char *user, int64_t now_ms)
{
    entry_t **bucket, *e;
    stripe_t *s = stripe_of(l, &bucket);
    pthread_mutex_lock(&s->mu);
    e = find_or_add(s, bucket, l, user);
    if (e != NULL && now_ms > e->info.last_use_ms)
        e->info.last_use_ms = now_ms;
    pthread_mutex_unlock(&s->mu);
}

int64_t sbl_lsess_checkout(const sbl_lsid_t *l, const char *user, int64_t now_ms)
{
    return sbl_lsess_checkout_state(l, user, now_ms, NULL);
}

int64_t sbl_lsess_checkout_state(const sbl_lsid_t *l, const char *user, int64_t now_ms,
                                 sbl_lsess_state_t *state)
{
    entry_t **bucket, *e;
    stripe_t *s = stripe_of(l, &bucket);
    int64_t txn = -1;
    if (state != NULL)
        state->len = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        e = find_or_add(s, bucket, l, user);
        if (e == NULL || !e->info.checked_out)
            break;
        pthread_cond_wait(&s->cv, &s->mu); /* the entry may be gone after: find it again */
    }
    if (e != NULL) {
        e->info.checked_out = true;
        if (now_ms > e->info.last_use_ms)
            e->info.last_use_ms = now_ms;
        txn = e->info.txn_number;
        if (state != NULL && e->state != NULL) {
            state->len = e->state->len;
            memcpy(state->data, e->state->data, e->state->len);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return txn;
}

void sbl_lsess_checkin(const sbl_lsid_t *l, int64_t txn_number)
{
    sbl_lsess_checkin_state(l, txn_number, NULL);
}

void sbl_lsess_checkin_state(const sbl_lsid_t *l, int64_t txn_number,
                             const sbl_lsess_state_t *state)
{
    entry_t **bucket, *e;
    stripe_t *s = stripe_of(l, &bucket);
    pthread_mutex_lock(&s->mu);
    for (e = *bucket; e != NULL; e = e->next)
        if (same(&e->info.lsid, l)) {
            e->info.checked_out = false;
            if (txn_number > e->info.txn_number)
                e->info.txn_number = txn_number;
            if (state == NULL || state->len == 0 || state->len > SBL_LSESS_STATE_MAX) {
                if (e->state != NULL)
                    e->state->len = 0;
            } else if (e->state != NULL || (e->state = malloc(sizeof(*e->state))) != NULL) {
                e->state->len = state->len;
                memcpy(e->state->data, state->data, state->len);
            }
            break;
        }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void note_ended(const sbl_lsid_t *l)
{
    pthread_mutex_lock(&ended_mu);
    if (nended == ENDED_MAX) { /* drop the oldest: its record expires by TTL instead */
        memmove(ended, ended + 1, (ENDED_MAX - 1) * sizeof(ended[0]));
        nended--;
    }
    ended[nended++] = *l;
    pthread_mutex_unlock(&ended_mu);
}

bool sbl_lsess_end(const sbl_lsid_t *l)
{
    entry_t **bucket, **pp, *e = NULL;
    stripe_t *s = stripe_of(l, &bucket);
    pthread_mutex_lock(&s->mu);
    for (pp = bucket; *pp != NULL; pp = &(*pp)->next)
        if (same(&(*pp)->info.lsid, l)) {
            e = *pp;
            *pp = e->next;
            s->n--;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    if (e == NULL)
        return false;
    free(e->state);
    free(e);
    note_ended(l);
    return true;
}

/* Copy out every session (under each stripe's lock in turn). */
static sbl_lsess_info_t *snapshot(size_t *np)
{
    size_t n = 0, cap = 0;
    sbl_lsess_info_t *v = NULL;
    pthread_once(&init_once, init_stripes);
    for (int i = 0; i < NSTRIPES; i++) {
        stripe_t *s = &stripes[i];
        pthread_mutex_lock(&s->mu);
        if (n + s->n > cap) {
            size_t ncap = (n + s->n) * 2 + 16;
            sbl_lsess_info_t *nv = realloc(v, ncap * sizeof(*v));
            if (nv == NULL) {
                pthread_mutex_unlock(&s->mu);
                break;
            }
            v = nv;
            cap = ncap;
        }
        for (int b = 0; b < NBUCKETS; b++)
            for (entry_t *e = s->buckets[b]; e != NULL; e = e->next)
                v[n++] = e->info;
        pthread_mutex_unlock(&s->mu);
    }
    *np = n;
    return v;
}

void sbl_lsess_foreach(sbl_lsess_visit_fn fn, void *arg)
{
    size_t n;
    sbl_lsess_info_t *v = snapshot(&n);
    for (size_t i = 0; i < n; i++)
        if (!fn(&v[i], arg))
            break;
    free(v);
}

size_t sbl_lsess_reap(int64_t now_ms, int64_t timeout_ms, sbl_lsess_visit_fn fn, void *arg)
{
    size_t reaped = 0;
    pthread_once(&init_once, init_stripes);
    for (int i = 0; i < NSTRIPES; i++) {
        stripe_t *s = &stripes[i];
        entry_t *dead = NULL;
        pthread_mutex_lock(&s->mu);
        for (int b = 0; b < NBUCKETS; b++)
            for (entry_t **pp = &s->buckets[b]; *pp != NULL;) {
                entry_t *e = *pp;
                if (e->info.last_use_ms < now_ms - timeout_ms && !e->info.checked_out) {
                    *pp = e->next;
                    s->n--;
                    e->next = dead;
                    dead = e;
                } else {
                    pp = &e->next;
                }
            }
        pthread_mutex_unlock(&s->mu);
        while (dead != NULL) {
            entry_t *next = dead->next;
            if (fn != NULL)
                fn(&dead->info, arg);
            free(dead->state);
            free(dead);
            dead = next;
            reaped++;
        }
    }
    return reaped;
}

size_t sbl_lsess_take_ended(sbl_lsid_t *out, size_t max)
{
    pthread_mutex_lock(&ended_mu);
    size_t n = nended < max ? nended : max;
    memcpy(out, ended, n * sizeof(ended[0]));
    memmove(ended, ended + n, (nended - n) * sizeof(ended[0]));
    nended -= n;
    pthread_mutex_unlock(&ended_mu);
    return n;
}

size_t sbl_lsess_count(void)
{
    size_t n = 0;
    pthread_once(&init_once, init_stripes);
    for (int i = 0; i < NSTRIPES; i++) {
        pthread_mutex_lock(&stripes[i].mu);
        n += stripes[i].n;
        pthread_mutex_unlock(&stripes[i].mu);
    }
    return n;
}

void sbl_lsess_clear(void)
{
    sbl_lsess_reap(INT64_MAX / 2, 0, NULL, NULL); /* every real last use is earlier */
    pthread_mutex_lock(&ended_mu);
    nended = 0;
    pthread_mutex_unlock(&ended_mu);
}
